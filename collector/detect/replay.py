"""Running the detectors over a recorded trace, as ``gpuwatch replay`` and the benchmarks do.

Why here and not in the command: the incident benchmark, the speed benchmark and the
tests replay traces too, and they must run exactly what the command runs. Bad lines
(:class:`~telemetry.records.BadLine`) are counted and handed to a callback; they never
stop a replay.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from collector.detect.anomaly import Anomaly
from collector.detect.engine import AnomalyLog, DetectionEngine
from collector.detect.finding import DetectorConfig
from telemetry.records import BadLine, GpuRecord, ProcessRecord, RecordError, parse_line

_KEYS = ("ts", "node", "gpu", "metrics", "gpu_index", "processes", "model", "pci_bus_id", "driver_version",
         "mig_profile", "parent_gpu")
_PROC_KEYS = ("pid", "name", "used_memory_mib", "sm_util", "mem_util", "namespace", "pod", "container", "service")
_NUMERIC = frozenset({int, float})
_STR_OR_NONE = frozenset({str, type(None)})
_NUM_OR_NONE = frozenset({int, float, type(None)})


def _fast(line: str) -> GpuRecord | None:
    """The common, well-formed line without the general parser's per-field checks (decoded by
    orjson: half of a replay's time was the standard library's JSON decoder); None if anything
    is unusual, and the caller then asks :func:`telemetry.records.parse_line`, so the
    result (and every error message) is exactly the contract's. The fields are looked up in
    one pass (``map``) and checked by their classes, without a call per process."""
    try:
        obj = orjson.loads(line)  # strict RFC 8259 (no NaN, no trailing text): anything else is the parser's
    except orjson.JSONDecodeError:
        return None
    if obj.__class__ is not dict:
        return None
    ts, node, gpu, metrics, index, procs, model, pci, driver, mig, parent = map(obj.get, _KEYS)
    if (ts.__class__ is not float and ts.__class__ is not int) or node.__class__ is not str or not node \
            or gpu.__class__ is not str or not gpu or metrics.__class__ is not dict or not math.isfinite(ts):
        return None
    if not _NUMERIC.issuperset(map(type, metrics.values())):
        return None  # a non-numeric (or null, or boolean) metric: the contract's parser decides
    if index is not None and index.__class__ is not int:
        return None
    if model.__class__ not in _STR_OR_NONE or pci.__class__ not in _STR_OR_NONE \
            or driver.__class__ not in _STR_OR_NONE or mig.__class__ not in _STR_OR_NONE \
            or parent.__class__ not in _STR_OR_NONE:
        return None
    processes = []
    if procs:
        if procs.__class__ is not list:
            return None
        for p in procs:
            if p.__class__ is not dict:
                return None
            # ProcessRecord's fields in its order, checked by their classes (no bool, no NaN)
            pid, name, used, sm, mem, namespace, pod, container, service = map(p.get, _PROC_KEYS)
            if pid.__class__ is not int or name.__class__ not in _STR_OR_NONE \
                    or used.__class__ not in _NUM_OR_NONE or sm.__class__ not in _NUM_OR_NONE \
                    or mem.__class__ not in _NUM_OR_NONE or namespace.__class__ not in _STR_OR_NONE \
                    or pod.__class__ not in _STR_OR_NONE or container.__class__ not in _STR_OR_NONE \
                    or service.__class__ not in _STR_OR_NONE:
                return None
            processes.append(ProcessRecord(pid, name, used, sm, mem, namespace, pod, container, service))
    return GpuRecord(float(ts), node, gpu, metrics, index, model, processes, pci, driver, mig, parent)


def read_trace(path: str | Path) -> Iterator[GpuRecord | BadLine]:
    """Like :func:`telemetry.records.read_jsonl`, with a fast path for well-formed lines."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        yield from iter_trace(fh, str(path))


def iter_trace(lines: Iterable[str], path: str = "<stream>") -> Iterator[GpuRecord | BadLine]:
    for number, line in enumerate(lines, start=1):
        record = _fast(line)
        if record is not None:
            yield record
            continue
        if not line.strip():
            continue
        try:
            yield parse_line(line)
        except RecordError as exc:
            yield BadLine(path, number, str(exc))


@dataclass(slots=True)
class ReplayResult:
    anomalies: list[Anomaly] = field(default_factory=list)
    records: int = 0
    bad_lines: int = 0


def replay(items: Iterable[GpuRecord | BadLine], config: DetectorConfig | None = None,
           on_bad: Callable[[BadLine], None] | None = None) -> ReplayResult:
    """Every anomaly the trace opens, in order of opening; open ones keep ``end`` None."""
    engine = DetectionEngine(config)
    result = ReplayResult()
    feed = engine.feed
    log = AnomalyLog()
    for item in items:
        if isinstance(item, BadLine):
            result.bad_lines += 1
            if on_bad is not None:
                on_bad(item)
            continue
        result.records += 1
        changes = feed(item)
        if changes:
            log.add(changes)
    result.anomalies = log.anomalies
    return result
