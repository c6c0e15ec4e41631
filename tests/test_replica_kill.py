"""A collector replica killed mid-run loses, duplicates and re-opens nothing (issue 16, item 2).

Three ``gpuwatch collector`` processes of one consumer group on twelve partitions read the
generated fleet of ``tests/test_replicas.py``: its first half from a backlog (so the group
rebalances while frames flow, as each replica joins), its second half produced after the kill,
with an alert rule that notifies every anomaly but ``throughput_drop`` on a webhook. Mid-run the
replica that stored the most, of those that saved some state, is killed with SIGKILL: it saves
nothing more, and its partitions go to the other two once the broker gives up on it. They
take its nodes' detector state over from the database (saved with the anomalies it stored)
and re-read from before it.

Against one in-process replica of another group on another database, reading the same log:
the same anomalies (kind, GPU, start within 1 s) but for the ``throughput_drop`` of serving replicas
(one is judged against its service's replicas on other nodes: docs/architecture.md), no
anomaly twice, every record stored once, and no alert notified twice, firing or resolved.
Without the saved state the killed replica's open anomalies are opened again with a later
start by the replica that takes its nodes over, and notified again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from collector.store import Store
from tests.fixtures_kafka import create_topic
from tests.support.faults.harness import ROOT, CollectorProc
from tests.support.poll import wait_until
from tests.test_replicas import PARTITIONS, TOPIC, _anomalies, _fleet_messages, _produce, _run, _serving_gpus

GROUP = "killed"
OWN_TOPIC = f"{TOPIC}.killed"
KINDS = ("thermal_throttle", "power_throttle", "straggler", "idle_allocated", "launch_bound", "memory_leak", "xid",
         "ecc_dbe", "ecc_sbe_rising", "pcie_replay_storm", "gpu_lost", "metric_anomaly")


@pytest.fixture
def webhook() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()


def _rules(tmp_path: Path) -> str:
    path = tmp_path / "rules.yaml"
    path.write_text(f"""\
channels:
  hook: {{type: webhook, url_env: GPUWATCH_TEST_HOOK_URL}}
rules:
  - name: all
    kinds: [{", ".join(KINDS)}]
    group_by: [gpu, kind]
    group_interval: 0s
    channels: [hook]
