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
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import json
import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from agent.stats import counter, gauge, snapshot
from telemetry.ratelimit import RateLimitedLog
from telemetry.wire import Message

log = logging.getLogger(__name__)

FsyncPolicy = Literal["batch", "interval", "none"]

ENTRY_HEADER = struct.Struct("<II")  # payload length, crc32(payload)
PAYLOAD_HEAD = struct.Struct("<BHH")  # format version, key length, header count
HEADER_HEAD = struct.Struct("<HI")  # header name length, header value length
FORMAT_VERSION = 1
MAX_ENTRY_BYTES = 64 << 20  # a frame is a few KB; anything larger is damage, not data
READ_CHUNK = 1 << 20  # replay reads segments in chunks of this size
SEGMENT_SUFFIX = ".seg"
STATE_FILE = "state.json"
LOCK_FILE = "LOCK"
_STATE_KEYS = ("segment", "offset", "dropped_total", "corrupt_total", "corrupt_bytes_total",
               "corrupt_messages_total", "write_errors_total")


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


class _CorruptEntryError(ValueError):
    pass


def encode_entry(msg: Message) -> bytes:
    """The on-disk bytes of one entry (header and payload)."""
    parts: list[bytes] = [PAYLOAD_HEAD.pack(FORMAT_VERSION, len(msg.key), len(msg.headers)), msg.key]
    for name, value in msg.headers:
        raw = name.encode()
        parts += [HEADER_HEAD.pack(len(raw), len(value)), raw, value]
    parts.append(msg.value)
    payload = b"".join(parts)
    if len(payload) > MAX_ENTRY_BYTES:
        raise ValueError(f"message of {len(payload)} bytes exceeds the spool's entry limit ({MAX_ENTRY_BYTES})")
    return ENTRY_HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def _decode_payload(payload: bytes | memoryview) -> Message:
    mv = memoryview(payload)
    if len(mv) < PAYLOAD_HEAD.size:
        raise _CorruptEntryError("payload shorter than its head")
    version, key_len, n_headers = PAYLOAD_HEAD.unpack_from(mv, 0)
    if version != FORMAT_VERSION:
        raise _CorruptEntryError(f"unknown entry format {version}")
    pos = PAYLOAD_HEAD.size + key_len
    if pos > len(mv):
        raise _CorruptEntryError("key past the payload's end")
    key = bytes(mv[PAYLOAD_HEAD.size:pos])
    if not n_headers:  # the common case, kept short: replay reads hundreds of thousands per second
        return Message(key, bytes(mv[pos:]))
    headers: list[tuple[str, bytes]] = []
    for _ in range(n_headers):
        if pos + HEADER_HEAD.size > len(mv):
            raise _CorruptEntryError("header past the payload's end")
        name_len, value_len = HEADER_HEAD.unpack_from(mv, pos)
        pos += HEADER_HEAD.size
        name_end = pos + name_len
        value_end = name_end + value_len
        if value_end > len(mv):
            raise _CorruptEntryError("header past the payload's end")
        try:
            name = bytes(mv[pos:name_end]).decode()
        except UnicodeDecodeError as exc:
            raise _CorruptEntryError("header name is not UTF-8") from exc
        headers.append((name, bytes(mv[name_end:value_end])))
        pos = value_end
    if pos > len(mv):
        raise _CorruptEntryError("key past the payload's end")
    return Message(key, bytes(mv[pos:]), tuple(headers))


def _entry_at(data: bytes, pos: int) -> int:
    """Length of a valid entry starting at ``pos`` in ``data``, or 0 if there is none."""
    if pos + ENTRY_HEADER.size > len(data):
        return 0
    length, crc = ENTRY_HEADER.unpack_from(data, pos)
    start = pos + ENTRY_HEADER.size
    end = start + length
    if length < PAYLOAD_HEAD.size or length > MAX_ENTRY_BYTES or end > len(data):
        return 0
    payload = memoryview(data)[start:end]
    if data[start] != FORMAT_VERSION or zlib.crc32(payload) != crc:
        return 0
    try:
        _decode_payload(payload)
    except _CorruptEntryError:
        return 0
    return int(end - pos)


@dataclass(slots=True)
class _Scan:
    entries: list[tuple[int, int]]  # (offset, entry length) of each valid entry
    regions: int  # damaged regions found (a torn tail is one)
    size: int  # bytes scanned

    @property
    def valid_end(self) -> int:
        """End of the last valid entry (0 if there is none)."""
        return self.entries[-1][0] + self.entries[-1][1] if self.entries else 0

    @property
    def damaged_bytes(self) -> int:
        return self.size - sum(length for _, length in self.entries)


