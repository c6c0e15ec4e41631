"""What the spool does at open and when a read meets damage: scan, step over, count, truncate a torn tail.

Split from :mod:`agent.spool_segments` because it is the one place that decides what
damage costs (see "Damage is stepped over" in :mod:`agent.spool`); everything here runs
with the spool's lock held (or before the spool is shared, at open).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from agent.spool_format import SEGMENT_SUFFIX, _jumps, _scan
from agent.spool_segments import _is_hex, _Segment, _SegmentFiles

log = logging.getLogger("agent.spool")  # one logger for the whole spool, as before it was split


class _Recovery(_SegmentFiles):
    """Opening a spool directory (repairing what a crash left) and stepping over damage met later."""

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
