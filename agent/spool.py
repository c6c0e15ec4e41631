"""A bounded, crash-safe on-disk FIFO of Kafka messages: where frames wait while Kafka is down or slow.

Why it is built this way:

* **Segments.** Messages are appended to segment files (``<id>.seg``, 8 MiB by default).
  The size bound is kept by deleting whole *oldest* segments (one ``unlink``), so the
  spool never rewrites data on the hot path; the unread messages of a deleted segment
  are added to :attr:`Spool.dropped_total` (persisted, so the metric survives restarts).
* **Framing.** Each entry is ``u32 length | u32 crc32(payload) | payload``.
* **A full disk loses nothing that was written.** A write that fails part-way (``ENOSPC``)
  is cut back to the last whole entry at once (``ftruncate`` needs no free space), so
  the next append lands right after valid data; the messages written before the failure
  stay, and :class:`SpoolWriteError` says how many (the caller keeps the rest). If even
  the truncate fails, the segment is sealed and the next append starts a new one. A
  state file that cannot be replaced only delays the cursor's persistence.
* **Damage is stepped over, not thrown away.** A write torn by a kill or power cut, or
  damaged bytes, are found at open or when a read meets them. The spool then searches
  the rest of the segment for the next entry whose length, CRC and layout check, and
  keeps a jump table (entry index -> offset) for the segments that need one, so every
  valid entry after the damage is still read, and nothing is rewritten (a rewrite needs
  free space, which is what a full disk lacks). Damaged regions and their bytes, and the
  messages lost where their number is known (a read past damage knows how many entries
  the segment held), are counted (:meth:`Spool.stats`) and persisted. A torn tail is
  truncated. Opening never fails because of a damaged segment.
* **Cursor.** The read position (segment id + byte offset) is persisted in
  ``state.json``, replaced atomically on every :meth:`Spool.commit`, so a restarted agent
  continues replay where it stopped. Replay is at-least-once: a crash between a send and
  its commit resends that batch; nothing is lost.
* **Durability** is a policy (:data:`FsyncPolicy`): ``"batch"`` fsyncs after every
  :meth:`Spool.append` call (callers batch), ``"interval"`` at most every
  ``fsync_interval_ms`` (checked on each call and at close), ``"none"`` leaves it to
  the kernel.
* **Threads.** One lock guards every method, so the spool may be used from any thread.
  The sender calls it from a worker thread, never from its event loop or the sampling
  thread, because an fsync can take milliseconds.
* **Sequence numbers.** Each message gets an in-process sequence number (:attr:`head_seq`
  is the oldest unread one; numbers restart at 0 on open). The sender uses them to
  commit exactly what it delivered even if the bound dropped messages meanwhile.
* **Repeated errors** (a disk that stays full) are logged once, then counted
  (:class:`telemetry.ratelimit.RateLimitedLog`).

One process at a time: the directory is locked with ``flock`` while open.

The code is split by what it holds: :mod:`agent.spool_format` (entry bytes, CRCs, the
damage scan), :mod:`agent.spool_segments` (the segment and state files),
:mod:`agent.spool_recovery` (open and damage), and here the public API and stats.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterable

from agent.spool_format import (
    ENTRY_HEADER,
    FORMAT_VERSION,
    HEADER_HEAD,
    MAX_ENTRY_BYTES,
    PAYLOAD_HEAD,
    READ_CHUNK,
    SEGMENT_SUFFIX,
    _CorruptEntryError,
    encode_entry,
)
from agent.spool_recovery import _Recovery
from agent.spool_segments import LOCK_FILE, STATE_FILE, FsyncPolicy, log
from agent.stats import counter, gauge, snapshot
from telemetry.wire import Message

__all__ = ["ENTRY_HEADER", "FORMAT_VERSION", "HEADER_HEAD", "LOCK_FILE", "MAX_ENTRY_BYTES", "PAYLOAD_HEAD",
           "READ_CHUNK", "SEGMENT_SUFFIX", "STATE_FILE", "FsyncPolicy", "Spool", "SpoolLockedError", "SpoolStats",
           "SpoolWriteError", "encode_entry", "log"]


class SpoolLockedError(RuntimeError):
    """Another process (or another Spool in this one) has the directory open."""


class SpoolWriteError(OSError):
    """An append failed part-way (a full disk, say): the first ``written`` messages are in the spool
    (sequence numbers from ``first``), the rest are not."""

    def __init__(self, first: int, written: int, cause: OSError) -> None:
        super().__init__(cause.errno, f"spool write failed after {written} message(s): {cause.strerror or cause}")
        self.first = first
        self.written = written
        self.cause = cause


@snapshot
class SpoolStats:
    """What the spool holds and what it lost, for ``/metrics``."""

    dropped_total: int = counter("gpuwatch_agent_spool_dropped",
                                 "Oldest messages deleted unread because the spool reached its bound.")
    corrupt_total: int = counter("gpuwatch_agent_spool_corrupt",
                                 "Damaged spool regions found (torn writes, bad CRCs) and stepped over.")
    corrupt_bytes_total: int = counter("gpuwatch_agent_spool_corrupt_bytes", "Bytes of damaged spool regions.")
    corrupt_messages_total: int = counter(
        "gpuwatch_agent_spool_corrupt_messages",
        "Spooled messages lost to damage, where their number is known (damage met while reading).")
    write_errors_total: int = counter(
        "gpuwatch_agent_spool_write_errors", "Spool writes, fsyncs and state updates that failed (a full disk).")
    spool_bytes: int = gauge("gpuwatch_agent_spool_bytes", "Bytes of spool segments on disk.")
    spool_messages: int = gauge("gpuwatch_agent_spool_messages", "Messages waiting in the spool.")


_write = os.write  # the one call that puts entry bytes on disk (tests inject a full disk here)


class _PartialWrite(OSError):
    def __init__(self, written: int, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror)
        self.written = written
        self.cause = cause


def _write_all(fd: int, data: bytes | memoryview) -> None:
    """Write everything; on failure raise :class:`_PartialWrite` saying how many bytes reached the file."""
    view = memoryview(data)
    done = 0
    while done < len(view):
        try:
            done += _write(fd, view[done:])
        except OSError as exc:
            raise _PartialWrite(done, exc) from exc


class Spool(_Recovery):
    """Bounded on-disk FIFO of :class:`Message` (see the module docstring for the why).

    ``append`` adds at the tail, ``peek``/``read`` look at the head without consuming,
    ``commit``/``commit_until`` consume after a successful send. When an append would
    pass ``max_bytes``, the oldest whole segments are deleted first and their unread
    messages counted in :attr:`dropped_total`. ``clock`` (monotonic seconds) times the "interval"
    fsync policy and the error log's rate limit; tests may pass a fake one.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        max_bytes: int = 512 << 20,
        segment_bytes: int = 8 << 20,
        *,
        fsync: FsyncPolicy = "batch",
        fsync_interval_ms: int = 1000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if segment_bytes < 4096:
            raise ValueError("segment_bytes must be >= 4096")
        if max_bytes < 2 * segment_bytes:
            raise ValueError("max_bytes must be at least two segments (2 * segment_bytes)")
        if fsync not in ("batch", "interval", "none"):
            raise ValueError(f"unknown fsync policy {fsync!r}")
        super().__init__(directory, max_bytes, segment_bytes, fsync, fsync_interval_ms, clock)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise SpoolLockedError(f"spool directory {self.directory} is in use by another spool") from None
        try:
            self._open()
        except BaseException:
            self._release_lock()
            raise

    # ------------------------------------------------------------------ properties

    def __len__(self) -> int:
        """Unread messages."""
        with self._lock:
            return self._len

    @property
    def bytes(self) -> int:
        """Bytes on disk in segments (including read entries of the head segment)."""
        with self._lock:
            return self._bytes

    @property
    def dropped_total(self) -> int:
        """Messages deleted unread because the spool was full (persisted across restarts)."""
        with self._lock:
            return self._dropped_total

    @property
    def corrupt_total(self) -> int:
        """Damaged regions found (torn tails, bad CRCs); persisted across restarts."""
        with self._lock:
            return self._corrupt_total

    @property
    def head_seq(self) -> int:
        """Sequence number of the oldest unread message (restarts at 0 when the spool is opened)."""
        with self._lock:
            return self._head_seq

    @property
    def tail_seq(self) -> int:
        """Sequence number the next appended message will get."""
        with self._lock:
            return self._head_seq + self._len

    def stats(self) -> SpoolStats:
        """Counters and levels for ``/metrics`` (the counters include earlier runs on this directory)."""
        with self._lock:
            return SpoolStats(
                dropped_total=self._dropped_total, corrupt_total=self._corrupt_total,
                corrupt_bytes_total=self._corrupt_bytes_total, corrupt_messages_total=self._corrupt_messages_total,
                write_errors_total=self._write_errors_total, spool_bytes=self._bytes, spool_messages=self._len,
            )

    # ------------------------------------------------------------------ append

    def append(self, msgs: Iterable[Message]) -> int:
        """Append messages in order; returns the sequence number of the first.

        Oldest segments are deleted (and counted) as needed to stay within ``max_bytes``.
        Raises :class:`SpoolWriteError` if the disk refuses part-way; the messages before
        the failure stay appended (``written``), nothing after them is on disk.
        """
        encoded = [encode_entry(m) for m in msgs]
        limit = self.max_bytes // 2
        for entry in encoded:
            if len(entry) > limit:
                raise ValueError(f"message of {len(entry)} bytes exceeds half the spool's bound ({limit})")
        with self._lock:
            self._check_open()
            first = self._head_seq + self._len
            if not encoded:
                return first
            pending: list[builtins.bytes] = []
            pending_bytes = 0
            tail_before = first
            try:
                for entry in encoded:
                    if self._wfd is None or (self._segments[-1].size + pending_bytes >= self.segment_bytes):
                        self._write_pending(pending, pending_bytes)
                        pending, pending_bytes = [], 0
                        self._roll()
                    while self._bytes + pending_bytes + len(entry) > self.max_bytes:
                        self._write_pending(pending, pending_bytes)
                        pending, pending_bytes = [], 0
                        self._drop_oldest_segment()
                        if self._wfd is None:
                            self._roll()
                    pending.append(entry)
                    pending_bytes += len(entry)
                self._write_pending(pending, pending_bytes)
            except OSError as exc:  # the caller logs it: it knows what waits instead
                self._write_errors_total += 1
                # messages of this call the bound dropped meanwhile count as written (and dropped)
                written = self._head_seq + self._len - tail_before
                raise SpoolWriteError(first, written, exc) from exc
            self._maybe_fsync(force=self.fsync_policy == "batch")
            return first

    def _write_pending(self, pending: list[builtins.bytes], pending_bytes: int) -> None:
        """Write whole entries; on failure keep the entries that reached the file whole and cut the rest."""
        if not pending:
            return
        assert self._wfd is not None
        segment = self._segments[-1]
        try:
            _write_all(self._wfd, b"".join(pending))
        except _PartialWrite as exc:
            kept = kept_bytes = 0
            for entry in pending:
                if kept_bytes + len(entry) > exc.written:
                    break
                kept += 1
                kept_bytes += len(entry)
            self._cut_back(segment, segment.size + kept_bytes)
            self._grow(segment, kept, kept_bytes)
            raise exc.cause from None
        self._grow(segment, len(pending), pending_bytes)


    # ------------------------------------------------------------------ read and commit

    def peek(self, n: int, max_bytes: int | None = None) -> list[Message]:
        """Up to ``n`` oldest unread messages (fewer if ``max_bytes`` of entries are reached), not consumed."""
        return self.read(n, max_bytes)[1]

    def read(self, n: int, max_bytes: int | None = None) -> tuple[int, list[Message]]:
        """Like :meth:`peek`, with the sequence number of the first message returned."""
        with self._lock:
            self._check_open()
            while True:
                try:
                    return self._read_locked(n, max_bytes, READ_CHUNK)
                except _CorruptEntryError as exc:
                    # Only reachable if a segment is damaged after open (disk, or another writer).
                    self._resync_head(str(exc))

    def commit(self, n: int) -> None:
        """Consume the ``n`` oldest unread messages (after they were sent)."""
        with self._lock:
            self.commit_until(self._head_seq + n)

    def commit_until(self, seq: int) -> int:
        """Consume every unread message with a sequence number below ``seq``; returns how many.

        Safe against drops between a read and its commit: messages already dropped are
        not counted twice, and nothing newer than ``seq`` is consumed. Positions come from
        the last read; without one the entries are read (and checked) first.
        """
        with self._lock:
            self._check_open()
            done = 0
            while (k := min(seq - self._head_seq, self._len)) > 0:
                cache = self._read_cache
                if cache is None or cache[0] != self._head_seq or not cache[1]:
                    self.read(k)  # may step over damage, which moves the head on
                    continue
                take = min(k, len(cache[1]))
                seg_i, off, idx = cache[1][take - 1]
                for _ in range(seg_i):
                    self._pop_head_segment()
                self._cursor_off, self._cursor_idx = off, idx
                self._head_seq += take
                self._len -= take
                self._read_cache = None
                done += take
            if not done:
                return 0
            if self._len == 0:
                self._delete_all_segments()
            else:
                self._advance_past_consumed()
            self._write_state(sync=self.fsync_policy == "batch")
            self._maybe_fsync(force=False)
            return done

    # ------------------------------------------------------------------ housekeeping

    def sync(self) -> None:
        """fsync the active segment and the state now, whatever the policy."""
        with self._lock:
            self._check_open()
            self._maybe_fsync(force=True)

    def close(self) -> None:
        """Sync (unless the policy is "none"), persist the cursor, release the directory."""
        with self._lock:
            if self._closed:
                return
            try:
                self._maybe_fsync(force=self.fsync_policy != "none")
                self._write_state(sync=self.fsync_policy != "none")
            finally:
                self._closed = True
                self._close_writer()
                self._close_reader()
                self._release_lock()

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Spool({str(self.directory)!r}, messages={self._len}, bytes={self._bytes}, "
                f"dropped_total={self._dropped_total}, corrupt_total={self._corrupt_total})")

    def _release_lock(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        os.close(self._lock_fd)