def _scan(data: bytes) -> _Scan:
    """Find the valid entries of a segment's bytes, resynchronising past damage.

    After a damaged spot the next valid entry is searched byte by byte (candidates are
    positions whose payload starts with the format version byte); a CRC32 match on a
    plausible length is taken as the next entry. A torn tail has nothing valid after it.
    """
    entries: list[tuple[int, int]] = []
    regions = 0
    pos = 0
    size = len(data)
    while pos < size:
        length = _entry_at(data, pos)
        if length:
            entries.append((pos, length))
            pos += length
            continue
        regions += 1
        found = -1
        probe = pos + 1 + ENTRY_HEADER.size
        while True:
            probe = data.find(FORMAT_VERSION, probe)
            if probe < 0:
                break
            if _entry_at(data, probe - ENTRY_HEADER.size):
                found = probe - ENTRY_HEADER.size
                break
            probe += 1
        if found < 0:
            break
        pos = found
    return _Scan(entries, regions, size)


@dataclass(slots=True)
class _Segment:
    id: int
    path: Path
    size: int  # bytes of the file that are the spool's (valid entries, and damage between them)
    count: int  # valid entries
    # entry index -> offset, for the entries that do not start where the previous one ended (damage between)
    jumps: dict[int, int] = field(default_factory=dict)


def _jumps(entries: list[tuple[int, int]], base_idx: int, base_off: int, expect: int) -> dict[int, int]:
    """Jump-table rows for ``entries`` (offsets relative to ``base_off``), numbered from ``base_idx``."""
    out: dict[int, int] = {}
    for j, (off, length) in enumerate(entries):
        at = base_off + off
        if at != expect:
            out[base_idx + j] = at
        expect = at + length
    return out


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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


