"""Serve the API in-process with uvicorn, next to the consumer and maintenance tasks.

Why in-process: the collector and ``gpuwatch up`` already hold the store's pool and the
live ingest counters; a separate process would need its own pool and could not report
the consumer's lag. :class:`ApiServer` binds first (so the real port is known when the
caller prints it, also for port 0), serves on the running loop, and stops gracefully.

The socket is made with ``IPPROTO_TCP`` and ``TCP_NODELAY``: asyncio disables Nagle's
algorithm only on sockets whose ``proto`` says TCP, and a plain ``socket(AF_INET,
SOCK_STREAM)`` has proto 0, so every keep-alive answer (headers and body written apart)
waited for the client's delayed ACK, about 40 ms (docs/benchmarks.md, "API keep-alive").
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn

from collector.api.app import create_app
from collector.api.context import IngestStats
from collector.api.settings import ApiSettings


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the hosting process owns SIGTERM/SIGINT and
    stops the API through :meth:`ApiServer.stop` (uvicorn's would swallow the signal)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def listening_socket(family: socket.AddressFamily) -> socket.socket:
    """A TCP socket whose accepted connections send small writes at once (no Nagle)."""
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited by accepted sockets on Linux
    return sock


class ApiServer:
    def __init__(self, pool: Any, settings: ApiSettings, stats: IngestStats | None = None) -> None:
        self.settings = settings
        self.app = create_app(pool, settings, stats)
        config = uvicorn.Config(
            self.app, log_level="warning", access_log=False, lifespan="off",
            ssl_certfile=str(settings.tls_cert) if settings.tls_cert else None,
            ssl_keyfile=str(settings.tls_key) if settings.tls_key else None,
        )
        self._server = _Server(config)
        self._socket: socket.socket | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        assert self._socket is not None, "start() first"
        return int(self._socket.getsockname()[1])

    @property
    def url(self) -> str:
        scheme = "https" if self.settings.tls_cert else "http"
        host = self.settings.host if ":" not in self.settings.host else f"[{self.settings.host}]"
        return f"{scheme}://{host}:{self.port}"

    async def start(self) -> None:
        family = socket.AF_INET6 if ":" in self.settings.host else socket.AF_INET
        sock = listening_socket(family)
        try:
            sock.bind((self.settings.host, self.settings.port))
        except OSError:
            sock.close()
            raise
        sock.set_inheritable(True)
        self._socket = sock
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                return
            await asyncio.sleep(0.01)

    async def stop(self, timeout: float = 5.0) -> None:
        if self._task is None:
            return
        self._server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except TimeoutError:
            self._server.force_exit = True
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._socket is not None:
            self._socket.close()
