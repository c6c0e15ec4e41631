"""Rate-limited warnings for the attribution sources' background threads.

A watch that cannot reach the API server, or a kubelet socket that refuses calls, fails
the same way every few seconds for as long as the outage lasts. Operators need to see it
once, not once per retry, so each distinct problem (a key) is logged at WARNING at most
once per interval and at DEBUG otherwise.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable


class RateLimitedLog:
    """Log each key at WARNING at most once per ``interval_s`` seconds, else at DEBUG."""

    def __init__(
        self, logger: logging.Logger, interval_s: float = 300.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def warning(self, key: str, msg: str, *args: object) -> None:
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            loud = last is None or now - last >= self._interval_s
            if loud:
                self._last[key] = now
        self._logger.log(logging.WARNING if loud else logging.DEBUG, msg, *args)

    def reset(self, key: str) -> bool:
        """Forget a key once its problem is gone, so that a recurrence is logged again.

        Returns whether the key had been logged, i.e. whether a recovery is worth reporting.
        """
        with self._lock:
            return self._last.pop(key, None) is not None
