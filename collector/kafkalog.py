"""The Kafka client's own log lines, rate-limited: one line per kind of trouble, then a count.

Why: while the broker is down, aiokafka logs an ERROR or WARNING for every reconnect,
metadata refresh and fetch attempt of the consumer and the producer, about 60 lines a
second from one collector, and the first of them says everything. :func:`install` adds a
filter to the root handlers that passes aiokafka's lines below WARNING untouched and lets
each warning or error of a kind (logger and message template) through once per
``every_s`` seconds, through :class:`~telemetry.ratelimit.RateLimitedLog`, with the count
of what it held back. The collector's own repeated errors use that class directly.
"""

from __future__ import annotations

import logging

from telemetry.ratelimit import RateLimitedLog

_PREFIX = "aiokafka"


class KafkaLogLimit(logging.Filter):
    """Holds back repeats of aiokafka's warnings and errors; everything else passes."""

    def __init__(self, every_s: float = 30.0) -> None:
        super().__init__()
        self.limited = RateLimitedLog(logging.getLogger("gpuwatch.kafka"), every_s)

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(_PREFIX) or record.levelno < logging.WARNING:
            return True
        self.limited.log(record.levelno, f"{record.name}:{record.msg}", "%s: %s", record.name,
                         record.getMessage())
        return False


def install(every_s: float = 30.0) -> KafkaLogLimit:
    """Add the filter to every handler of the root logger (call after ``logging.basicConfig``)."""
    limit = KafkaLogLimit(every_s)
    for handler in logging.getLogger().handlers:
        handler.addFilter(limit)
    return limit
