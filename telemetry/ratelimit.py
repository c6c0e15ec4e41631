"""Rate-limited logging: one line for a repeated error, then a count.

A broker that is down for a minute made the collector write about 63 ERROR lines a second,
and an agent with a full disk 5 a second: the first line says everything, the rest bury
the other components' logs and cost disk on every node. :class:`RateLimitedLog` logs the
first occurrence of a key at once, swallows repeats for ``every_s`` seconds, and then logs
the next occurrence with how many were suppressed since the last line. A key is what makes
two errors "the same" (usually the operation and the exception type), not the message,
which may carry offsets or counters that change every time.

Shared by the agent and the collector (so it lives in ``telemetry``); it takes its clock
as an argument so tests run on fake time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class _Seen:
    next_at: float
    suppressed: int = 0


class RateLimitedLog:
    """Log repeated messages once per ``every_s`` seconds per key, with a count of the rest."""

    def __init__(
        self,
        logger: logging.Logger,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 1024,
    ) -> None:
        self.logger = logger
        self.every_s = every_s
        self.clock = clock
        self.max_keys = max_keys
        self._seen: dict[str, _Seen] = {}
        self._lock = threading.Lock()
        self.suppressed_total = 0

    def log(self, level: int, key: str, msg: str, *args: object) -> bool:
        """Log ``msg % args`` under ``key`` unless a line for ``key`` went out less than
        ``every_s`` ago; return whether it was written."""
        now = self.clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now < seen.next_at:
                seen.suppressed += 1
                self.suppressed_total += 1
                return False
            suppressed = seen.suppressed if seen is not None else 0
            if seen is None and len(self._seen) >= self.max_keys:
                self._seen.pop(next(iter(self._seen)))  # oldest key: bound the memory, not the lines
            self._seen[key] = _Seen(now + self.every_s)
        if suppressed:
            self.logger.log(level, msg + " (%d more like this in the last %.0f s)", *args, suppressed, self.every_s)
        else:
            self.logger.log(level, msg, *args)
        return True

    def warning(self, key: str, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, key, msg, *args)

    def error(self, key: str, msg: str, *args: object) -> bool:
        return self.log(logging.ERROR, key, msg, *args)

    def resolved(self, key: str, msg: str | None = None, *args: object) -> None:
        """Forget ``key`` (the condition cleared), logging ``msg`` at INFO if it had fired,
        with the count of what was suppressed since its last line."""
        with self._lock:
            seen = self._seen.pop(key, None)
        if seen is None or msg is None:
            return
        if seen.suppressed:
            self.logger.info(msg + " (after %d more suppressed lines)", *args, seen.suppressed)
        else:
            self.logger.info(msg, *args)
