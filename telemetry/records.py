"""The record model shared by agent, collector, export and replay.

A :class:`GpuRecord` is one GPU at one sample time, exactly the JSON Lines object of
shared/design/TELEMETRY.md. Parsing is strict about what the contract requires (``ts``,
``node``, ``gpu``, numeric ``metrics``) and lenient about the rest (unknown keys are
ignored), so that producers and consumers can be upgraded in either order. Every
rejection raises :class:`RecordError` with a reason that names the field, and
:func:`read_jsonl` turns those into :class:`BadLine` items with file and line number, so a
replay never stops on one bad line.

Records are immutable (frozen dataclasses with slots): a record is a fact about one sample,
shared by the store, the detectors and the exporter, so nothing may change it on the way.
A derived record is a new one (``dataclasses.replace``). There is no validation in
``__init__`` (the parsers validate), and :func:`_slot_init` gives the two per-sample classes
an ``__init__`` that writes the slots directly: a frozen dataclass's own goes through
``object.__setattr__`` per field, which made a replay about 5% slower.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeAlias, TypeVar

_PROCESS_STR_FIELDS = ("name", "namespace", "pod", "container", "service")
_PROCESS_NUM_FIELDS = ("used_memory_mib", "sm_util", "mem_util")
_RECORD_OPT_STR_FIELDS = ("model", "pci_bus_id", "driver_version", "mig_profile", "parent_gpu")


GpuId: TypeAlias = str
"""A GPU's identity across the system: its UUID (``GPU-...``), or a MIG instance's (``MIG-...``)."""


class RecordError(ValueError):
    """A record that does not follow the telemetry contract; the message names the field."""


_T = TypeVar("_T")
_FACTORY = object()  # the default of a field with a default factory


def _slot_init(cls: type[_T]) -> type[_T]:
    """Replace a frozen slotted dataclass's ``__init__`` by one with the same signature that
    sets each slot through its descriptor (C), not through ``object.__setattr__``."""
    env: dict[str, Any] = {"_FACTORY": _FACTORY}
    params, body = [], []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        n = f.name
        env[f"_set_{n}"] = getattr(cls, n).__set__
        if f.default is not dataclasses.MISSING:
            env[f"_d_{n}"] = f.default
            params.append(f"{n}=_d_{n}")
            body.append(f"_set_{n}(self, {n})")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_f_{n}"] = f.default_factory
            params.append(f"{n}=_FACTORY")
            body.append(f"_set_{n}(self, _f_{n}() if {n} is _FACTORY else {n})")
        else:
            params.append(n)
            body.append(f"_set_{n}(self, {n})")
    exec(f"def __init__(self, {', '.join(params)}):\n    " + "\n    ".join(body), env)
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    setattr(cls, "__init__", init)  # noqa: B010
    return cls


@_slot_init
@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """One compute process on a GPU at one sample, with its Kubernetes identity if known."""

    pid: int
    name: str | None = None
    used_memory_mib: float | None = None
    sm_util: float | None = None
    mem_util: float | None = None
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    service: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pid": self.pid}
        for name in _PROCESS_STR_FIELDS + _PROCESS_NUM_FIELDS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


@_slot_init
@dataclass(frozen=True, slots=True)
class GpuRecord:
    """One GPU (or MIG instance) at one sample time."""

    ts: float
    node: str
    gpu: GpuId
    metrics: dict[str, float]
    gpu_index: int | None = None
    model: str | None = None
    processes: list[ProcessRecord] = field(default_factory=list)
    pci_bus_id: str | None = None
    driver_version: str | None = None
    mig_profile: str | None = None
    parent_gpu: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ts": self.ts, "node": self.node, "gpu": self.gpu}
        if self.gpu_index is not None:
            out["gpu_index"] = self.gpu_index
        for name in _RECORD_OPT_STR_FIELDS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out["metrics"] = {k: _json_number(v) for k, v in self.metrics.items()}
        out["processes"] = [p.to_dict() for p in self.processes]
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=True)


def _json_number(value: float) -> float | int | None:
    """NaN is not JSON; the contract writes a missing reading as absent, so NaN -> null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecordError(f"{where} must be a number, got {type(value).__name__} {value!r:.40}")
    return value


