"""The client libraries' own log lines, rate-limited: one line per kind of trouble, then a count.

Why: while the broker is down, aiokafka logs an ERROR or WARNING for every reconnect,
metadata refresh and fetch attempt of the consumer and the producer (about 60 lines a
second from one collector), and asyncpg's pool logs a traceback each time it fails to
reconnect while PostgreSQL restarts. The first line says everything. :func:`install` adds
a filter to the root handlers that passes these libraries' lines below WARNING untouched
and lets each warning or error of a kind (logger and message template) through once per
``every_s`` seconds, through :class:`~telemetry.ratelimit.RateLimitedLog`, as one line
(the exception's text instead of its traceback) with the count of what it held back. The
collector's own repeated errors use that class directly.
"""

from __future__ import annotations

import logging

from telemetry.ratelimit import RateLimitedLog

LIBRARIES = ("aiokafka", "asyncpg")


class ClientLogLimit(logging.Filter):
    """Holds back repeats of the client libraries' warnings and errors; everything else passes."""

    def __init__(self, every_s: float = 30.0) -> None:
        super().__init__()
        self.limited = RateLimitedLog(logging.getLogger("gpuwatch.clients"), every_s)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not record.name.startswith(LIBRARIES):
            return True
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text = f"{text}: {type(exc).__name__}: {exc}"
        self.limited.log(record.levelno, f"{record.name}:{record.msg}", "%s: %s", record.name, text)
        return False


def install(every_s: float = 30.0) -> ClientLogLimit:
    """Add the filter to every handler of the root logger (call after ``logging.basicConfig``)."""
    limit = ClientLogLimit(every_s)
    for handler in logging.getLogger().handlers:
        handler.addFilter(limit)
    return limit
