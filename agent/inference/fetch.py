"""One HTTP GET of an inference server's metrics page, bounded in time and size (asyncio).

Why not an HTTP client library: the agent's image has none for asyncio, and this needs one
request per scrape with two hard bounds that a library's per-operation timeouts do not
give: the whole exchange (connect, request, every byte of the answer) ends within
``timeout`` seconds, so a server that trickles its page cannot hold the scraper, and the
body is at most ``max_bytes``, so a runaway page cannot grow the agent. HTTP/1.1 with
``Connection: close``; a ``Content-Length``, chunked or read-to-close body; no redirects,
no compression (none is asked for). Every failure is a :class:`FetchError` whose ``kind``
is what the scraper counts (``timeout``, ``connect``, ``http``, ``too_large``, ``protocol``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

DEFAULT_MAX_BYTES: Final = 8 << 20
_ACCEPT: Final = "text/plain;version=0.0.4;q=1.0,*/*;q=0.1"


class FetchError(Exception):
    """A scrape that gave no page: ``kind`` for counting, the message for the log line."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


async def fetch(host: str, port: int, path: str, timeout: float, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The body of ``GET path`` from ``host:port`` with status 200, within ``timeout`` seconds."""
    try:
        return await asyncio.wait_for(_get(host, port, path, max_bytes), timeout)
    except TimeoutError:
        raise FetchError("timeout", f"no complete answer within {timeout:g} s") from None


async def _get(host: str, port: int, path: str, max_bytes: int) -> bytes:
    try:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 16)
    except OSError as exc:
        raise FetchError("connect", f"cannot connect: {exc.strerror or exc}") from None
    try:
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: {_ACCEPT}\r\n"
                     "User-Agent: gpuwatch-agent\r\nConnection: close\r\n\r\n".encode("ascii"))
        await writer.drain()
        status, headers = await _head(reader)
        if status != 200:
            raise FetchError("http", f"HTTP status {status}")
        if headers.get("transfer-encoding", "").lower() == "chunked":
            return await _chunked(reader, max_bytes)
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                raise FetchError("protocol", f"bad Content-Length {length[:20]!r}")
            if int(length) > max_bytes:
                raise FetchError("too_large", f"page of {int(length)} bytes, more than {max_bytes}")
            return await reader.readexactly(int(length))
        parts: list[bytes] = []
        size = 0
        while chunk := await reader.read(1 << 16):  # no length given: the page ends with the connection
            size += len(chunk)
            if size > max_bytes:
                raise FetchError("too_large", f"page of more than {max_bytes} bytes")
            parts.append(chunk)
        return b"".join(parts)
    except asyncio.IncompleteReadError:
        raise FetchError("protocol", "the connection closed before the page ended") from None
    except (asyncio.LimitOverrunError, ValueError):
        raise FetchError("protocol", "a header or chunk line too long or malformed") from None
    except OSError as exc:
        raise FetchError("connect", f"connection failed: {exc.strerror or exc}") from None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    line = (await reader.readuntil(b"\r\n")).decode("latin-1")
    parts = line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise FetchError("protocol", f"not an HTTP response: {line.strip()[:40]!r}")
    headers: dict[str, str] = {}
    for _ in range(100):
        raw = (await reader.readuntil(b"\r\n")).decode("latin-1").strip()
        if not raw:
            return int(parts[1]), headers
        name, sep, value = raw.partition(":")
        if not sep:
            raise FetchError("protocol", f"malformed header {raw[:40]!r}")
        headers[name.strip().lower()] = value.strip()
    raise FetchError("protocol", "more than 100 headers")


async def _chunked(reader: asyncio.StreamReader, max_bytes: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        line = (await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip()
        chunk = int(line, 16)  # ValueError: a malformed chunk size
        if chunk == 0:
            return b"".join(parts)
        size += chunk
        if size > max_bytes:
            raise FetchError("too_large", f"page of more than {max_bytes} bytes")
        parts.append(await reader.readexactly(chunk))
        await reader.readexactly(2)
