"""Records and events are frozen, and their fast ``__init__`` behaves as the dataclass's would."""

from __future__ import annotations

import dataclasses

import pytest

from telemetry.records import EventRecord, GpuRecord, ProcessRecord, parse_line


def test_records_are_frozen_and_derived_by_replace() -> None:
    line = ('{"ts": 1.5, "node": "n0", "gpu": "GPU-a", "gpu_index": 2, "model": "NVIDIA H200", '
            '"metrics": {"DCGM_FI_DEV_GPU_TEMP": 61}, "processes": [{"pid": 7, "pod": "p", "sm_util": 40}]}')
    record = parse_line(line)
    assert record == GpuRecord(1.5, "n0", "GPU-a", {"DCGM_FI_DEV_GPU_TEMP": 61}, 2, "NVIDIA H200",
                               [ProcessRecord(7, sm_util=40, pod="p")])
    event = EventRecord(1.0, "n0", "GPU-a", "xid", 13)
    for obj, name in ((record, "ts"), (record.processes[0], "pid"), (event, "code")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, name, 0)
    moved = dataclasses.replace(record, node="n1")
    assert (moved.node, record.node, moved.processes) == ("n1", "n0", record.processes)
    a, b = GpuRecord(0.0, "n", "g", {}), GpuRecord(0.0, "n", "g", {})
    assert a.processes == [] and a.processes is not b.processes  # the default factory, once per record
    assert GpuRecord(ts=0.0, node="n", gpu="g", metrics={}, parent_gpu="GPU-p").parent_gpu == "GPU-p"
    with pytest.raises(TypeError):
        GpuRecord(0.0, "n", "g")  # type: ignore[call-arg]
