"""Against a running ``gpuwatch up --simulate``: the web page in a real browser, ``gpuwatch
top`` and the collector's ``/metrics``.

Headless Debian Chromium (``/usr/bin/chromium``), driven by Playwright with
``executable_path``; no browser is ever downloaded. The test pastes a viewer token,
checks that the fleet table fills with the simulated GPUs (health, sample age, one
entry per pod), that an open critical anomaly shows as critical health, in the
anomalies view and as a marker on the GPU's charts (titled node · GPU index · model ·
pod, with a power-limit line, clock and throttle charts, memory ticks in GiB), and that
a service's 24-hour view has a 5-minute step per bucket; it keeps screenshots under
``test-artifacts/`` (the CI artifact dir, gitignored).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from telemetry.xid import XIDS
from tests.conftest import free_port
from tests.fixtures_pg import PgServer
from tests.support.poll import wait_until

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _gpuwatch(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpuwatch", *args]


@pytest.fixture(scope="module")
def running_up(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """``gpuwatch up --simulate 4`` on a database of its own; yields (API base URL, viewer token, DSN)."""
    pg_server.start()
    name = f"up{os.getpid()}_{int(time.time() * 1000) % 10_000_000}"
    pg_server.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 STRATEGY FILE_COPY')
    pg_db = pg_server.dsn(name)
    tmp_path = tmp_path_factory.mktemp("up")
    port = free_port()
    log = tmp_path / "up.log"
    proc = subprocess.Popen(
        _gpuwatch("up", "--simulate", "4", "--db", pg_db, "--metrics-port", "0", "--api-port", str(port),
                  "--log-level", "WARNING"),
        stdout=subprocess.PIPE, stderr=log.open("w"), text=True, env=ENV,
    )
    try:
        assert proc.stdout is not None
        banner = "".join(proc.stdout.readline() for _ in range(4))
        match = re.search(r"API:\s+(http://\S+)/api/v1", banner)
        assert match, banner + log.read_text()[-2000:]
        made = subprocess.run(_gpuwatch("token", "create", "--db", pg_db, "--role", "viewer", "--name", "web"),
                              capture_output=True, text=True, timeout=60, env=ENV, check=True)
        yield match.group(1), made.stdout.strip(), pg_db
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        pg_server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _wait_for_gpus(url: str, token: str, count: int) -> None:
    last: list[httpx.Response] = []

    def gpus() -> bool:
        last[:] = [httpx.get(f"{url}/api/v1/gpus", headers={"Authorization": f"Bearer {token}"}, timeout=5)]
        return last[0].status_code == 200 and len(last[0].json()["items"]) >= count

    wait_until(gpus, timeout=30, interval=0.3, what=f"{count} GPUs from the API",
               details=lambda: f"last answer: {last[0].status_code} {last[0].text[:500]}")


def _roll_up_now(dsn: str) -> None:
    """Fill the rollups and the service usage tables up to now, including the current minute."""
    from datetime import UTC, datetime, timedelta

    from collector.store import Store, usage

    async def main() -> None:
        now = datetime.now(UTC)
        store = await Store.open(dsn, now=now)
        try:
            await store.maintain(now)
            async with store.pool.acquire() as conn:
                await usage.refresh(conn, now + timedelta(minutes=1))
        finally:
            await store.close()

    asyncio.run(main())


def _add_anomaly(dsn: str, gpu: str) -> None:
    """An open critical anomaly and an event on ``gpu``, as the detectors and the agent would write them."""

    async def main() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            node = await conn.fetchval("SELECT node FROM gpu_inventory WHERE gpu = $1", gpu)
            await conn.execute(
                "INSERT INTO anomalies (fingerprint, kind, severity, gpu, node, start_ts, summary, causes) VALUES"
                " ('fp-live', 'xid', 'critical', $1, $2, now() - interval '2 minutes', 'XID 79 on the test GPU',"
                " '[\"XID 79\"]')", gpu, node)
            await conn.execute("INSERT INTO events (ts, node, gpu, kind, code, detail) VALUES"
                               " (now() - interval '2 minutes', $2, $1, 'xid', 79, 'test XID')", gpu, node)
            # a throughput drop whose CPU profile the agent captured (as collector/store/profiles.py stores it)
            drop = await conn.fetchval(
                "INSERT INTO anomalies (fingerprint, kind, severity, gpu, node, start_ts, summary) VALUES"
                " ('fp-drop', 'throughput_drop', 'warning', $1, $2, now() - interval '1 minute', 'the test drop')"
                " RETURNING id", gpu, node)
            await conn.execute(
                "INSERT INTO anomaly_profiles (anomaly_id, status, reason, captured_at, samples, processes, stacks)"
                " VALUES ($1, 'captured', '1 of 1 process(es) sampled', now(), 10, '[]', $2::jsonb)", drop,
                '[["pid 7 python;main;load_batch_marker", 6], ["pid 7 python;main;step", 4]]')
            # as the agent sends an XID: its code only (the page names it from /gpu-facts)
            await conn.execute("INSERT INTO events (ts, node, gpu, kind, code, detail) VALUES"
                               " (now() - interval '3 minutes', $2, $1, 'xid', 140, '')", gpu, node)
        finally:
            await conn.close()

    asyncio.run(main())


def _js(page: Any, script: str) -> Any:
    return page.evaluate(script)


def test_web_page_shows_the_fleet_incidents_a_gpu_and_a_service(running_up: tuple[str, str, str]) -> None:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (/usr/bin/chromium); .ci/run installs it")
    playwright = pytest.importorskip("playwright.sync_api")
    url, token, dsn = running_up
    _wait_for_gpus(url, token, 4)
    gpus = httpx.get(f"{url}/api/v1/gpus", headers={"Authorization": f"Bearer {token}"}, timeout=10).json()["items"]
    first = gpus[0]
    _add_anomaly(dsn, first["gpu"])
    _roll_up_now(dsn)  # what the collector does every minute, without waiting a minute
    ARTIFACTS.mkdir(exist_ok=True)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(url + "/")
            page.fill("#token", token)
            page.click("#login button")
            page.wait_for_selector("#fleet tbody tr:nth-child(4)", timeout=15_000)
            rows = page.locator("#fleet tbody tr")
            assert rows.count() == 4
            assert page.locator("#who").inner_text().startswith("viewer")
            hit = page.locator(f"#fleet tbody tr[data-gpu='{first['gpu']}']")
            assert hit.get_attribute("data-health") == "critical" and "XID 79" in hit.inner_text()
            texts = [rows.nth(i).inner_text() for i in range(4)]
            assert all(re.search(r"\d+ (s|min)\b", t) for t in texts), texts  # sample age
            assert any("\u00d72" in t for t in texts)  # the serving pod's two processes: one entry
            assert all(" GiB" in t and " W" in t for t in texts)
            page.screenshot(path=str(ARTIFACTS / "web-fleet.png"), full_page=True)

            page.click("#nav-incidents")
            page.wait_for_selector("#anomalies tbody tr[data-id]", timeout=15_000)
            anomaly = page.locator("#anomalies tbody tr[data-id]", has_text="XID 79").inner_text()
            assert "critical" in anomaly and "XID 79 on the test GPU" in anomaly and "GPU" in anomaly
            assert "test XID" in page.locator("#events tbody").inner_text()
            drop_row = page.locator("#anomalies tbody tr", has_text="the test drop")
            drop_row.locator("button.flame-button").click()  # the CPU profile, drawn from the flame-graph frame
            page.wait_for_selector("#flamegraph .frame", timeout=15_000)
            bars = _js(page, "[...document.querySelectorAll('#flamegraph .frame')].map((b) => [b.textContent, "
                             "parseFloat(b.style.width), parseFloat(b.style.top)])")
            assert bars[0] == ["total", 100, 0] and ["load_batch_marker", 60, 54] in bars, bars
            unrecovered = page.locator("#events tbody td.summary", has_text="XID 140: ")
            assert "unrecovered ECC error" in unrecovered.inner_text()
            assert unrecovered.get_attribute("title") == f"critical: {XIDS[140].action}"
            page.screenshot(path=str(ARTIFACTS / "web-incidents.png"), full_page=True)

            page.goto(f"{url}/#/gpu/{first['gpu']}")
            page.wait_for_selector("#chart-throttle .main-svg", timeout=15_000)
            page.wait_for_function("document.querySelector('#gpu-facts').textContent.includes('buckets')")
            title = page.locator("#gpu-title").inner_text()
            assert title.startswith(f"{first['node']} · GPU {first['gpu_index']} · NVIDIA"), title
            assert first["gpu"] not in title
            assert page.locator("#gpu-charts .chart").count() == 6
            power = _js(page, "document.getElementById('chart-power').data.map((t) => t.name)")
            assert power == ["power", "power limit"]
            assert _js(page, "document.getElementById('chart-clocks').data.length") == 2
            assert _js(page, "document.getElementById('chart-activity').data.every((t) => t.connectgaps === false)")
            shapes = _js(page, "document.getElementById('chart-power').layout.shapes.map((s) => s.type)")
            assert "rect" in shapes and "line" in shapes  # the anomaly's span and the event's line
            notes = _js(page, "document.getElementById('chart-activity').layout.annotations.map((a) => a.text)")
            assert "xid" in notes and "xid 79" in notes
            ticks = _js(page, "[...document.querySelectorAll('#chart-memory .ytick text')].map((t) => t.textContent)")
            assert ticks and all(t.endswith(" GiB") and "k" not in t for t in ticks), ticks
            page.screenshot(path=str(ARTIFACTS / "web-gpu.png"), full_page=True)

            # a serving GPU: its pod's inference server's figures (the simulated vLLM pods carry them)
            serving = next(g for g in gpus if any(p.get("service") == "llm-serve" for p in g["pods"]))
            page.goto(f"{url}/#/gpu/{serving['gpu']}")
            page.wait_for_selector("#chart-inference .main-svg", timeout=15_000)
            names = _js(page, "document.getElementById('chart-inference').data.map((t) => t.name)")
            assert names == ["requests/s", "pending", "queue time"], names
            assert _js(page, "document.getElementById('chart-inference').data[0].y.some((v) => v > 0)")

            page.goto(url + "/#/")
            page.wait_for_selector("#services li a", timeout=15_000)
            page.locator("#services li a").first.click()
            page.wait_for_function("document.querySelector('#service-total').textContent.includes('running')")
            page.wait_for_selector("#svc-cost .main-svg", timeout=15_000)
            page.wait_for_selector("#pods tbody tr", timeout=15_000)
            total = page.locator("#service-total").inner_text()
            held = re.match(r"^([\d.]+) GPU-(seconds|minutes|hours) over ([\d.]+) (s|min|h) running", total)
            assert held and float(held.group(1)) > 0 and float(held.group(3)) > 0, total
            buckets = _js(page, "document.getElementById('svc-gpus').data[0].x.length")
            assert buckets >= 288, buckets  # 24 h of 5-minute steps, the empty ones as gaps
            header = page.locator("#pods thead").inner_text()
            assert "GPUs while running" in header and "range average" in header
            page.screenshot(path=str(ARTIFACTS / "web-service.png"), full_page=True)
            assert not errors, errors
            assert page.locator("#status").inner_text() == ""

            # the address `gpuwatch up` prints: the token in the fragment, kept for the tab, dropped from the bar
            fresh = browser.new_page(viewport={"width": 1400, "height": 900})
            fresh.goto(f"{url}/#token={token}")
            fresh.wait_for_selector("#fleet tbody tr:nth-child(4)", timeout=15_000)
            assert "token" not in fresh.url
        finally:
            browser.close()


def test_top_prints_the_fleet(running_up: tuple[str, str, str]) -> None:
    url, token, _dsn = running_up
    _wait_for_gpus(url, token, 4)
    out = subprocess.run(_gpuwatch("top", "--url", url, "--once"), capture_output=True, text=True, timeout=60,
                         env={**ENV, "GPUWATCH_TOKEN": token, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    assert "4 GPUs" in out.stdout and "llm-pretrain" in out.stdout and "x2" in out.stdout
    narrow = subprocess.run(_gpuwatch("top", "--url", url, "--once"), capture_output=True, text=True, timeout=60,
                            env={**ENV, "GPUWATCH_TOKEN": token, "COLUMNS": "80", "LINES": "24"})
    lines = narrow.stdout.splitlines()
    assert narrow.returncode == 0 and max(len(line) for line in lines) <= 80, narrow.stdout
    body = [line for line in lines if re.match(r"^\S+\s+\d+\s", line)]
    assert len(body) == 4, narrow.stdout  # one row per GPU
    for line in body:  # the numbers, the health and the age are whole at 80 columns
        assert re.search(r"\d+%\s+[\d/]+\s+\d+\s+\d+\s+(ok|degraded|critical|stale|no data)\s+\S+\s+\d+$", line), line
    refused = subprocess.run(_gpuwatch("top", "--url", url, "--once"), capture_output=True, text=True,
                             timeout=60, env={**ENV, "GPUWATCH_TOKEN": "gw_wrong"})
    assert refused.returncode == 1 and "401" in refused.stderr and "gw_wrong" not in refused.stderr


def test_collector_metrics(running_up: tuple[str, str, str], promtool: str) -> None:
    url, token, _dsn = running_up
    _wait_for_gpus(url, token, 4)
    text = httpx.get(f"{url}/metrics", timeout=10).text
    for name in ("gpuwatch_collector_records_total", "gpuwatch_collector_dead_lettered_frames_total",
                 "gpuwatch_collector_ingest_records_per_second", "gpuwatch_collector_consumer_lag_messages_all",
                 "gpuwatch_collector_db_latency_seconds", "gpuwatch_collector_db_up 1.0",
                 'gpuwatch_service_gpus{namespace="research",service="llm-pretrain"} 1.0'):
        assert name in text, name
    records = float(re.search(r"^gpuwatch_collector_records_total (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
    assert records > 0
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert lint.returncode == 0, lint.stdout + lint.stderr