class Spool:
    """Bounded on-disk FIFO of :class:`Message` (see the module docstring for the why).

    ``append`` adds at the tail, ``peek``/``read`` look at the head without consuming,
    ``commit``/``commit_until`` consume after a successful send. When an append would
    pass ``max_bytes``, the oldest whole segments are deleted first and their unread
    messages counted in :attr:`dropped_total`.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        max_bytes: int = 512 << 20,
        segment_bytes: int = 8 << 20,
        *,
        fsync: FsyncPolicy = "batch",
        fsync_interval_ms: int = 1000,
    ) -> None:
        if segment_bytes < 4096:
            raise ValueError("segment_bytes must be >= 4096")
        if max_bytes < 2 * segment_bytes:
            raise ValueError("max_bytes must be at least two segments (2 * segment_bytes)")
        if fsync not in ("batch", "interval", "none"):
            raise ValueError(f"unknown fsync policy {fsync!r}")
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self.fsync_policy: FsyncPolicy = fsync
        self._fsync_interval = fsync_interval_ms / 1000.0
        self._lock = threading.RLock()
        self._segments: list[_Segment] = []
        self._cursor_off = 0  # byte offset of the next unread entry in _segments[0] (or of the gap before it)
        self._cursor_idx = 0  # entries already read in _segments[0]
        self._len = 0
        self._bytes = 0
        self._head_seq = 0
        self._dropped_total = 0
        self._corrupt_total = 0
        self._corrupt_bytes_total = 0
        self._corrupt_messages_total = 0
        self._write_errors_total = 0
        self._next_id = 1
        self._wfd: int | None = None  # append fd of the active (last) segment; None: the next append rolls
        self._reader: tuple[int, BinaryIO] | None = None
        # positions after each entry of the last read: (head_seq at read, [(segment idx, offset, index)])
        self._read_cache: tuple[int, list[tuple[int, int, int]]] | None = None
        self._last_fsync = time.monotonic()
        self._unsynced = False
        self._closed = False
        self._errors = RateLimitedLog(log)
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

    # ------------------------------------------------------------------ open and repair

    def _open(self) -> None:
        for stray in self.directory.glob("*.tmp"):
            stray.unlink(missing_ok=True)
        state = self._read_state()
        state_seg = int(state.get("segment", 0))
        state_off = int(state.get("offset", 0))
        self._dropped_total = int(state.get("dropped_total", 0))
        self._corrupt_total = int(state.get("corrupt_total", 0))
        self._corrupt_bytes_total = int(state.get("corrupt_bytes_total", 0))
        self._corrupt_messages_total = int(state.get("corrupt_messages_total", 0))
        self._write_errors_total = int(state.get("write_errors_total", 0))
        ids = sorted(int(p.name[: -len(SEGMENT_SUFFIX)], 16) for p in self.directory.glob("*" + SEGMENT_SUFFIX)
                     if _is_hex(p.name[: -len(SEGMENT_SUFFIX)]))
        self._next_id = max([state_seg, *ids]) + 1
        appendable = True
        for seg_id in ids:
            path = self._path(seg_id)
            if seg_id < state_seg:  # consumed or dropped before a crash: the state was written first
                path.unlink(missing_ok=True)
                continue
            cursor = state_off if seg_id == state_seg else None
            segment, cursor_idx, cursor_off, appendable = self._load_segment(seg_id, path, cursor)
            if not self._segments:
                self._cursor_idx, self._cursor_off = cursor_idx, cursor_off
            if segment.count == 0:  # nothing readable in it
                path.unlink(missing_ok=True)
                if not self._segments:
                    self._cursor_idx = self._cursor_off = 0
                appendable = True
                continue
            self._segments.append(segment)
        self._len = sum(s.count for s in self._segments) - self._cursor_idx
        self._bytes = sum(s.size for s in self._segments)
        if self._segments and self._len == 0:
            self._delete_all_segments()
        self._write_state(sync=True)
        if self._segments and appendable:
            self._wfd = os.open(self._segments[-1].path, os.O_WRONLY | os.O_APPEND)
        if self._len:
            log.info("spool %s: %d messages (%d bytes) waiting from a previous run", self.directory,
                     self._len, self._bytes)

    def _load_segment(self, seg_id: int, path: Path, cursor: int | None) -> tuple[_Segment, int, int, bool]:
        """Scan one segment and step over its damage; returns it, the cursor (index, offset) in it,
        and whether appending to it is safe (its file ends with its last valid entry)."""
        data = path.read_bytes()
        scan = _scan(data)
        valid_end = scan.valid_end
        size = len(data)
        appendable = True
        if scan.regions:
            self._count_damage(scan.regions, scan.damaged_bytes)
            self._errors.warning("damage", "spool segment %s: %d damaged region(s), %d bytes (torn write or "
                                 "corruption) stepped over; %d valid entries kept",
                                 path.name, scan.regions, scan.damaged_bytes, len(scan.entries))
            if valid_end < size:  # a torn tail: cut it, so appends continue after valid data
                try:
                    os.truncate(path, valid_end)
                    size = valid_end
                except OSError as exc:
                    self._write_errors_total += 1
                    self._errors.error("truncate", "spool segment %s: cannot cut its torn tail (%s); sealed",
                                       path.name, exc)
                    appendable = False
        entries = scan.entries
        cursor_idx = 0 if cursor is None else sum(1 for off, _ in entries if off < cursor)
        cursor_off = entries[cursor_idx][0] if cursor_idx < len(entries) else valid_end
        segment = _Segment(seg_id, path, size, len(entries), _jumps(entries, 0, 0, 0))
        return segment, cursor_idx, cursor_off, appendable

    def _count_damage(self, regions: int, nbytes: int, messages: int = 0) -> None:
        self._corrupt_total += regions
        self._corrupt_bytes_total += nbytes
        self._corrupt_messages_total += messages

    def _read_state(self) -> dict[str, int]:
        path = self.directory / STATE_FILE
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("spool state %s unreadable (%s): replaying from the oldest segment", path, exc)
            return {}
        if not isinstance(raw, dict) or not all(isinstance(raw.get(k, 0), int) for k in _STATE_KEYS):
            log.warning("spool state %s malformed: replaying from the oldest segment", path)
            return {}
        return {k: int(v) for k, v in raw.items() if isinstance(v, int)}

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

    def _grow(self, segment: _Segment, entries: int, nbytes: int) -> None:
        segment.size += nbytes
        segment.count += entries
        self._bytes += nbytes
        self._len += entries
        self._unsynced = self._unsynced or entries > 0

    def _cut_back(self, segment: _Segment, size: int) -> None:
        """Cut a partial write back to ``size`` (whole entries); seal the segment if even that fails."""
        assert self._wfd is not None
        try:
            os.ftruncate(self._wfd, size)
        except OSError as exc:
            self._write_errors_total += 1
            self._errors.error("truncate", "spool segment %s: cannot cut a partial write (%s); sealed",
                               segment.path.name, exc)
            self._close_writer()  # the next append starts a new segment; reads stop at the valid entries

    def _roll(self) -> None:
        """Seal the active segment (fsynced unless the policy is "none") and start a new one."""
        if self._wfd is not None:
            if self.fsync_policy != "none" and self._unsynced:
                self._fsync(self._wfd)
            os.close(self._wfd)
            self._wfd = None
            self._unsynced = False
        seg_id = self._next_id
        path = self._path(seg_id)
        self._wfd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
        self._next_id += 1
        if not self._segments:
            self._cursor_idx = self._cursor_off = 0
            self._segments.append(_Segment(seg_id, path, 0, 0))
            self._write_state(sync=False)  # the cursor now names this segment
        else:
            self._segments.append(_Segment(seg_id, path, 0, 0))
        if self.fsync_policy != "none":
            try:
                _fsync_dir(self.directory)
            except OSError as exc:
                self._note_error("fsync", "spool %s: fsync of the directory failed (%s)", self.directory, exc)

    def _drop_oldest_segment(self) -> None:
        segment = self._segments.pop(0)
        unread = segment.count - self._cursor_idx
        self._dropped_total += unread
        self._len -= unread
        self._head_seq += unread
        self._bytes -= segment.size
        self._cursor_idx = self._cursor_off = 0
        self._read_cache = None
        self._errors.warning("drop", "spool full (%d bytes): dropped the oldest %d messages (segment %s)",
                             self.max_bytes, unread, segment.path.name)
        if not self._segments:  # it was the active one
            self._close_writer()
        # The state first: a crash before the unlink leaves a segment the next open deletes.
        self._write_state(sync=self.fsync_policy != "none")
        self._unlink(segment)

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
                    return self._read_locked(n, max_bytes)
                except _CorruptEntryError as exc:
                    # Only reachable if a segment is damaged after open (disk, or another writer).
                    self._resync_head(str(exc))

    def _read_locked(self, n: int, max_bytes: int | None) -> tuple[int, list[Message]]:
        """Read up to ``n`` entries from the cursor, a chunk at a time, following the jump tables.

        Damage found here (only possible if a file changed after open) ends the read with the
        good entries before it; a read that starts at damage raises, and :meth:`read` steps over it.
        """
        first = self._head_seq
        out: list[Message] = []
        positions: list[tuple[int, int, int]] = []  # after each entry: (segment index, offset, index)
        seg_i, off, idx = 0, self._cursor_off, self._cursor_idx
        total = 0
        n = min(n, self._len)
        damage = ""
        while len(out) < n and not damage:
            segment = self._segments[seg_i]
            if idx >= segment.count:
                seg_i, off, idx = seg_i + 1, 0, 0
                continue
            jumps = segment.jumps
            off = jumps.get(idx, off)
            f = self._reader_for(segment)
            if f.tell() != off:
                f.seek(off)
            buf = f.read(min(segment.size - off, READ_CHUNK))
            view = memoryview(buf)
            pos = 0
            while len(out) < n and idx < segment.count:
                if pos and idx in jumps:
                    break  # the next entry is further on: read from there
                if pos + ENTRY_HEADER.size > len(buf):
                    if not pos:
                        damage = "ends inside an entry header"
                    break
                length, crc = ENTRY_HEADER.unpack_from(buf, pos)
                end = pos + ENTRY_HEADER.size + length
                if end > len(buf):
                    if pos:
                        break  # the entry continues past this chunk: read on from its start
                    if length > MAX_ENTRY_BYTES or off + end > segment.size:
                        damage = "has a bad entry length"
                        break
                    buf += f.read(end - len(buf))  # one entry larger than a chunk
                    view = memoryview(buf)
                    if end > len(buf):
                        damage = "ends inside an entry"
                        break
                payload = view[pos + ENTRY_HEADER.size:end]
                if zlib.crc32(payload) != crc:
                    damage = "has an entry with a bad CRC"
                    break
                try:
                    out.append(_decode_payload(payload))
                except _CorruptEntryError:
                    damage = "has an entry that does not decode"
                    break
                pos = end
                idx += 1
                positions.append((seg_i, off + pos, idx))
                total += ENTRY_HEADER.size + length
                if max_bytes is not None and total >= max_bytes:
                    n = len(out)
            off += pos
        if damage and not out:
            raise _CorruptEntryError(f"segment {self._segments[seg_i].path.name} {damage} at offset {off}")
        self._read_cache = (first, positions)
        return first, out

    def _resync_head(self, why: str) -> None:
        """The head entry is damaged: find the valid entries after it in the head segment, count the loss."""
        segment = self._segments[0]
        start = segment.jumps.get(self._cursor_idx, self._cursor_off)
        f = self._reader_for(segment)
        f.seek(start)
        data = f.read(max(0, segment.size - start))
        scan = _scan(data)
        expected = segment.count - self._cursor_idx
        entries = scan.entries
        if entries and entries[0][0] == 0:  # the scan accepts what the reader refused: give it up, keep moving
            entries = entries[1:]
        kept = entries[:expected]
        lost = expected - len(kept)
        damaged = len(data) - sum(length for _, length in kept)
        self._count_damage(max(1, scan.regions), damaged, lost)
        self._errors.error("damage", "spool: %s; stepped over %d damaged bytes, %d message(s) lost, %d kept in %s",
                           why, damaged, lost, len(kept), segment.path.name)
        segment.jumps = {k: v for k, v in segment.jumps.items() if k < self._cursor_idx}
        segment.jumps.update(_jumps(kept, self._cursor_idx, start, -1))
        segment.count = self._cursor_idx + len(kept)
        self._len -= lost
        self._head_seq += lost
        self._read_cache = None
        last_end = start + (kept[-1][0] + kept[-1][1] if kept else 0)
        if segment is self._segments[-1] and last_end < segment.size:
            self._close_writer()  # damage at its end: appends go to a fresh segment, not after it
        if len(kept) == 0 and len(self._segments) > 1:
            self._advance_past_consumed()
        elif self._len == 0:
            self._delete_all_segments()
        self._write_state(sync=self.fsync_policy != "none")

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

    def _advance_past_consumed(self) -> None:
        """Delete fully read sealed segments at the head."""
        while len(self._segments) > 1 and self._cursor_idx >= self._segments[0].count:
            self._pop_head_segment()
            self._cursor_idx = self._cursor_off = 0

    def _pop_head_segment(self) -> None:
        segment = self._segments.pop(0)
        self._bytes -= segment.size
        self._unlink(segment)

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

    def _note_error(self, key: str, msg: str, *args: object) -> None:
        self._write_errors_total += 1
        self._errors.error(key, msg, *args)

    def _fsync(self, fd: int) -> None:
        """fsync; a failure (EIO, ENOSPC on some filesystems) is counted and logged, the data stays."""
        try:
            os.fsync(fd)
        except OSError as exc:
            self._note_error("fsync", "spool %s: fsync failed (%s); the data stays but may not survive a "
                             "power cut", self.directory, exc)

    def _maybe_fsync(self, *, force: bool) -> None:
        now = time.monotonic()
        due = self.fsync_policy == "interval" and now - self._last_fsync >= self._fsync_interval
        if not (force or due):
            return
        if self._wfd is not None and self._unsynced:
            self._fsync(self._wfd)
        self._unsynced = False
        self._last_fsync = now

    def _write_state(self, *, sync: bool) -> None:
        """Replace ``state.json``; a failure (a full disk) is counted and logged: the next one catches up."""
        state = {
            "version": 1,
            "segment": self._segments[0].id if self._segments else self._next_id,
            "offset": self._cursor_off if self._segments else 0,
            "dropped_total": self._dropped_total,
            "corrupt_total": self._corrupt_total,
            "corrupt_bytes_total": self._corrupt_bytes_total,
            "corrupt_messages_total": self._corrupt_messages_total,
            "write_errors_total": self._write_errors_total,
        }
        path = self.directory / STATE_FILE
        tmp = path.with_suffix(".tmp")
        try:
            with open(tmp, "w") as f:
                f.write(json.dumps(state))
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            self._note_error("state", "spool %s: cannot update %s (%s); the cursor is persisted later",
                             self.directory, STATE_FILE, exc)
            return
        self._errors.resolved("state")

    def _delete_all_segments(self) -> None:
        self._close_writer()
        self._close_reader()
        for segment in self._segments:
            self._unlink(segment)
        self._segments.clear()
        self._cursor_idx = self._cursor_off = 0
        self._bytes = 0
        self._read_cache = None

    def _unlink(self, segment: _Segment) -> None:
        if self._reader is not None and self._reader[0] == segment.id:
            self._close_reader()
        segment.path.unlink(missing_ok=True)

    def _reader_for(self, segment: _Segment) -> BinaryIO:
        if self._reader is not None and self._reader[0] == segment.id:
            return self._reader[1]
        self._close_reader()
        f = open(segment.path, "rb", buffering=1 << 20)  # noqa: SIM115 - kept open across calls
        self._reader = (segment.id, f)
        return f

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader[1].close()
            self._reader = None

    def _close_writer(self) -> None:
        if self._wfd is not None:
            if self.fsync_policy != "none" and self._unsynced:
                self._fsync(self._wfd)
            os.close(self._wfd)
            self._wfd = None
            self._unsynced = False

    def _release_lock(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        os.close(self._lock_fd)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"spool {self.directory} is closed")

    def _path(self, seg_id: int) -> Path:
        return self.directory / f"{seg_id:016x}{SEGMENT_SUFFIX}"


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True
