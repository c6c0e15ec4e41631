"""The agent's on-disk spool: FIFO order, the size bound, restarts, torn and corrupt entries."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from agent import spool as spool_module
from agent.spool import ENTRY_HEADER, Spool, SpoolLockedError, SpoolWriteError, encode_entry
from telemetry.wire import Message

SEG = 4096  # the smallest segment the spool accepts: many segments from few messages


def msg(i: int, size: int = 100, key: bytes | None = None) -> Message:
    body = f"{i:08d}".encode()
    return Message(key if key is not None else b"GPU-%d" % (i % 3), body + b"x" * max(0, size - len(body)),
                   (("seq", str(i).encode()),))


def index(m: Message) -> int:
    return int(m.value[:8])


def segments(d: Path) -> list[Path]:
    return sorted(d.glob("*.seg"))


def drain(spool: Spool, batch: int = 7) -> list[int]:
    out: list[int] = []
    while len(spool):
        got = spool.peek(batch)
        if not got:  # the read stepped over damage that held all that was left
            assert len(spool) == 0
            break
        out += [index(m) for m in got]
        spool.commit(len(got))
    return out


def test_fifo_order_across_segments_and_cleanup(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        for start in range(0, 600, 50):
            spool.append(msg(i) for i in range(start, start + 50))
        assert len(spool) == 600
        assert len(segments(tmp_path)) > 10
        assert spool.bytes == sum(p.stat().st_size for p in segments(tmp_path))
        # a peek does not consume; peeks of different sizes see the same head
        assert [index(m) for m in spool.peek(3)] == [0, 1, 2]
        assert [index(m) for m in spool.peek(5)] == [0, 1, 2, 3, 4]
        assert drain(spool) == list(range(600))
        assert len(spool) == 0 and spool.bytes == 0
        assert segments(tmp_path) == []  # read segments are deleted
        assert spool.dropped_total == 0 and spool.corrupt_total == 0


@pytest.mark.parametrize("chunk", [64, 300, 1 << 20])
def test_reads_in_chunks_of_any_size_see_the_same_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int,
) -> None:
    monkeypatch.setattr(spool_module, "READ_CHUNK", chunk)  # entries larger than, straddling, inside a chunk
    sizes = [0, 10, 150, 700, 3000, 40, 5000, 1]
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        spool.append(msg(i, sizes[i % len(sizes)]) for i in range(120))
        assert [index(m) for m in spool.peek(1000, max_bytes=20_000)] == list(range(len(spool.peek(1000, 20_000))))
        assert drain(spool, batch=11) == list(range(120))


def test_messages_round_trip_exactly(tmp_path: Path) -> None:
    odd = [
        Message(b"", b""),
        Message(b"GPU-\x00\xff", bytes(range(256)) * 3, (("h\u00e9", b""), ("", b"\x00"), ("trace", b"abc"))),
        Message(b"k" * 300, b"v", ()),
    ]
    with Spool(tmp_path, max_bytes=4 * SEG, segment_bytes=SEG) as spool:
        spool.append(odd)
        assert spool.peek(10) == odd
    with Spool(tmp_path, max_bytes=4 * SEG, segment_bytes=SEG) as spool:
        assert spool.peek(10) == odd


def test_peek_honours_a_byte_budget(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        spool.append(msg(i, 1000) for i in range(20))
        assert len(spool.peek(100, max_bytes=3000)) == 3  # stops once the budget is reached


def test_bound_drops_oldest_whole_segments_and_counts_them(tmp_path: Path) -> None:
    bound = 6 * SEG
    with Spool(tmp_path, max_bytes=bound, segment_bytes=SEG, fsync="none") as spool:
        for i in range(1000):
            spool.append([msg(i)])
            assert spool.bytes <= bound
        left = [index(m) for m in spool.peek(10_000)]
        assert left == list(range(1000 - len(left), 1000)), "what is left is the newest, in order"
        assert spool.dropped_total == 1000 - len(left) > 0
        assert len(left) * (len(encode_entry(msg(0)))) > bound - 2 * SEG  # only whole old segments went
    with Spool(tmp_path, max_bytes=bound, segment_bytes=SEG) as spool:
        assert spool.dropped_total == 1000 - len(left), "the drop counter is persisted"


def test_bound_drops_unread_part_of_a_partly_read_head_segment(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=2 * SEG, segment_bytes=SEG) as spool:
        spool.append(msg(i) for i in range(20))
        spool.commit(5)
        spool.append(msg(i) for i in range(20, 200))
        left = [index(m) for m in spool.peek(1000)]
        assert left == list(range(200 - len(left), 200))
        assert spool.dropped_total == 200 - 5 - len(left)


def test_commit_until_is_safe_against_a_drop_between_read_and_commit(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=2 * SEG, segment_bytes=SEG) as spool:
        spool.append(msg(i) for i in range(10))
        first, batch = spool.read(10)
        assert first == spool.head_seq == 0 and len(batch) == 10
        spool.append(msg(i) for i in range(10, 120))  # drops the batch being "sent" and more
        dropped = spool.dropped_total
        assert dropped >= 10 and spool.head_seq == dropped
        assert spool.commit_until(first + len(batch)) == 0  # nothing newer than the batch is consumed
        assert index(spool.peek(1)[0]) == dropped
        assert spool.tail_seq == 120


def test_cursor_and_counters_survive_reopen(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        spool.append(msg(i) for i in range(300))
        assert [index(m) for m in spool.peek(130)] == list(range(130))
        spool.commit(130)
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        assert len(spool) == 170
        spool.append(msg(i) for i in range(300, 310))
        assert drain(spool) == list(range(130, 310))


def test_second_open_of_the_same_directory_is_refused(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=4 * SEG, segment_bytes=SEG), pytest.raises(SpoolLockedError):
        Spool(tmp_path, max_bytes=4 * SEG, segment_bytes=SEG)
    Spool(tmp_path, max_bytes=4 * SEG, segment_bytes=SEG).close()  # released on close


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="two segments"):
        Spool(tmp_path, max_bytes=SEG, segment_bytes=SEG)
    with Spool(tmp_path, max_bytes=2 * SEG, segment_bytes=SEG) as spool:
        with pytest.raises(ValueError, match="exceeds"):
            spool.append([Message(b"k", b"x" * 2 * SEG)])
        assert len(spool) == 0


def test_a_torn_tail_is_truncated_counted_once_and_appends_continue(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        spool.append(msg(i) for i in range(100))
    last = segments(tmp_path)[-1]
    size = last.stat().st_size
    os.truncate(last, size - 30)  # the agent was killed in the middle of the last entry
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        assert len(spool) == 99
        assert spool.corrupt_total == 1
        spool.append(msg(i) for i in range(100, 110))
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        assert spool.corrupt_total == 1, "repaired at the first open, not counted again"
        assert drain(spool) == [*range(99), *range(100, 110)]


def test_a_torn_entry_header_is_truncated(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        spool.append(msg(i) for i in range(5))
    with open(segments(tmp_path)[-1], "ab") as f:
        f.write(ENTRY_HEADER.pack(500, 0)[:5])  # only part of the next header made it to disk
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        assert spool.corrupt_total == 1
        assert drain(spool) == list(range(5))


def _entry_offsets(path: Path) -> list[int]:
    data = path.read_bytes()
    offsets, pos = [], 0
    while pos < len(data):
        offsets.append(pos)
        pos += ENTRY_HEADER.size + ENTRY_HEADER.unpack_from(data, pos)[0]
    return offsets


def _corrupt(path: Path, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def test_a_bad_crc_in_a_sealed_segment_loses_only_that_entry(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        spool.append(msg(i) for i in range(200))
    first = segments(tmp_path)[0]
    offsets = _entry_offsets(first)
    assert len(offsets) > 10
    _corrupt(first, offsets[5] + ENTRY_HEADER.size + 40, b"\xff\xfe")  # a flipped byte in entry 5's value
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        assert spool.corrupt_total == 1
        assert len(spool) == 199
        assert drain(spool) == [i for i in range(200) if i != 5]


def test_a_broken_length_field_resynchronises_on_the_next_valid_entry(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        spool.append(msg(i) for i in range(200))
        spool.commit(2)  # the cursor points into the damaged segment
    first = segments(tmp_path)[0]
    offsets = _entry_offsets(first)
    _corrupt(first, offsets[7], b"\xff\xff\xff\x7f")  # entry 7's length now points past the file
    _corrupt(first, offsets[9] + 3, b"\x55")  # and entry 9's length is off
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        assert spool.corrupt_total == 2
        assert drain(spool) == [i for i in range(2, 200) if i not in (7, 9)]


def test_a_segment_of_garbage_is_skipped(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        spool.append(msg(i) for i in range(200))
    second = segments(tmp_path)[1]
    lost = len(_entry_offsets(second))
    second.write_bytes(os.urandom(second.stat().st_size))
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        assert spool.corrupt_total == 1
        got = drain(spool)
        assert got == sorted(got) and len(got) == 200 - lost
        assert segments(tmp_path) == []


def test_damage_after_open_loses_only_the_damaged_entry_and_counts_it(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        spool.append(msg(i) for i in range(100))
        first = segments(tmp_path)[0]
        offsets = _entry_offsets(first)
        _corrupt(first, offsets[6] + ENTRY_HEADER.size + 20, b"\xff")  # something else wrote into the file
        assert [index(m) for m in spool.peek(50)] == list(range(6))  # the good ones before the damage
        spool.commit(6)
        rest = [index(m) for m in spool.peek(1000)]  # the reader steps over entry 6 to entry 7
        assert rest == list(range(7, 100))
        stats = spool.stats()
        assert (stats.corrupt_total, stats.corrupt_messages_total) == (1, 1) and len(spool) == len(rest)
        assert stats.corrupt_bytes_total == len(encode_entry(msg(6)))
        assert drain(spool) == rest


def test_an_unreadable_state_file_replays_from_the_oldest_segment(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        spool.append(msg(i) for i in range(50))
        spool.commit(10)
    (tmp_path / "state.json").write_text("{not json")
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        # at-least-once: committed messages of the still present segment come again, none is lost
        got = drain(spool)
        assert got[-40:] == list(range(10, 50)) and got == sorted(got)


_KILLED_WRITER = """
import os, sys
sys.path.insert(0, {root!r})
from agent.spool import Spool
from telemetry.wire import Message
spool = Spool({d!r}, max_bytes=64 * 4096, segment_bytes=4096, fsync="none")
spool.append(Message(b"k", b"%08d" % i) for i in range(40))
spool.commit(15)
last = sorted(p for p in os.listdir({d!r}) if p.endswith(".seg"))[-1]
fd = os.open(os.path.join({d!r}, last), os.O_WRONLY | os.O_APPEND)
os.write(fd, b"\\x40\\x00\\x00\\x00\\x01\\x02")  # a write cut short by the kill
os._exit(9)  # no close(): what a SIGKILL leaves behind
"""


def test_a_killed_agent_leaves_a_spool_the_next_one_continues(tmp_path: Path) -> None:
    code = _KILLED_WRITER.format(root=str(Path(__file__).resolve().parent.parent), d=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert proc.returncode == 9, proc.stderr.decode()
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        assert spool.corrupt_total == 1
        assert [int(m.value) for m in spool.peek(100)] == list(range(15, 40))


def test_state_file_names_the_cursor(tmp_path: Path) -> None:
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        spool.append(msg(i) for i in range(3))
        spool.commit(1)
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["segment"] == int(segments(tmp_path)[0].stem, 16)
    assert state["offset"] == len(encode_entry(msg(0)))


# ------------------------------------------------------------------ property: a model deque


class SpoolMachine(RuleBasedStateMachine):
    """Any sequence of append/peek/commit/reopen behaves like a deque that drops its oldest.

    The bound makes the spool drop whole oldest segments; the model follows by trimming
    its head to what the spool kept, after checking that what was kept is exactly the
    newest messages (in order) and that the drop counter grew by what was trimmed.
    """

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="spool-prop-"))
        self.model: deque[Message] = deque()
        self.counter = 0
        self.dropped = 0
        self.spool: Spool | None = None

    @initialize(fsync=st.sampled_from(["batch", "interval", "none"]))
    def open_spool(self, fsync: str) -> None:
        self.fsync = fsync
        self.spool = self._open()

    def _open(self) -> Spool:
        return Spool(self.dir, max_bytes=3 * SEG, segment_bytes=SEG, fsync=self.fsync)  # type: ignore[arg-type]

    @rule(sizes=st.lists(st.integers(0, 700), min_size=0, max_size=12))
    def append(self, sizes: list[int]) -> None:
        assert self.spool is not None
        batch = [Message(b"k%d" % (self.counter + j), b"%08d" % (self.counter + j) + b"." * s)
                 for j, s in enumerate(sizes)]
        self.counter += len(batch)
        self.spool.append(batch)
        self.model.extend(batch)
        kept = len(self.spool)
        assert kept <= len(self.model)
        trimmed = len(self.model) - kept
        for _ in range(trimmed):
            self.model.popleft()
        self.dropped += trimmed
        assert self.spool.dropped_total == self.dropped

    @rule(n=st.integers(0, 30))
    def peek(self, n: int) -> None:
        assert self.spool is not None
        assert self.spool.peek(n) == list(self.model)[:n]

    @rule(n=st.integers(0, 30))
    def commit(self, n: int) -> None:
        assert self.spool is not None
        self.spool.commit(n)
        for _ in range(min(n, len(self.model))):
            self.model.popleft()

    @rule()
    def reopen(self) -> None:
        assert self.spool is not None
        self.spool.close()
        self.spool = self._open()

    @precondition(lambda self: self.spool is not None)
    @invariant()
    def matches_model(self) -> None:
        assert self.spool is not None
        assert len(self.spool) == len(self.model)
        assert self.spool.bytes <= 3 * SEG
        if self.model:
            assert self.spool.peek(1) == [self.model[0]]

    def teardown(self) -> None:
        if self.spool is not None:
            self.spool.close()
        shutil.rmtree(self.dir, ignore_errors=True)


SpoolMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
test_spool_matches_a_model_deque = SpoolMachine.TestCase


# ------------------------------------------------------------------ a full disk


def _failing_write(budget: list[int]) -> Callable[[int, bytes | memoryview], int]:
    """``os.write`` on a disk with ``budget[0]`` bytes left: a short write, then ENOSPC (as the kernel does)."""

    def write(fd: int, data: bytes | memoryview) -> int:
        if budget[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = os.write(fd, memoryview(data)[:budget[0]])
        budget[0] -= n
        return n

    return write


def _torn_append_then_recover(d: Path, cut: int, reopen: bool) -> None:
    """Append 5, then a batch of 3 that the disk refuses after ``cut`` bytes, then (space again) the
    unwritten rest and 4 more: every message is read back once, in order, and nothing counts as damage."""
    budget = [1 << 30]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(spool_module, "_write", _failing_write(budget))
        spool = Spool(d, max_bytes=64 * SEG, segment_bytes=SEG, fsync="none")
        try:
            spool.append(msg(i) for i in range(5))
            budget[0] = cut
            batch = [msg(i) for i in range(5, 8)]
            with pytest.raises(SpoolWriteError) as failed:
                spool.append(batch)
            written = failed.value.written
            assert failed.value.first == 5
            assert written == sum(1 for k in range(1, 4) if sum(len(encode_entry(m)) for m in batch[:k]) <= cut)
            assert spool.stats().write_errors_total == 1
            budget[0] = 1 << 30  # space again: the caller appends what was not written, then goes on
            spool.append(batch[written:])
            spool.append(msg(i) for i in range(8, 12))
            if reopen:
                spool.close()
                spool = Spool(d, max_bytes=64 * SEG, segment_bytes=SEG, fsync="none")
            assert drain(spool) == list(range(12))
            assert spool.corrupt_total == 0 and spool.stats().corrupt_messages_total == 0
        finally:
            spool.close()


def test_a_write_refused_at_any_byte_leaves_no_torn_entry() -> None:
    """The issue's case: a full disk tore an entry, later appends followed it, and the reader dropped
    everything after the tear. Here the disk refuses at every byte position of a batch."""
    batch_bytes = sum(len(encode_entry(msg(i))) for i in range(5, 8))
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None  # many small spools: keep them in memory
    with tempfile.TemporaryDirectory(prefix="spool-cut-", dir=base) as tmp:
        for cut in range(batch_bytes):
            for reopen in (False, True):
                _torn_append_then_recover(Path(tmp) / f"c{cut}-{reopen}", cut, reopen)


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 900), min_size=1, max_size=30), cut=st.integers(0, 40_000),
       reopen=st.booleans())
def test_a_refused_write_of_any_batch_loses_nothing(sizes: list[int], cut: int, reopen: bool) -> None:
    """Batches of any sizes across segment boundaries, refused at any byte: the written prefix and
    what the caller re-appends come back in order; nothing is lost or counted as damage."""
    with tempfile.TemporaryDirectory(prefix="spool-enospc-") as tmp:
        budget = [1 << 30]
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(spool_module, "_write", _failing_write(budget))
            spool = Spool(tmp, max_bytes=64 * SEG, segment_bytes=SEG)
            try:
                batch = [msg(i, size) for i, size in enumerate(sizes)]
                budget[0] = cut
                try:
                    spool.append(batch)
                    written = len(batch)
                except SpoolWriteError as exc:
                    written = exc.written
                budget[0] = 1 << 30
                spool.append(batch[written:])
                if reopen:
                    spool.close()
                    spool = Spool(tmp, max_bytes=64 * SEG, segment_bytes=SEG)
                assert drain(spool) == list(range(len(sizes)))
                assert spool.corrupt_total == 0
            finally:
                spool.close()


def test_a_partial_write_that_cannot_be_cut_back_seals_the_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    budget = [1 << 30]
    monkeypatch.setattr(spool_module, "_write", _failing_write(budget))
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        spool.append(msg(i) for i in range(5))
        budget[0] = 50  # part of the next entry reaches the disk
        with monkeypatch.context() as mp:
            mp.setattr(spool_module.os, "ftruncate", _enospc)
            with pytest.raises(SpoolWriteError):
                spool.append([msg(5)])
        budget[0] = 1 << 30
        spool.append(msg(i) for i in range(5, 10))
        assert len(segments(tmp_path)) == 2  # sealed: the rest went to a new segment
        assert [index(m) for m in spool.peek(100)] == list(range(10))
        assert spool.stats().write_errors_total == 2
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        assert drain(spool) == list(range(10))
        assert spool.corrupt_total == 1 and spool.stats().corrupt_messages_total == 0  # the torn tail, cut now


def _enospc(*_args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_state_updates_that_fail_are_counted_and_caught_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        spool.append(msg(i) for i in range(50))
        with monkeypatch.context() as mp:
            mp.setattr(spool_module.os, "replace", _enospc)
            spool.commit(10)  # the cursor cannot be persisted now; the commit still holds in memory
        assert spool.stats().write_errors_total == 1 and index(spool.peek(1)[0]) == 10
        spool.commit(10)
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG) as spool:
        assert drain(spool) == list(range(20, 50))
        assert not list(tmp_path.glob("*.tmp"))


@contextlib.contextmanager
def _small_tmpfs(path: Path, size_kib: int) -> Iterator[Path]:
    path.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN): {proc.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_real_full_disk_loses_nothing_that_was_written(tmp_path: Path) -> None:
    """On a 256 KiB tmpfs: append until the disk is full, free space, append the rest, reopen."""
    seg = 4 * SEG  # tmpfs allocates 4 KiB pages: larger segments waste less of the small disk
    with _small_tmpfs(tmp_path / "disk", 256) as disk:
        spool_dir = disk / "spool"
        (disk / "filler").write_bytes(b"\0" * (200 << 10))  # other things on the node's disk
        pending = [msg(i, 300) for i in range(250)]  # ~85 KiB: more than is free
        with Spool(spool_dir, max_bytes=64 * seg, segment_bytes=seg) as spool:
            while pending:
                try:
                    spool.append(pending[:40])
                    del pending[:40]
                except SpoolWriteError as exc:
                    del pending[:exc.written]
                    break
            assert pending, "the disk should have filled up"
            assert spool.stats().write_errors_total >= 1
            (disk / "filler").unlink()  # space again
            spool.append(pending)
            assert [index(m) for m in spool.peek(1000)] == list(range(250))
        with Spool(spool_dir, max_bytes=64 * seg, segment_bytes=seg) as spool:
            assert drain(spool) == list(range(250))
            assert spool.corrupt_total == 0


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 40), at=st.integers(0, 1 << 20), width=st.integers(1, 64), read_first=st.integers(0, 40))
def test_damage_anywhere_after_open_loses_only_the_entries_it_touches(n: int, at: int, width: int,
                                                                      read_first: int) -> None:
    """Bytes flipped anywhere in a segment while the spool is open (a bad disk, another writer):
    the reader steps over them, every entry they did not touch comes back in order, and the
    messages lost are counted."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with (tempfile.TemporaryDirectory(prefix="spool-flip-", dir=base) as tmp,
          Spool(tmp, max_bytes=64 * SEG, segment_bytes=16 * SEG, fsync="none") as spool):
        spool.append(msg(i, 50) for i in range(n))
        got = [index(m) for m in spool.peek(min(read_first, n - 1))]  # some stay unread
        spool.commit(len(got))
        seg = segments(Path(tmp))[0]
        offsets = _entry_offsets(seg)
        size = seg.stat().st_size
        at %= size
        width = min(width, size - at)
        raw = bytearray(seg.read_bytes())
        for k in range(at, at + width):
            raw[k] ^= 0xFF
        seg.write_bytes(bytes(raw))
        ends = [*offsets[1:], size]
        touched = {i for i in range(len(got), n) if offsets[i] < at + width and at < ends[i]}
        got += drain(spool)
        assert got == [i for i in range(n) if i not in touched]
        assert spool.stats().corrupt_messages_total == len(touched)
        assert (spool.corrupt_total > 0) == bool(touched)


def test_interval_fsync_is_timed_by_the_clock_passed_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The "interval" policy asks the injected clock, not the wall: a fake clock decides, no sleeping."""
    now = [100.0]
    with Spool(tmp_path, max_bytes=64 * SEG, segment_bytes=SEG, fsync="interval", fsync_interval_ms=1000,
               clock=lambda: now[0]) as spool:
        spool.append([msg(0)])  # the first append rolls a segment (and fsyncs the directory)
        synced: list[int] = []
        monkeypatch.setattr(os, "fsync", synced.append)
        now[0] = 100.5
        spool.append([msg(1)])
        assert synced == []  # half the interval on the fake clock: not due
        now[0] = 101.0
        spool.append([msg(2)])
        assert len(synced) == 1  # a whole interval on the fake clock: the segment is fsynced
