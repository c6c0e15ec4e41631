"""Stream identity, re-reads, stale keyframes, keyframe requests and resumable batches (issue 10).

In process and fast: frames come from the real encoder (and the agent's Framer for the
identity headers), the store is an in-memory double that keeps what it is given.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import pytest

from agent.framing import Framer
from collector.deadletter import fit
from collector.ingest import UUID_CONFLICT_KIND, Inbound, Ingestor
from collector.store import StoreRefused
from telemetry.codec import FrameEncoder
from telemetry.control import KeyframeRequest
from telemetry.records import EventRecord, GpuRecord
from telemetry.wire import Message

FRAME = (("type", b"frame"),)
GPU = "GPU-11111111-2222-4333-8444-555555555555"


class MemoryStore:
    def __init__(self) -> None:
        self.rows: list[GpuRecord] = []
        self.events: list[EventRecord] = []
        self.down = False
        self.refuse_gpu: str | None = None

    async def write(self, records: Sequence[GpuRecord], events: Sequence[EventRecord] = ()) -> None:
        if self.down:
            raise OSError("connection refused")
        if self.refuse_gpu is not None and any(r.gpu == self.refuse_gpu for r in records):
            raise StoreRefused("DataError: value out of range")
        self.rows.extend(records)
        self.events.extend(events)

    def keys(self) -> set[tuple[str, str, float]]:
        return {(r.gpu, r.node, r.ts) for r in self.rows}


def rec(ts: float, node: str = "node-a", gpu: str = GPU, util: int = 1) -> GpuRecord:
    return GpuRecord(ts=ts, node=node, gpu=gpu, metrics={"DCGM_FI_DEV_GPU_UTIL": util, "DCGM_FI_DEV_GPU_TEMP": 40})


def frames(start: float, count: int, node: str = "node-a", gpu: str = GPU, per: int = 2,
           keyframe_every: int = 4, skip: int = 0) -> tuple[list[bytes], list[GpuRecord]]:
    """``count`` frames of ``per`` records from ``start``; ``skip`` frames encoded before (other sequence numbers)."""
    encoder = FrameEncoder(keyframe_every=keyframe_every)
    for i in range(skip):
        encoder.encode([rec(start - (skip - i) * per - 1, node, gpu)])
    encoder.force_keyframe()
    out, records = [], []
    for i in range(count):
        window = [rec(start + i * per + j, node, gpu, util=(i * per + j) % 100) for j in range(per)]
        records += window
        out.append(encoder.encode(window))
    return out, records


def inbound(values: Sequence[bytes], first_offset: int = 0, headers: tuple[tuple[str, bytes], ...] = FRAME,
            partition: int = 0) -> list[Inbound]:
    return [Inbound(partition, first_offset + i, b"k", v, headers) for i, v in enumerate(values)]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(store: MemoryStore, dead: list[tuple[int, str]], requests: list[KeyframeRequest] | None = None,
         clock: Clock | None = None) -> Ingestor:
    async def dead_letter(msg: Inbound, reason: str) -> None:
        dead.append((msg.offset, reason))

    async def request(req: KeyframeRequest) -> None:
        assert requests is not None
        requests.append(req)

    return Ingestor(store, dead_letter, request_keyframe=request if requests is not None else None,
                    clock=clock or Clock())


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_a_reread_after_a_restart_dead_letters_nothing_twice_and_nothing_valid() -> None:
    """Item 3: the first re-read batch must not lower "already stored"; old garbage is not sent again."""
    a, rec_a = frames(0, 8, gpu=GPU)  # keyframes at 0 and 4
    b, rec_b = frames(0, 8, gpu="GPU-b", keyframe_every=6)  # keyframes at 0 and 6
    log = [a[0], b[0], a[1], b[1], b"garbage", a[2], b[2], a[3], b[3], a[4], b[4], b[5], a[5], b[6], a[6], b[7], a[7]]
    msgs = inbound(log)
    store, dead = MemoryStore(), []  # type: ignore[var-annotated]
    first = make(store, dead)
    run(first.handle(msgs[:12]))
    assert dead == [(4, dead[0][1])]  # the garbage, once
    resume = first.resume_offsets()[0]
    # a new collector: the log was committed up to 12; it rewinds to the resume offset
    dead2: list[tuple[int, str]] = []
    again = make(MemoryStore(), dead2)
    again.reset_partition(0, 12)
    batch1, batch2 = msgs[resume:resume + 2], msgs[resume + 2:]
    run(again.handle(batch1))
    again.mark_stored(0, batch1[-1].offset + 1)  # the consumer's commit of the first re-read batch
    run(again.handle(batch2))
    assert dead2 == []
    assert again.stored_below[0] == 12
    stored = {(r.gpu, r.ts) for r in store.rows + again.store.rows}  # type: ignore[attr-defined]
    assert stored == {(r.gpu, r.ts) for r in rec_a + rec_b}


def test_a_replayed_old_keyframe_keeps_the_newer_base() -> None:
    """Item 7: an old keyframe (a spool replay, a re-read) must not make the next deltas undecodable."""
    values, records = frames(0, 8)  # keyframes at 0 and 4
    store, dead = MemoryStore(), []  # type: ignore[var-annotated]
    ingestor = make(store, dead)
    replayed = [*values[:6], values[0], values[6], values[7]]
    run(ingestor.handle(inbound(replayed)))
    assert dead == []
    assert ingestor.counters["stale_keyframes"] == 1
    assert {r.ts for r in store.rows} == {r.ts for r in records}


def test_an_agent_restart_without_headers_is_a_new_base() -> None:
    """A restarted agent's keyframe has sequence 0 but newer samples: it replaces the base."""
    old, rec_old = frames(0, 5)
    new, rec_new = frames(100, 3)
    store, dead = MemoryStore(), []  # type: ignore[var-annotated]
    run(make(store, dead).handle(inbound([*old, *new])))
    assert dead == []
    assert {r.ts for r in store.rows} == {r.ts for r in rec_old + rec_new}


