"""Reading the small pseudo-files of /proc and cgroupfs, cheaply: kept open, re-read with pread.

Why: the host reader reads a few files per GPU process, per thread and per cgroup on every
sampling tick, inside the agent's CPU budget. Opening a file is most of the cost (about
15 µs for open, read and close, against 2-5 µs for ``pread`` at offset 0 on a descriptor
kept open, which makes the kernel generate the content afresh). So descriptors stay open
while they are used, and the ones not read for ``idle_s`` (a process or a thread that
ended, a GPU that lost its process) are closed by :meth:`OpenFiles.sweep`. A descriptor of
an exited process or thread fails (``ESRCH``), so a reused pid is never read through an old
descriptor: the failing one is closed and the error propagates (``OSError``) to the caller,
as does any other (no such file, no permission). At most ``max_open`` stay open; past that
the least recently used half is closed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

_CHUNK = 65536


class OpenFiles:
    """Descriptors of the files read on recent ticks, by path."""

    def __init__(self, max_open: int = 512, idle_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_open = max_open
        self.idle_s = idle_s
        self.clock = clock
        self._fds: dict[str, list[float | int]] = {}  # path -> [fd, last read]
        self._now = clock()
        self._scanned = self._now

    def read(self, path: str) -> bytes:
        """The whole content of ``path`` now."""
        entry = self._fds.get(path)
        if entry is None:
            if len(self._fds) >= self.max_open:
                self._close_oldest()
            entry = [os.open(path, os.O_RDONLY | os.O_CLOEXEC), self._now]
            self._fds[path] = entry
        fd = int(entry[0])
        entry[1] = self._now
        try:
            data = os.pread(fd, _CHUNK, 0)
            if len(data) == _CHUNK:
                parts = [data]
                while chunk := os.pread(fd, _CHUNK, sum(map(len, parts))):
                    parts.append(chunk)
                data = b"".join(parts)
        except OSError:
            del self._fds[path]
            os.close(fd)
            raise
        return data

    def sweep(self) -> None:
        """Start of a tick: note the time; close what was not read for ``idle_s`` (looked at
        every third of it, not every tick)."""
        self._now = self.clock()
        if self._now - self._scanned < self.idle_s / 3:
            return
        self._scanned = self._now
        stale = [p for p, (_fd, last) in self._fds.items() if self._now - last >= self.idle_s]
        for path in stale:
            os.close(int(self._fds.pop(path)[0]))

    def close(self) -> None:
        for fd, _last in self._fds.values():
            os.close(int(fd))
        self._fds.clear()

    def __len__(self) -> int:
        return len(self._fds)

    def _close_oldest(self) -> None:
        by_age = sorted(self._fds.items(), key=lambda item: item[1][1])
        for path, (fd, _last) in by_age[: max(1, len(by_age) // 2)]:
            os.close(int(fd))
            del self._fds[path]


#: how the readers read a file (:meth:`OpenFiles.read`, or any function of a path to its bytes)
Read = Callable[[str], bytes]
