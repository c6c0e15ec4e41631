"""The spool's segment files and state file: writing, rolling, dropping, reading entries, persisting the cursor.

:class:`_SegmentFiles` holds the spool's state and every operation on its files;
:class:`agent.spool.Spool` adds the public API (and the lock) on top, and
:mod:`agent.spool_recovery` what happens at open and when damage is met. The callers
hold the spool's lock; nothing here takes it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from agent.spool_format import ENTRY_HEADER, MAX_ENTRY_BYTES, SEGMENT_SUFFIX, _CorruptEntryError, _decode_payload
from telemetry.ratelimit import RateLimitedLog
from telemetry.wire import Message

log = logging.getLogger("agent.spool")  # one logger for the whole spool, as before it was split

FsyncPolicy = Literal["batch", "interval", "none"]

STATE_FILE = "state.json"
LOCK_FILE = "LOCK"
_STATE_KEYS = ("segment", "offset", "dropped_total", "corrupt_total", "corrupt_bytes_total",
               "corrupt_messages_total", "write_errors_total")


@dataclass(slots=True)
class _Segment:
    id: int
    path: Path
    size: int  # bytes of the file that are the spool's (valid entries, and damage between them)
    count: int  # valid entries
    # entry index -> offset, for the entries that do not start where the previous one ended (damage between)
    jumps: dict[int, int] = field(default_factory=dict)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


class _SegmentFiles:
    """The spool's segments, cursor and counters, and the file operations on them (the lock is held)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        max_bytes: int,
        segment_bytes: int,
        fsync: FsyncPolicy,
        fsync_interval_ms: int,
        clock: Callable[[], float],
    ) -> None:
        self._clock = clock  # monotonic seconds: the "interval" fsync policy's timer, the error log's rate limit
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
        self._last_fsync = clock()
        self._unsynced = False
        self._closed = False
        self._errors = RateLimitedLog(log, clock=clock)

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
        self._close_writer()
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

    def _read_locked(self, n: int, max_bytes: int | None, chunk: int) -> tuple[int, list[Message]]:
        """Read up to ``n`` entries from the cursor, a chunk at a time, following the jump tables.

        Damage found here (only possible if a file changed after open) ends the read with the
        good entries before it; a read that starts at damage raises, and :meth:`read` steps over it.
        ``chunk`` is :data:`agent.spool.READ_CHUNK`, passed in so a test that changes it there is heard.
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
            buf = f.read(min(segment.size - off, chunk))
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

    def _advance_past_consumed(self) -> None:
        """Delete fully read sealed segments at the head."""
        while len(self._segments) > 1 and self._cursor_idx >= self._segments[0].count:
            self._pop_head_segment()
            self._cursor_idx = self._cursor_off = 0

    def _pop_head_segment(self) -> None:
        segment = self._segments.pop(0)
        self._bytes -= segment.size
        self._unlink(segment)

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
        now = self._clock()
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


    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"spool {self.directory} is closed")

    def _path(self, seg_id: int) -> Path:
        return self.directory / f"{seg_id:016x}{SEGMENT_SUFFIX}"