def _opt_str(obj: dict[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise RecordError(f"{where}{key} must be a string, got {type(value).__name__}")
    return value


def parse_process(obj: Any, where: str = "processes[]") -> ProcessRecord:
    if not isinstance(obj, dict):
        raise RecordError(f"{where} must be an object, got {type(obj).__name__}")
    if "pid" not in obj:
        raise RecordError(f"{where}.pid is required")
    pid = obj["pid"]
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise RecordError(f"{where}.pid must be an integer, got {pid!r:.40}")
    fields: dict[str, Any] = {name: _opt_str(obj, name, f"{where}.") for name in _PROCESS_STR_FIELDS}
    for name in _PROCESS_NUM_FIELDS:
        value = obj.get(name)
        if value is not None:
            fields[name] = _number(value, f"{where}.{name}")
    return ProcessRecord(pid=pid, **fields)


def parse_record(obj: Any) -> GpuRecord:
    """Validate one decoded JSON object against the contract and build a record."""
    if not isinstance(obj, dict):
        raise RecordError(f"record must be a JSON object, got {type(obj).__name__}")
    for key in ("ts", "node", "gpu", "metrics"):
        if key not in obj:
            raise RecordError(f"missing required key {key!r}")
    ts = _number(obj["ts"], "ts")
    if not math.isfinite(ts):
        raise RecordError("ts must be finite")
    node, gpu = obj["node"], obj["gpu"]
    if not isinstance(node, str) or not node:
        raise RecordError("node must be a non-empty string")
    if not isinstance(gpu, str) or not gpu:
        raise RecordError("gpu must be a non-empty string")
    raw_metrics = obj["metrics"]
    if not isinstance(raw_metrics, dict):
        raise RecordError("metrics must be an object")
    metrics: dict[str, float] = {}
    for key, value in raw_metrics.items():
        if value is None:
            continue  # written for NaN: an absent reading
        metrics[key] = _number(value, f"metrics.{key}")
    gpu_index = obj.get("gpu_index")
    if gpu_index is not None and (isinstance(gpu_index, bool) or not isinstance(gpu_index, int)):
        raise RecordError("gpu_index must be an integer")
    raw_procs = obj.get("processes") or []
    if not isinstance(raw_procs, list):
        raise RecordError("processes must be an array")
    processes = [parse_process(p, f"processes[{i}]") for i, p in enumerate(raw_procs)]
    optional = {name: _opt_str(obj, name, "") for name in _RECORD_OPT_STR_FIELDS}
    return GpuRecord(ts=float(ts), node=node, gpu=gpu, metrics=metrics, gpu_index=gpu_index,
                     processes=processes, **optional)


def parse_line(line: str) -> GpuRecord:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise RecordError(f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    return parse_record(obj)


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line that was skipped, with where it was and why."""

    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


def iter_jsonl(lines: Iterable[str], path: str = "<stream>") -> Iterator[GpuRecord | BadLine]:
    """Records from JSON Lines; bad lines come out as :class:`BadLine`, never as exceptions."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield parse_line(line)
        except RecordError as exc:
            yield BadLine(path, number, str(exc))


def read_jsonl(path: str | Path) -> Iterator[GpuRecord | BadLine]:
    with open(path, encoding="utf-8", errors="replace") as fh:
        yield from iter_jsonl(fh, str(path))


def write_jsonl(records: Iterable[GpuRecord], out: IO[str]) -> int:
    count = 0
    for record in records:
        out.write(record.to_json())
        out.write("\n")
        count += 1
    return count


@dataclass(frozen=True, slots=True)
class EventRecord:
    """Something that happened to a GPU at one time: an XID, a GPU lost or recovered.

    Events travel beside the samples (the collector stores them in its events table);
    ``code`` is the XID number for ``kind == "xid"``.
    """

    ts: float
    node: str
    gpu: GpuId
    kind: str
    code: int | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ts": self.ts, "node": self.node, "gpu": self.gpu, "kind": self.kind}
        if self.code is not None:
            out["code"] = self.code
        if self.detail:
            out["detail"] = self.detail
        return out
