"""The writer's column-wise fast path makes exactly the rows of the exact, record-by-record way.

:func:`collector.store.rows.fast_rows` may decline a batch (None), never convert it
differently: hypothesis draws batches that mix plain and awkward values (NaN and
infinities, ints in float columns and floats in integer columns, bools, out-of-range
integers, NUL bytes, non-ASCII text, unknown keys, processes or none) and compares the
two ways row by row, bits included.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.store.rows import fast_rows
from collector.store.writer import BadRecord, _prepare_record, prepare
from telemetry.records import GpuRecord, ProcessRecord

INT_KEY = "DCGM_FI_DEV_GPU_UTIL"
COUNTER_KEY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
FLOAT_KEY = "DCGM_FI_DEV_POWER_USAGE"
RATIO_KEY = "DCGM_FI_PROF_SM_ACTIVE"

PLAIN_INT = st.integers(min_value=0, max_value=10**12)
PLAIN_FLOAT = st.floats(min_value=0, max_value=1e6, allow_nan=False)
AWKWARD = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, True, 2**63, -(2**63) - 1, 2**2000, 3.5, 7.0]),
    st.integers(),
    st.floats(),
)
TEXT = st.one_of(st.sampled_from(["node-a", "gpu-node-00"]), st.text(max_size=6))


@st.composite
def batches(draw: st.DrawFn) -> list[GpuRecord]:
    awkward = draw(st.booleans())
    records = []
    for i in range(draw(st.integers(min_value=1, max_value=6))):
        metrics: dict[str, Any] = {}
        for key, plain in ((INT_KEY, PLAIN_INT), (COUNTER_KEY, PLAIN_INT), (FLOAT_KEY, PLAIN_FLOAT),
                           (RATIO_KEY, PLAIN_FLOAT)):
            if draw(st.integers(min_value=0, max_value=4)):
                metrics[key] = draw(AWKWARD if awkward and draw(st.booleans()) else plain)
        if awkward and draw(st.integers(min_value=0, max_value=5)) == 0:
            metrics["custom.metric"] = 1.5
        procs = [
            ProcessRecord(
                pid=draw(st.integers(min_value=1, max_value=2**31 - 1) if not awkward else st.integers()),
                name=draw(st.sampled_from(["python", None])),
                used_memory_mib=draw(st.one_of(st.none(), PLAIN_FLOAT, AWKWARD if awkward else PLAIN_FLOAT)),
                sm_util=draw(st.one_of(st.none(), PLAIN_INT)),
                mem_util=None,
                namespace=draw(TEXT if awkward else st.sampled_from(["research", None])),
                pod="trainer-1",
                container=None,
                service=draw(st.sampled_from(["llm", None])),
            )
            for _ in range(draw(st.integers(min_value=0, max_value=2)))
        ]
        records.append(GpuRecord(
            ts=1_764_489_600.0 + i + draw(st.sampled_from([0.0, 0.25])),
            node=draw(TEXT if awkward else st.just("node-a")),
            gpu=draw(st.sampled_from(["GPU-a", "GPU-b"])),
            metrics=metrics,
            model=draw(st.sampled_from(["NVIDIA H200", None])),
            processes=procs,
        ))
    return records


def _bits(value: object) -> object:
    return ("f", struct.pack("<d", value)) if isinstance(value, float) else (type(value).__name__, value)


def _row(row: tuple[Any, ...]) -> tuple[object, ...]:
    return tuple(map(_bits, row))


@settings(max_examples=300, deadline=None)
@given(batches())
def test_fast_rows_equal_the_exact_way_or_decline(records: list[GpuRecord]) -> None:
    try:
        exact = [_prepare_record(r) for r in records]
    except BadRecord:
        assert fast_rows(records) is None  # a bad batch is never taken the fast way
        return
    fast = fast_rows(records)
    if fast is None:
        return
    samples, processes, inventory = fast
    assert [_row(s) for s in samples] == [_row(s) for s, _, _ in exact]
    assert [_row(p) for p in processes] == [_row(p) for _, procs, _ in exact for p in procs]
    assert inventory == [a for _, _, a in exact]


def test_a_plain_agent_batch_takes_the_fast_way() -> None:
    records = [
        GpuRecord(ts=1_764_489_600.0 + i, node="node-a", gpu="GPU-a",
                  metrics={INT_KEY: 91, FLOAT_KEY: 412.5, RATIO_KEY: 0.87, COUNTER_KEY: 10**9 + i},
                  model="NVIDIA H200",
                  processes=[ProcessRecord(pid=55884, name="python", used_memory_mib=59500.0, sm_util=91.0,
                                           namespace="research", pod="trainer-1", service="llm")])
        for i in range(3)
    ]
    fast = fast_rows(records)
    assert fast is not None and len(fast[0]) == 3 and len(fast[1]) == 3
    assert prepare(records).samples == fast[0]


def test_nan_becomes_null_on_the_fast_way() -> None:
    records = [GpuRecord(ts=1.0, node="n", gpu="GPU-a", metrics={FLOAT_KEY: math.nan, RATIO_KEY: 0.5})]
    fast = fast_rows(records)
    assert fast is not None
    assert prepare(records).samples == fast[0]
    assert None in fast[0][0] and 0.5 in fast[0][0]