def _framer_messages(node: str, instance: str, records: Sequence[GpuRecord], layout: str = "node") -> list[Message]:
    out: list[Message] = []
    framer = Framer(out.append, window=2, max_delay_s=3600, keyframe_every=4, node=node, instance=instance,
                    layout=layout)
    for r in records:
        framer.add(r)
    framer.flush()
    return out


@pytest.mark.parametrize("layout", ["node", "gpu"])
def test_two_nodes_with_one_uuid_are_two_streams_and_an_event(layout: str) -> None:
    """Item 5: with node/instance headers both streams decode against their own base."""
    a = _framer_messages("node-a", "i-a", [rec(t, "node-a", util=10) for t in range(0, 20)], layout)
    b = _framer_messages("node-b", "i-b", [rec(t + 0.5, "node-b", util=90) for t in range(0, 20)], layout)
    interleaved = [m for pair in zip(a, b, strict=True) for m in pair]
    assert dict(a[0].headers)["node"] == b"node-a" and dict(a[0].headers)["instance"] == b"i-a"
    msgs = [Inbound(0, i, m.key, m.value, m.headers) for i, m in enumerate(interleaved)]
    store, dead = MemoryStore(), []  # type: ignore[var-annotated]
    ingestor = make(store, dead)
    run(ingestor.handle(msgs))
    assert dead == []
    assert len(store.rows) == 40
    assert {r.metrics["DCGM_FI_DEV_GPU_UTIL"] for r in store.rows if r.node == "node-a"} == {10}
    assert {r.metrics["DCGM_FI_DEV_GPU_UTIL"] for r in store.rows if r.node == "node-b"} == {90}
    conflicts = [e for e in store.events if e.kind == UUID_CONFLICT_KIND]
    assert len(conflicts) == 1 and conflicts[0].gpu == GPU and "node-a" in conflicts[0].detail
    assert ingestor.counters["gpu_uuid_conflicts"] == 1


