"""Fixtures for alerting tests: a schema-checking HTTP receiver and a real Alertmanager.

The receiver stands in for Slack, PagerDuty and generic webhooks: each path validates
the body against the published schema of that service (tests/alerting/schemas), records
it, and answers with a scripted status, so retries and give-ups are tested against a
real HTTP exchange. Alertmanager is Debian's ``prometheus-alertmanager`` binary on a free
loopback port, routing to the receiver's ``/am-webhook`` path.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.conftest import free_port, http_get, wait_until

SCHEMAS = Path(__file__).parent / "schemas"
_PATH_SCHEMA = {"/slack": "slack_incoming_webhook.json", "/pd": "pagerduty_events_v2.json",
                "/hook": "webhook_v4.json", "/api/v2/alerts": "alertmanager_postable_alerts.json"}


@dataclass
class Receiver:
    port: int
    received: list[tuple[str, Any]] = field(default_factory=list)
    invalid: list[tuple[str, str]] = field(default_factory=list)
    script: list[tuple[int, dict[str, str]]] = field(default_factory=list)  # statuses to answer first
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def bodies(self, path: str) -> list[Any]:
        with self.lock:
            return [b for p, b in self.received if p == path]


def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / name).read_text())
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    validators = {path: _validator(name) for path, name in _PATH_SCHEMA.items()}
    state = Receiver(0)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            with state.lock:
                scripted = state.script.pop(0) if state.script else None
            if scripted is not None:
                status, headers = scripted
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                return
            try:
                body = json.loads(raw)
            except ValueError as exc:
                self._answer(400, f"not JSON: {exc}")
                return
            validator = validators.get(self.path)
            if validator is not None:
                errors = sorted(validator.iter_errors(body), key=str)
                if errors:
                    with state.lock:
                        state.invalid.append((self.path, errors[0].message))
                    self._answer(400, errors[0].message)
                    return
            with state.lock:
                state.received.append((self.path, body))
            self._answer(202 if self.path == "/pd" else 200, "ok")

        def _answer(self, status: int, text: str) -> None:
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@dataclass
class Alertmanager:
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alerts(self) -> list[dict[str, Any]]:
        resp = http_get(f"{self.url}/api/v2/alerts")
        assert resp.status == 200, resp.text
        return list(resp.json())


@pytest.fixture
def alertmanager(receiver: Receiver, tmp_path: Path) -> Iterator[Alertmanager]:
    binary = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
    if not Path(binary).exists():
        pytest.fail("prometheus-alertmanager is missing: apt-get install -y prometheus-alertmanager", pytrace=False)
    config = tmp_path / "alertmanager.yml"
    config.write_text(f"""\
route:
  receiver: gpuwatch-hook
  group_by: [alertname, service]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
  routes:
    - matchers: ['severity="critical"']
      receiver: gpuwatch-critical
receivers:
  - name: gpuwatch-hook
    webhook_configs:
      - url: {receiver.url('/am-webhook')}
        send_resolved: true
  - name: gpuwatch-critical
    webhook_configs:
      - url: {receiver.url('/am-critical')}
        send_resolved: true
""")
    log = tmp_path / "alertmanager.log"
    for _ in range(3):
        port = free_port()
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.path={tmp_path / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                stdout=out, stderr=subprocess.STDOUT)
        am = Alertmanager(port, proc, log)

        def ready(am: Alertmanager = am) -> bool | None:
            if am.proc.poll() is not None:
                return True
            try:
                return http_get(f"{am.url}/-/ready", timeout=1).status == 200 or None
            except OSError:
                return None

        wait_until(ready, timeout=30, what="Alertmanager ready", details=lambda: log.read_text()[-2000:])
        if proc.poll() is None:
            break
    else:
        pytest.fail(f"Alertmanager did not start:\n{log.read_text()[-2000:]}", pytrace=False)
    try:
        yield am
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
