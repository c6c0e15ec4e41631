"""The agent's own counters as frozen snapshots whose fields declare their metric.

Why: the sender's counters used to reach ``/metrics`` through a string-keyed dict that the
exporter mapped to metric names by hand, and three of them (messages Kafka rejected,
spool write errors, spool corruption) never got there: a loss was counted and nobody
could see it. Here a snapshot class declares every field with :func:`counter` or
:func:`gauge` (metric name and help), :func:`families` renders every field of any
snapshot, and :func:`snapshot` refuses, when the class is defined, a field declared
without one. Adding a counter therefore adds its metric; forgetting is not possible.
:func:`rows` is the table of all of them (metric, type, help, the field it comes from),
like the metric catalog for the GPU's own metrics; a test checks every row is on
``/metrics``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar, Protocol, TypeVar, cast, dataclass_transform

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

_KIND = "gpuwatch_kind"
_NAME = "gpuwatch_metric"
_HELP = "gpuwatch_help"


class Snapshot(Protocol):
    """A dataclass instance made by a :func:`snapshot` class."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


S = TypeVar("S")
_CLASSES: list[type[Any]] = []  # every snapshot class, in definition order


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One of the agent's own metrics: its name in the text format, type, help and source field."""

    name: str
    kind: str  # "counter" or "gauge"
    help: str
    source: str  # "<snapshot class>.<field>"


def counter(name: str, help_text: str, *, default: float = 0) -> Any:
    """A counter field (exposed as ``<name>_total``); ``name`` without the suffix."""
    return dataclasses.field(default=default, metadata={_KIND: "counter", _NAME: name, _HELP: help_text})


def gauge(name: str, help_text: str, *, default: float = 0) -> Any:
    """A gauge field."""
    return dataclasses.field(default=default, metadata={_KIND: "gauge", _NAME: name, _HELP: help_text})


@dataclass_transform(frozen_default=True, field_specifiers=(counter, gauge))
def snapshot(cls: type[S]) -> type[S]:
    """Make ``cls`` a frozen dataclass whose every field is a :func:`counter` or :func:`gauge`."""
    made: Any = dataclasses.dataclass(frozen=True, slots=True)(cls)
    for f in dataclasses.fields(made):
        if _KIND not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with counter() or gauge(): "
                            "it would never reach /metrics")
    _CLASSES.append(made)
    return cast("type[S]", made)


def rows() -> list[Row]:
    """Every metric every snapshot class declares (the classes of the modules imported so far)."""
    return [Row(_exposed(f), f.metadata[_KIND], f.metadata[_HELP], f"{cls.__name__}.{f.name}")
            for cls in _CLASSES for f in dataclasses.fields(cls)]


def _exposed(f: dataclasses.Field[Any]) -> str:
    return str(f.metadata[_NAME]) + ("_total" if f.metadata[_KIND] == "counter" else "")


def families(snapshots: Iterable[Snapshot]) -> Iterator[Metric]:
    """One Prometheus family per field of each snapshot."""
    for snap in snapshots:
        for f in dataclasses.fields(snap):
            value = float(getattr(snap, f.name))
            family = CounterMetricFamily if f.metadata[_KIND] == "counter" else GaugeMetricFamily
            yield family(f.metadata[_NAME], f.metadata[_HELP], value=value)


def metric_names(cls: type[Any]) -> list[str]:
    """The names a snapshot class exposes, as they appear in the text format (counters with ``_total``)."""
    return [_exposed(f) for f in dataclasses.fields(cls)]


def as_dict(*snapshots: Any) -> dict[str, Any]:
    """The fields of the snapshots in one dict (for logs, benchmarks and tests)."""
    out: dict[str, Any] = {}
    for snap in snapshots:
        out.update({f.name: getattr(snap, f.name) for f in dataclasses.fields(snap)})
    return out
