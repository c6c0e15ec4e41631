"""The commands as an operator runs them: `gpuwatch agent` -> Kafka -> `gpuwatch collector`, and `gpuwatch up`."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg

from tests.fixtures_kafka import create_topic
from tests.support.poll import wait_until

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _count(dsn: str, table: str = "gpu_samples") -> int:
    async def run() -> int:
        conn = await asyncpg.connect(dsn)
        try:
            return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))  # table: a constant of this test
        finally:
            await conn.close()

    try:
        return asyncio.run(run())
    except (asyncpg.UndefinedTableError, OSError):
        return 0


def _gpuwatch(*args: str, log: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gpuwatch", *args], stdout=subprocess.PIPE,
                            stderr=log.open("w"), text=True, env=ENV)


def test_agent_sends_to_kafka_and_the_collector_stores(kafka_broker: Any, pg_db: str, tmp_path: Path) -> None:
    broker = kafka_broker()
    create_topic(broker.bootstrap, "gpu.telemetry", partitions=2)
    collector = _gpuwatch("collector", "--db", pg_db, "--kafka-bootstrap", broker.bootstrap, log=tmp_path / "c.log")
    agent = _gpuwatch("agent", "--simulate", "2", "--metrics-port", "0", "--metrics-host", "127.0.0.1",
                      "--kafka-bootstrap", broker.bootstrap, "--spool-dir", str(tmp_path / "spool"),
                      "--log-level", "WARNING", log=tmp_path / "a.log")
    try:
        assert agent.stdout is not None
        banner = agent.stdout.readline()
        assert "sending to gpu.telemetry" in banner, banner
        wait_until(lambda: _count(pg_db) >= 10, timeout=60, interval=0.5, what="10 rows stored",
                   details=lambda: (tmp_path / "c.log").read_text()[-3000:])
        import urllib.request

        url = banner.split("metrics on ", 1)[1].split(";", 1)[0]
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
        assert "gpuwatch_agent_kafka_sent_total" in text and "gpuwatch_agent_kafka_connected 1.0" in text
    finally:
        for proc in (agent, collector):
            proc.send_signal(signal.SIGTERM)
        assert agent.wait(30) == 0
        assert collector.wait(30) == 0
    assert _count(pg_db, "process_samples") > 0
    assert _count(pg_db, "gpu_inventory") == 2


def test_up_with_a_given_database(pg_db: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "up", "--simulate", "3", "--db", pg_db, "--metrics-port", "0",
         "--duration", "5", "--log-level", "WARNING"],
        capture_output=True, text=True, timeout=120, env=ENV,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "metrics:  http://127.0.0.1:" in proc.stdout
    stored = int(proc.stdout.split("stopped; ", 1)[1].split(" records", 1)[0])
    assert stored > 0 and _count(pg_db) == stored
    assert "0 dead-lettered" in proc.stdout


def test_up_starts_its_own_postgresql_and_says_it_simulates(tmp_path: Path) -> None:
    env = {**ENV, "PATH": os.environ.get("PATH", "")}
    proc = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "up", "--data-dir", str(tmp_path / "gw"), "--metrics-port", "0",
         "--duration", "4", "--log-level", "WARNING"],
        capture_output=True, text=True, timeout=180, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "using 8 simulated GPUs" in proc.stderr  # no NVML on CI machines
    assert "embedded PostgreSQL in" in proc.stdout
    where = Path(proc.stdout.split("embedded PostgreSQL in ", 1)[1].split(" (", 1)[0])
    assert where == tmp_path / "gw" / "postgres"  # also as root, where pytest's tmp dir is 0700
    assert (where / "data" / "PG_VERSION").exists()


def test_up_gives_its_run_an_admin_token_for_the_web_page(tmp_path: Path) -> None:
    """On its own database, ``up`` prints the web page with this run's token (console only, never in the
    log), and the token works against the API."""
    import re
    import urllib.request

    env = {**ENV, "PATH": os.environ.get("PATH", "")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "up", "--simulate", "2", "--data-dir", str(tmp_path / "gw"),
         "--metrics-port", "0", "--api-port", "0", "--log-level", "INFO"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        banner = "".join(proc.stdout.readline() for _ in range(5))
        match = re.search(r"web page: (http://\S+)/#token=(gw_\S+)", banner)
        assert match, banner
        base, token = match.groups()
        request = urllib.request.Request(f"{base}/api/v1/me", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert b'"admin"' in resp.read()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert token not in err  # the log never carries it


def test_two_simulated_nodes_have_gpus_of_their_own() -> None:
    """One UUID on two nodes is a fault the collector reports (issue 10): a simulation of two
    nodes must not show it. The simulated GPUs are seeded by the node's name."""
    from agent.settings import AgentSettings
    from gpuwatch.agent_stack import build_agent

    def uuids(node: str) -> set[str]:
        driver = build_agent(AgentSettings(simulate=2, node_name=node, attribution=False)).driver
        driver.init()
        return {driver.uuid(driver.handle_by_index(i)) for i in range(driver.device_count())}

    a, b = uuids("node-a"), uuids("node-b")
    assert len(a) == len(b) == 2 and not a & b
    assert uuids("node-a") == a  # stable across restarts of the same node
