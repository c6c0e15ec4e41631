"""The agent's HTTP endpoints: ``/metrics``, ``/healthz`` and ``/readyz``.

A stdlib threading server is enough for a scrape every few seconds and keeps the agent's
image and memory small. ``/healthz`` says the process serves; ``/readyz`` says every GPU
has been sampled once (a DaemonSet rollout waits on it). Each request's CPU time is added
to the agent's ``http`` CPU account (``gpuwatch_agent_cpu_seconds_total``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agent.cpuclock import HTTP
from agent.exposition import CONTENT_TYPE, Exposition

log = logging.getLogger(__name__)


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:
        cpu0 = time.thread_time()
        try:
            self._get()
        finally:
            self.server.exposition.agent.cpu.add(HTTP, time.thread_time() - cpu0)

    def _get(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, self.server.exposition.render(), CONTENT_TYPE)
        elif path == "/healthz":
            self._json(200, {"status": "ok"})
        elif path == "/readyz":
            agent = self.server.exposition.agent
            if agent.ready.is_set():
                self._json(200, {"status": "ready", "gpus": len(agent.targets)})
            else:
                reason = "no GPU found" if not agent.targets else "waiting for the first sample of every GPU"
                self._json(503, {"status": "not ready", "reason": reason})
        else:
            self._json(404, {"error": f"no such path {path!r}; try /metrics, /healthz or /readyz"})

    def _json(self, status: int, body: dict[str, object]) -> None:
        self._send(status, json.dumps(body).encode(), "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s " + format, self.address_string(), *args)


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, port: int, exposition: Exposition) -> None:
        self.exposition = exposition
        super().__init__((host, port), _Handler)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 1.0}, name="gpuwatch-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(5)
