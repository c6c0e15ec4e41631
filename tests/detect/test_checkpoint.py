"""A node's detector state saved and taken over by another engine judges on as if nothing
happened; a blob of another shape or of something else is refused, never run (issue 16, item 2)."""

from __future__ import annotations

import contextlib
import pickle
import zlib
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.detect import checkpoint
from collector.detect.engine import AnomalyLog, DetectionEngine
from collector.detect.level import ActivityLevel
from telemetry.records import EventRecord, GpuRecord
from tests.support.incidents.generate import Fleet


@cache
def _items() -> tuple[GpuRecord | EventRecord, ...]:
    return tuple(Fleet(nodes=4, hours=1.0, seed=23).records())


def _feed(engine: DetectionEngine, log: AnomalyLog, items: tuple[GpuRecord | EventRecord, ...]) -> None:
    for item in items:
        log.add(engine.feed(item) if isinstance(item, GpuRecord) else engine.feed_event(item))


def _table(log: AnomalyLog) -> list[tuple[str, str, float, float | None]]:
    return [(a.kind, a.gpu, a.start, a.end) for a in log.anomalies]


def test_an_engine_that_takes_a_saved_state_over_judges_as_the_first_would_have() -> None:
    items = _items()
    whole, whole_log = DetectionEngine(), AnomalyLog()
    _feed(whole, whole_log, items)
    half = len(items) // 2
    first, log = DetectionEngine(), AnomalyLog()
    _feed(first, log, items[:half])
    open_at_half = {a.key for a in first.open_anomalies()}
    assert open_at_half  # the handover happens with anomalies open
    second = DetectionEngine()
    for node in sorted({s.node for s in first.gpus.values()}):
        blob, shape = checkpoint.dump(first.node_state(node))
        assert len(blob) < 100_000  # a node of 8 GPUs after 30 minutes
        second.adopt(checkpoint.load(blob, shape))
    assert {a.key for a in second.open_anomalies()} == open_at_half
    _feed(second, log, items[half - 50:])  # the new owner re-reads a little: what it holds is not judged again
    assert _table(log) == _table(whole_log)


def test_without_the_state_the_second_engine_opens_what_was_open_again() -> None:
    """What the checkpoint prevents: a fresh engine reopens an anomaly open at the handover."""
    items = _items()
    half = len(items) // 2
    first, log = DetectionEngine(), AnomalyLog()
    _feed(first, log, items[:half])
    fresh, later = DetectionEngine(), AnomalyLog()
    _feed(fresh, later, items[half:])
    reopened = {(a.kind, a.gpu) for a in later.anomalies} & {(a.kind, a.gpu) for a in first.open_anomalies()}
    assert reopened


def test_a_state_saved_by_classes_of_other_fields_is_refused() -> None:
    engine = DetectionEngine()
    _feed(engine, AnomalyLog(), _items()[:2000])
    blob, shape = checkpoint.dump(engine.node_state("gpu-node-00"))
    level = checkpoint.shape_of(ActivityLevel)
    assert level in shape.split(",")
    with pytest.raises(checkpoint.StateRefused, match="other fields"):
        checkpoint.load(blob, shape.replace(level, "0" * len(level)))


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return (os.system, ("echo pwned",))


def test_a_blob_that_names_another_callable_is_refused_not_run() -> None:
    blob = zlib.compress(pickle.dumps(_Evil()))
    with pytest.raises(checkpoint.StateRefused, match="may not name"):
        checkpoint.load(blob, "")
    with pytest.raises(checkpoint.StateRefused, match="not a detector state"):
        checkpoint.load(zlib.compress(pickle.dumps({"a": 1})), "")
    with pytest.raises(checkpoint.StateRefused, match="not a compressed"):
        checkpoint.load(b"garbage", "")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_are_a_state_or_refused(data: bytes) -> None:
    for blob in (data, zlib.compress(data)):
        with contextlib.suppress(checkpoint.StateRefused):
            checkpoint.load(blob, "x")
