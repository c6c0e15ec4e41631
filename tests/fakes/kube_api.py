"""A recorded-response stand-in for the Kubernetes API server's pod list and watch.

No API server can run in the test environment, so this serves, over real HTTP on
127.0.0.1, what a real one answers to the two requests the agent's pod cache makes:

* ``GET /api/v1/pods?fieldSelector=spec.nodeName%3D<node>``: a recorded PodList
  (from ``kube_recordings/``), filtered by the node name in the field selector;
* the same with ``watch=true``: a chunked stream of newline-delimited JSON watch events
  (ADDED / MODIFIED / DELETED / BOOKMARK / ERROR) that the test feeds with ``send()``,
  held open until the test closes it (``close_watch()``) or the server stops.

Each request is recorded (path and query) so tests can check what the client asked for.
The real ``kubernetes`` client is pointed at it via ``configuration()``.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.poll import wait_until

RECORDINGS = Path(__file__).parent / "kube_recordings"

_CLOSE = object()  # queued to end the current watch response


def load_recording(name: str) -> Any:
    """A recorded response: ``*.json`` is one document, ``*.jsonl`` a list of watch events."""
    text = (RECORDINGS / name).read_text()
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


@dataclass(frozen=True)
class Request:
    path: str
    query: dict[str, str]
    headers: dict[str, str]

    @property
    def is_watch(self) -> bool:
        return self.query.get("watch") in ("true", "1")


class FakeKubeApi:
    """Serves recorded pod lists and test-fed watch streams on 127.0.0.1:<free port>."""

    def __init__(self, list_recording: str = "pods_list.json") -> None:
        self._pending_lists: list[dict[str, Any]] = [load_recording(list_recording)]
        self._current_list: dict[str, Any] = self._pending_lists[0]
        self._events: queue.Queue[object] = queue.Queue()
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self._active_watch = 0
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, name="fake-kube-api", daemon=True
        )

    # ---- lifecycle ----------------------------------------------------------------

    def start(self) -> FakeKubeApi:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> FakeKubeApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def configuration(self) -> Any:
        """A ``kubernetes.client.Configuration`` for this server (plain HTTP, no auth)."""
        from kubernetes.client import Configuration

        configuration = Configuration(host=self.url)
        configuration.api_key = {"authorization": "Bearer fake-token-never-logged"}
        return configuration

    # ---- scripting ----------------------------------------------------------------

    def queue_list(self, recording: str) -> None:
        """Answer the next list request with this recording (the last one served then repeats)."""
        with self._lock:
            self._pending_lists.append(load_recording(recording))

    def send(self, event: dict[str, Any]) -> None:
        """Deliver a watch event on the open watch (or the next one to connect)."""
        self._events.put(event)

    def close_watch(self) -> None:
        """End the current watch response normally, as a server-side timeout does."""
        self._events.put(_CLOSE)

    def expire_watch(self) -> None:
        """Send the API server's 410 Gone ERROR event, which ends the watch."""
        self.send(load_recording("watch_gone.json"))

    # ---- inspection ----------------------------------------------------------------

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def list_requests(self) -> list[Request]:
        return [r for r in self.requests if not r.is_watch]

    def watch_requests(self) -> list[Request]:
        return [r for r in self.requests if r.is_watch]

    def wait_for(self, predicate: Callable[[FakeKubeApi], bool], timeout: float = 5.0,
                 what: str = "the requests the fake Kubernetes API expects") -> bool:
        return wait_until(lambda: predicate(self), timeout=timeout, interval=0.005, what=what,
                          details=lambda: f"requests: {self.requests}")

    # ---- request handling (server threads) -----------------------------------------

    def _record(self, request: Request) -> int:
        with self._lock:
            self._requests.append(request)
            if request.is_watch:
                self._active_watch += 1
                return self._active_watch
            return 0

    def _next_list(self) -> dict[str, Any]:
        with self._lock:
            if self._pending_lists:
                self._current_list = self._pending_lists.pop(0)
            return self._current_list

    def _is_active(self, watch_id: int) -> bool:
        with self._lock:
            return watch_id == self._active_watch and not self._stopping.is_set()

    def _next_event(self, watch_id: int) -> object:
        """The next event for this watch, or _CLOSE when it ends or a newer watch replaces it."""
        while self._is_active(watch_id):
            try:
                return self._events.get(timeout=0.01)
            except queue.Empty:
                continue
        return _CLOSE


def _node_of(obj: dict[str, Any]) -> str | None:
    spec = obj.get("spec")
    node = spec.get("nodeName") if isinstance(spec, dict) else None
    return node if isinstance(node, str) else None


def _selected(obj: dict[str, Any], field_selector: str | None) -> bool:
    if not field_selector:
        return True
    for term in field_selector.split(","):
        key, _, value = term.partition("=")
        if key == "spec.nodeName" and _node_of(obj) != value:
            return False
    return True


def _handler_for(api: FakeKubeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            request = Request(url.path, query, {k.lower(): v for k, v in self.headers.items()})
            watch_id = api._record(request)
            if url.path != "/api/v1/pods":
                self._json(404, _status(404, "NotFound", f"the server could not find {url.path}"))
            elif request.is_watch:
                self._watch(watch_id, query.get("fieldSelector"))
            else:
                body = dict(api._next_list())
                body["items"] = [p for p in body["items"] if _selected(p, query.get("fieldSelector"))]
                self._json(200, body)

        def _json(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _watch(self, watch_id: int, field_selector: str | None) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                while True:
                    event = api._next_event(watch_id)
                    if event is _CLOSE:
                        break
                    assert isinstance(event, dict)
                    obj = event.get("object", {})
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED") and not _selected(obj, field_selector):
                        continue
                    line = json.dumps(event).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                    if event.get("type") == "ERROR":  # a real API server ends the watch after an error
                        break
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Handler


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