def test_older_agents_with_one_uuid_decode_by_sequence_or_are_dead_lettered_when_ambiguous() -> None:
    a, rec_a = frames(0, 6, node="node-a")
    b, _ = frames(0.5, 6, node="node-b")
    late_b, rec_late_b = frames(1000, 6, node="node-b", skip=10)  # node-b started earlier: other sequence numbers
    store, dead = MemoryStore(), []  # type: ignore[var-annotated]
    ingestor = make(store, dead)
    run(ingestor.handle(inbound([a[0], late_b[0], a[1], late_b[1], a[2], late_b[2]])))
    assert dead == []
    assert store.keys() == {(r.gpu, r.node, r.ts) for r in rec_a[:6] + rec_late_b[:6]}
    # both in step (same sequence numbers): never decode against a guessed base
    store2, dead2 = MemoryStore(), []  # type: ignore[var-annotated]
    run(make(store2, dead2).handle(inbound([a[0], b[0], a[1], b[1]])))
    assert [reason.split(":")[1].strip() for _, reason in dead2] == ["ambiguous", "ambiguous"]
    assert {r.node for r in store2.rows} == {"node-a", "node-b"}  # the keyframes
    assert all(r.ts in (0, 1, 0.5, 1.5) for r in store2.rows)


@pytest.mark.parametrize("layout", ["node", "gpu"])
def test_a_missing_base_asks_for_a_keyframe_once_and_takes_the_next_at_once(layout: str) -> None:
    """Item 7: a delta without its base is dead-lettered, the agent is asked (rate-limited). A node
    frame's agent is asked for every GPU's keyframe: its next frame carries them all."""
    msgs = _framer_messages("node-a", "i-a", [rec(t) for t in range(16)], layout)  # 8 frames, keyframes at 0 and 4
    headers = msgs[0].headers
    store, dead, requests, clock = MemoryStore(), [], [], Clock()  # type: ignore[var-annotated]
    ingestor = make(store, dead, requests, clock)
    run(ingestor.handle([Inbound(0, i, m.key, m.value, headers) for i, m in enumerate(msgs[1:3])]))
    assert len(dead) == 2 and "before any keyframe" in dead[0][1]
    gpu = GPU if layout == "gpu" else None
    assert requests == [KeyframeRequest("node-a", gpu, requests[0].reason, requests[0].ts, "i-a")]
    clock.now += 20
    run(ingestor.handle([Inbound(0, 2 + i, m.key, m.value, headers) for i, m in enumerate(msgs[3:])]))
    assert len(dead) == 3 and len(requests) == 2  # msgs[3] (another request after 20 s), then the keyframe
    assert {r.ts for r in store.rows} == set(range(8, 16))


def test_a_failing_dead_letter_sink_is_resumed_without_decoding_again() -> None:
    values, records = frames(0, 6)
    batch = inbound([values[0], b"bad-1", values[1], b"bad-2", *values[2:]])
    store = MemoryStore()
    sent: list[int] = []
    fail = [True]

    async def dead_letter(msg: Inbound, _reason: str) -> None:
        if msg.offset == 3 and fail[0]:
            fail[0] = False
            raise OSError("dead-letter database away")
        sent.append(msg.offset)

    ingestor = Ingestor(store, dead_letter)
    with pytest.raises(OSError):
        run(ingestor.handle(batch))
    run(ingestor.handle(batch))
    assert sent == [1, 3]
    assert len(store.rows) == len(records)  # written once: the retry only sends the dead letters left
    assert {r.ts for r in store.rows} == {r.ts for r in records}