""")
    return str(path)


async def _query(dsn: str, sql: str) -> list[Any]:
    store = await Store.open(dsn)
    try:
        async with store.pool.acquire() as conn:
            return list(await conn.fetch(sql))
    finally:
        await store.close()


def _notified(dsn: str) -> Counter[tuple[str, str, str, str]]:
    """How often each alert (GPU, kind, start) was notified as firing and as resolved."""
    out: Counter[tuple[str, str, str, str]] = Counter()
    for row in asyncio.run(_query(dsn, "SELECT payload FROM alert_outbox")):
        body = json.loads(row["payload"]) if isinstance(row["payload"], str) else row["payload"]
        for alert in body["alerts"]:
            labels = alert["labels"]
            out[(labels["gpu"], labels["kind"], alert["startsAt"], alert["status"])] += 1
    return out


def _stored(dsn: str) -> int:
    try:
        return int(asyncio.run(_query(dsn, "SELECT count(*) AS n FROM gpu_samples"))[0]["n"])
    except Exception:  # noqa: BLE001 - before the first collector made the table
        return 0


# three collector processes and a reference run, each starting Python and migrating a database: about a
# minute on 2 idle cores, over the suite's 120-s default when the machine is busy (its own waits are bounded)
@pytest.mark.timeout(300)
def test_a_replica_killed_mid_run_loses_duplicates_and_reopens_nothing(kafka_broker: Any, pg_server: Any,
                                                                      tmp_path: Path, webhook: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUWATCH_TEST_HOOK_URL", webhook)
    broker = kafka_broker()
    create_topic(broker.bootstrap, TOPIC, partitions=PARTITIONS)
    create_topic(broker.bootstrap, f"{TOPIC}.dlq", partitions=1)
    messages, total = _fleet_messages()
    rules = _rules(tmp_path)
    stamp = f"{os.getpid()}_{int(time.time() * 1000) % 100000}"
    ref, killed = f"ref{stamp}", f"kill{stamp}"
    for name in (ref, killed):
        pg_server.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 STRATEGY FILE_COPY')
    procs: list[CollectorProc] = []
    try:
        asyncio.run(_run(pg_server.dsn(ref), broker.bootstrap, "one", 1, total,
                         lambda: _produce(broker.bootstrap, messages), rules=rules))
        dsn = pg_server.dsn(killed)
        # the replicas of the killed run read a topic of their own, fed in two halves: the second half is
        # produced after the kill, so the killed replica's nodes have frames left that the other two must
        # read, whatever it had read of the first half (reading a whole backlog, it could have read all of
        # its nodes before it was killed, and there was nothing to take over)
        create_topic(broker.bootstrap, OWN_TOPIC, partitions=PARTITIONS)
        create_topic(broker.bootstrap, f"{OWN_TOPIC}.dlq", partitions=1)
        half = len(messages) // 2
        asyncio.run(_produce(broker.bootstrap, messages[:half], OWN_TOPIC))
        env = {**os.environ, "PYTHONPATH": str(ROOT), "GPUWATCH_MAINTENANCE_INTERVAL": "3600",
               "GPUWATCH_MAX_BATCH": "400"}
        for i in range(3):
            args = [sys.executable, "-m", "gpuwatch", "collector", "--db", dsn, "--kafka-bootstrap", broker.bootstrap,
                    "--kafka-topic", OWN_TOPIC, "--kafka-group", GROUP, "--api-port", "0", "--log-level", "INFO",
                    "--alert-rules", rules]
            procs.append(CollectorProc(args, tmp_path / f"collector-{i}.log", env).start())
        # killed once a third is stored and it has saved some of its nodes' state (a replica saves a node
        # when one of its anomalies changes, or every checkpoint interval): killed before that, there is no
        # state to take over, and whether there was depended on where the fleet's anomalies fell
        def saved(p: CollectorProc) -> float:
            return p.metric("gpuwatch_collector_detector_states_saved_total") or 0.0

        wait_until(lambda: (_stored(dsn) >= total // 3 and any(saved(p) >= 1 for p in procs)) or None,
                   timeout=180, interval=0.2, what="a third stored, and some state saved")
        busiest = max((p for p in procs if saved(p) >= 1),
                      key=lambda p: p.metric("gpuwatch_collector_records_total") or 0.0)
        held = busiest.metric("gpuwatch_collector_records_total") or 0.0
        assert busiest.proc is not None
        os.kill(busiest.proc.pid, signal.SIGKILL)
        busiest.proc.wait(10)
        asyncio.run(_produce(broker.bootstrap, messages[half:], OWN_TOPIC))
        wait_until(lambda: _stored(dsn) >= total or None, timeout=240, interval=0.5, what="every record stored")

        def settled() -> bool | None:
            before = asyncio.run(_anomalies(dsn))
            time.sleep(4.0)
            return before == asyncio.run(_anomalies(dsn)) or None

        wait_until(settled, timeout=60, interval=0.0, what="anomalies settled")
        by_one, by_killed = asyncio.run(_anomalies(pg_server.dsn(ref))), asyncio.run(_anomalies(dsn))
        notified, stored = _notified(dsn), _stored(dsn)
        restored = sum(p.metric("gpuwatch_collector_detector_states_restored_total") or 0.0 for p in procs if p.alive)
        logs = "\n".join(p.text()[-2000:] for p in procs)
        # to diagnose a failure (pytest truncates the assertion's text): each replica's whole log, and both
        # runs' anomalies, into the folder this names
        if os.environ.get("GPUWATCH_KILL_LOGS"):
            for i, p in enumerate(procs):
                Path(os.environ["GPUWATCH_KILL_LOGS"], f"c{i}.log").write_text(p.text())
            Path(os.environ["GPUWATCH_KILL_LOGS"], "anomalies.json").write_text(json.dumps(
                {"one": by_one, "killed": by_killed, "killed_pid": busiest.proc.pid}))
    finally:
        for p in procs:
            p.stop()
        for name in (ref, killed):
            pg_server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    assert held > 0, logs  # the killed replica held some of the fleet's nodes
    assert stored == total  # every record once
    assert restored >= 1, logs  # its nodes' state was taken over

    serving = _serving_gpus()

    def pod_level(anomalies: list[tuple[str, str, float]]) -> list[tuple[str, str, float]]:
        return [a for a in anomalies if a[0] != "throughput_drop" or a[1] not in serving]

    a, b = pod_level(by_one), pod_level(by_killed)
    assert [(k, g) for k, g, _ in a] == [(k, g) for k, g, _ in b], (a, b, logs)
    assert all(abs(x[2] - y[2]) <= 1.0 for x, y in zip(a, b, strict=True)), \
        ([(x, y) for x, y in zip(a, b, strict=True) if abs(x[2] - y[2]) > 1.0], logs)
    assert notified and max(notified.values()) == 1, [k for k, n in notified.items() if n > 1]

