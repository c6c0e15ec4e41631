"""Sending one request body to one channel, with retries where a retry can help.

Why this policy: 429 and 5xx (and a connection that failed or timed out) say "later", so
they are retried with exponential backoff (honouring ``Retry-After``); any other 4xx says
the request itself is wrong (a revoked webhook, a bad routing key) and repeating it only
hammers the receiver, so it is given up at once and reported. Every HTTP exchange goes
through one :class:`Transport` seam (the real one is urllib in a worker thread), so tests
can swap it; error messages name the channel, never its URL, which is a secret.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from collector.alerting.rules import Channel


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    retry_after: float | None = None


class Transport(Protocol):
    def post(self, url: str, body: bytes, headers: dict[str, str], timeout: float) -> Response: ...


class UrllibTransport:
    """HTTP POST through the standard library (blocking: run it in a worker thread)."""

    def post(self, url: str, body: bytes, headers: dict[str, str], timeout: float) -> Response:
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                resp.read()
                return Response(resp.status)
        except urllib.error.HTTPError as exc:
            retry = exc.headers.get("Retry-After") if exc.headers else None
            exc.read()
            return Response(exc.code, _retry_after(retry))


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 4
    base_s: float = 0.5
    factor: float = 2.0
    cap_s: float = 30.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        backoff = min(self.cap_s, self.base_s * self.factor ** (attempt - 1))
        return min(self.cap_s, max(backoff, retry_after or 0.0))


DEFAULT_POLICY = RetryPolicy()


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    attempts: int
    status: int | None
    error: str | None = None
    permanent: bool = False  # a 4xx other than 429: retrying cannot help


def retryable(status: int) -> bool:
    return status == 429 or status >= 500


def target(channel: Channel) -> str:
    """The URL a channel posts to (Alertmanager: its API v2 alerts endpoint)."""
    if channel.type == "pagerduty":
        return channel.url.reveal() if channel.url else "https://events.pagerduty.com/v2/enqueue"
    assert channel.url is not None
    base = channel.url.reveal()
    if channel.type == "alertmanager" and not base.rstrip("/").endswith("/api/v2/alerts"):
        return base.rstrip("/") + "/api/v2/alerts"
    return base


def encode(channel: Channel, body: Any) -> bytes:
    if channel.type == "pagerduty":
        assert channel.routing_key is not None
        body = {"routing_key": channel.routing_key.reveal(), **body}
    return json.dumps(body, separators=(",", ":")).encode()


def send(channel: Channel, body: Any, transport: Transport, policy: RetryPolicy = DEFAULT_POLICY,
         sleep: Callable[[float], None] = time.sleep) -> Outcome:
    """POST ``body`` to the channel; retries 429/5xx/network errors, gives up on other 4xx."""
    url, data = target(channel), encode(channel, body)
    headers = {"Content-Type": "application/json", "User-Agent": "gpuwatch"}
    status: int | None = None
    error = ""
    for attempt in range(1, policy.attempts + 1):
        retry_after = None
        try:
            resp = transport.post(url, data, headers, channel.timeout_s)
        except OSError as exc:  # refused, reset, DNS, timeout (urllib wraps them in URLError, an OSError)
            status, error = None, f"channel {channel.name}: network error {type(exc).__name__}"
        else:
            status = resp.status
            if 200 <= status < 300:
                return Outcome(True, attempt, status)
            error = f"channel {channel.name}: HTTP {status}"
            if not retryable(status):
                return Outcome(False, attempt, status, error, permanent=True)
            retry_after = resp.retry_after
        if attempt < policy.attempts:
            sleep(policy.delay(attempt, retry_after))
    return Outcome(False, policy.attempts, status, error)