def test_a_frame_the_database_refuses_is_set_aside_alone() -> None:
    good, rec_good = frames(0, 3)
    bad, _ = frames(0, 3, gpu="GPU-bad")
    store, dead = MemoryStore(), []  # type: ignore[var-annotated]
    store.refuse_gpu = "GPU-bad"
    run(make(store, dead).handle(inbound([good[0], bad[0], good[1], good[2]])))
    assert [o for o, _ in dead] == [1] and "refused by the database" in dead[0][1]
    assert {r.ts for r in store.rows} == {r.ts for r in rec_good}


def test_a_store_outage_keeps_the_batch_and_abandon_resets_its_partition() -> None:
    values, _ = frames(0, 4)
    store, dead = MemoryStore(), []  # type: ignore[var-annotated]
    ingestor = make(store, dead)
    store.down = True
    with contextlib.suppress(OSError):
        run(ingestor.handle(inbound(values)))
    assert ingestor.abandon() == {0}
    assert len(ingestor.streams) == 0  # rebuilt from the resume offset by whoever reads it next


def test_dead_letters_fit_the_producer_limit() -> None:
    big = bytes(5 << 20)
    out = fit(b"k" * 5000, big, (("type", b"frame"), ("node", b"n" * 5000)), "undecodable", "t/0/7", 1 << 20)
    assert out.truncated and len(out.value) + len(out.key) < (1 << 20) - 8192
    head = dict(out.headers)
    assert head["dlq_size"] == str(5 << 20).encode() and head["dlq_source"] == b"t/0/7"
    small = fit(b"k", b"abc", (("type", b"frame"),), "bad", "t/0/1", 1 << 20)
    assert not small.truncated and small.value == b"abc" and ("type", b"frame") in small.headers


class _Hooks:
    """The detection service's side of a rebalance, as far as the ingestor sees it."""

    def __init__(self) -> None:
        self.forgotten: list[set[str]] = []
        self.lock = asyncio.Lock()

    async def prepare(self, records: Sequence[GpuRecord], events: Sequence[EventRecord]) -> None:
        pass

    async def release(self, nodes: set[str]) -> None:
        pass

    def forget(self, nodes: set[str]) -> None:
        self.forgotten.append(set(nodes))

    def judging(self) -> asyncio.Lock:
        return self.lock


def _judged(store: MemoryStore) -> tuple[Ingestor, _Hooks]:
    ingestor, hooks = make(store, []), _Hooks()
    ingestor.detection = hooks
    ingestor.on_committed = lambda records, events: None
    return ingestor, hooks


def test_a_state_being_saved_holds_the_resume_offset_back_until_its_save_commits() -> None:
    """Issue 16, item 2: the resume offsets are saved after every batch, also while the detectors'
    save of a node's state is in flight. A replica killed before that save committed left the older
    state, and a resume offset past what that state lacked: the replica that took the node over
    never read it (an anomaly re-opened with a later start, in tests/test_replica_kill.py)."""
    a, _ = frames(0, 8)  # keyframes at frames 0 and 4
    ingestor, _hooks = _judged(MemoryStore())
    run(ingestor.handle(inbound(a[:6])))
    assert ingestor.resume_offsets()[0] == 0  # the node's first message judged since its last save
    taken = ingestor.take_floors({"node-a"})  # a save begins
    run(ingestor.handle(inbound(a[6:], first_offset=6)))  # judged meanwhile: not in that save
    assert ingestor.resume_offsets()[0] == 0  # held back while the save is in flight
    ingestor.put_floors(taken)  # the save failed: as before it
    assert ingestor.resume_offsets()[0] == 0
    taken = ingestor.take_floors({"node-a"})
    ingestor.saved_floors(taken)  # it committed: nothing judged is lacking any more
    assert ingestor.resume_offsets()[0] == 4  # the last keyframe
    assert ingestor.floors == {} and ingestor.saving == {}


def test_a_partition_rewound_after_another_replica_read_it_forgets_its_nodes_state() -> None:
    """A partition this replica read once (at the group's first rebalance, say) and that comes back
    after another replica read it further: the detectors' state of its nodes here is older than the
    one saved since, and kept, it would stop that one from being taken over."""
    a, _ = frames(0, 4)
    ingestor, hooks = _judged(MemoryStore())
    run(ingestor.handle(inbound(a)))
    ingestor.reset_partition(0, 40)  # assigned back; another replica committed up to 40
    assert hooks.forgotten == [{"node-a"}]
    assert ingestor.floors == {} and ingestor.stored_below[0] == 40


def test_a_nodes_floor_is_the_keyframe_its_first_unsaved_frame_was_decoded_from() -> None:
    """A re-read from a delta frame decodes nothing up to the stream's next keyframe: the floor was
    that frame's own offset, and a replica that took the node over judged none of the frames between
    it and the next keyframe (a minute of them: anomalies re-opened with a later start)."""
    a, _ = frames(0, 12)  # keyframes at frames 0, 4 and 8
    ingestor, _hooks = _judged(MemoryStore())
    run(ingestor.handle(inbound(a[:5])))
    ingestor.saved_floors(ingestor.take_floors({"node-a"}))  # the state is saved up to frame 4
    run(ingestor.handle(inbound(a[5:10], first_offset=5)))  # frame 5 is a delta on the keyframe at 4
    assert ingestor.floors["node-a"] == (0, 4)
    assert ingestor.resume_offsets()[0] == 4  # not 8 (the stream's last keyframe), nor 5 (a delta)


def test_a_node_keyframe_in_sequence_is_the_new_base_even_when_its_records_are_older() -> None:
    """A node frame may hold only a GPU whose records are older than another GPU's in the frame
    before it; a keyframe that is the next in sequence is the base all the same (a replay is not)."""
    out: list[Message] = []
    framer = Framer(out.append, window=2, max_delay_s=3600, keyframe_every=2, node="node-a", instance="i-a")
    framer.add(rec(10.0, gpu="GPU-b"))
    framer.add(rec(11.0, gpu="GPU-b"))  # frame 0 (keyframe): GPU-b at 10 and 11
    framer.add(rec(10.5))
    framer.add(rec(10.6))  # frame 1: GPU-a, older than 11
    framer.add(rec(10.7))
    framer.add(rec(10.8))  # frame 2 (keyframe, periodic): GPU-a, still older than 11
    framer.add(rec(10.9))
    framer.add(rec(11.5))  # frame 3: a delta on frame 2
    msgs = [Inbound(0, i, m.key, m.value, m.headers) for i, m in enumerate(out)]
    store, dead = MemoryStore(), []  # type: ignore[var-annotated]
    ingestor = make(store, dead)
    run(ingestor.handle(msgs))
    run(ingestor.handle(msgs[2:]))  # read again from frame 2: a replay, stored again, the base stays
    assert dead == [] and not ingestor.counters["frames_without_base"]
    assert sorted({r.ts for r in store.rows}) == [10.0, 10.5, 10.6, 10.7, 10.8, 10.9, 11.0, 11.5]


def test_a_node_frame_without_its_node_header_or_with_a_bad_checksum_is_set_aside_with_the_reason() -> None:
    msgs = _framer_messages("node-a", "i-a", [rec(t) for t in range(4)])
    good = msgs[0]
    corrupt = good.value[:-1] + bytes([good.value[-1] ^ 0xFF])
    batch = [Inbound(0, 0, good.key, good.value, (("type", b"frame"),)),  # no node header
             Inbound(0, 1, good.key, corrupt, good.headers),
             Inbound(0, 2, good.key, good.value, good.headers)]
    store, dead = MemoryStore(), []  # type: ignore[var-annotated]
    run(make(store, dead).handle(batch))
    assert [(o, r.split(":")[0]) for o, r in dead] == [(0, "undecodable frame"), (1, "undecodable frame")]
    assert "'node' header" in dead[0][1] and "checksum mismatch" in dead[1][1]
    assert {r.ts for r in store.rows} == {0, 1}  # the good frame is stored
