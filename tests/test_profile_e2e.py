"""A CPU profile end to end, in process: a throughput drop opens on a replayed H200 trace, the
collector asks, the agent's profiler answers (a fake py-spy: the real one has its own test in
test_profiling_agent.py), the answer is stored on the anomaly, and the API serves it as
Grafana's flame-graph data frame, within the token's scope."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from fastapi.testclient import TestClient

from agent.profiling import ProfileConfig, Profiler
from agent.pyspy import Capture
from collector.alerting.service import from_rules_file
from collector.api import create_app, tokens
from collector.api.settings import ApiSettings
from collector.detect.replay import read_trace
from collector.ingest import Inbound, Ingestor
from collector.profiling import ProfileRequests, ProfileStore
from collector.store import Store, validate, validate_event
from gpuwatch.inprocess import InProcessReplies, InProcessTransport
from telemetry.codec import FrameEncoder
from telemetry.profile import ProcessProfile, ProfileResult
from telemetry.records import GpuRecord, ProcessRecord
from telemetry.wire import MessageType, stream_headers
from tests.support.poll import await_until

TRACE = Path(__file__).resolve().parents[1] / "benchmarks/data/h200-incidents.jsonl"
STACKS = (("<module> (train.py:90);train_step (train.py:40);next_batch (loader.py:12);recv (socket.py:3)", 430),
          ("<module> (train.py:90);train_step (train.py:40);forward (model.py:7)", 70))


@pytest.fixture
def python_pid() -> Iterator[int]:
    """A real Python process standing in for the trace's trainer (the profiler checks /proc/PID/exe)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(10)


def _records(pid: int) -> list[GpuRecord]:
    out = []
    for r in read_trace(TRACE):
        assert isinstance(r, GpuRecord)
        procs = [ProcessRecord(pid=pid, namespace="research", pod="trainer-0", service="llm") for _ in r.processes]
        out.append(dataclasses.replace(r, processes=procs))
    return out


def _fake_py_spy(pid: int, duration_s: float, rate_hz: int, timeout_s: float) -> Capture:
    return Capture("captured", "", STACKS, 0.05)


async def _pipeline(dsn: str, pid: int) -> dict[str, str]:
    """Replay the trace through ingest and detection, add two anomalies with profiles; returns API tokens."""
    store = await Store.open(dsn, profile="plain")
    loop = asyncio.get_running_loop()
    transport = InProcessTransport(loop)
    records = _records(pid)
    node, gpu = records[0].node, records[0].gpu
    profiler = Profiler(ProfileConfig(enabled=True, duration_s=1.0), node, "inst-1", transport.submit,
                        runner=_fake_py_spy)
    replies = InProcessReplies([], [profiler])
    requests = ProfileRequests(store.pool, replies.request_profile)
    detection = from_rules_file(store.pool, None, on_opened=requests)

    async def dead_letter(msg: Inbound, reason: str) -> None:
        raise AssertionError(reason)

    ingestor = Ingestor(store, dead_letter, validate, validate_event, on_committed=detection.on_committed,
                        profiles=ProfileStore(store.pool))
    encoder = FrameEncoder(keyframe_every=60)
    headers = stream_headers(MessageType.FRAME, node, "inst-1")
    profiler.start()
    try:
        for i in range(0, len(records), 10):
            chunk = records[i:i + 10]
            for r in chunk:
                profiler.observe(r)  # as the agent's record sink does
            await ingestor.handle([Inbound(0, i, gpu.encode(), encoder.encode(chunk), headers)])
            await detection.flush()
        assert requests.sent == 1

        async def answered() -> list[Inbound] | None:
            return await transport.batch(max_wait=0.2) or None

        answer = await await_until(answered, timeout=30, what="the agent's answer")
        assert [m.header("type") for m in answer] == [b"profile"] and answer[0].key == node.encode()
        await ingestor.handle([dataclasses.replace(answer[0], offset=10_000)])
        row = await store.pool.fetchrow("SELECT a.kind, p.status FROM anomalies a JOIN anomaly_profiles p "
                                        "ON p.anomaly_id = a.id")
        assert (row["kind"], row["status"]) == ("throughput_drop", "captured")
        # another namespace's anomaly with a profile, and one whose agent could not attach
        other = await store.pool.fetchval(
            "INSERT INTO anomalies (fingerprint, kind, severity, gpu, node, namespace, start_ts, summary) VALUES "
            "('fp-prod', 'throughput_drop', 'warning', 'GPU-prod', 'node-p', 'prod', now(), 'prod drop') RETURNING id")
        denied = await store.pool.fetchval(
            "INSERT INTO anomalies (fingerprint, kind, severity, gpu, node, namespace, start_ts, summary) VALUES "
            "('fp-denied', 'throughput_drop', 'warning', 'GPU-d', 'node-d', 'research', now(), 'denied drop') "
            "RETURNING id")
        store_ = ProfileStore(store.pool)
        assert await store_.save(ProfileResult("node-p", "GPU-prod", other, 1.0,
                                               (ProcessProfile(9, "captured", "", "python", STACKS),)))
        assert await store_.save(ProfileResult("node-d", "GPU-d", denied, 1.0,
                                               (ProcessProfile(9, "permission_denied", "no SYS_PTRACE"),)))
        assert not await store_.save(ProfileResult("node-d", "GPU-elsewhere", denied, 1.0))  # not its GPU
        made = {}
        for name, role, scope in (("admin", "admin", None), ("research", "viewer", ["research"])):
            made[name], _ = await tokens.create(store.pool, role, scope, name=name)
        return made
    finally:
        profiler.stop()
        await detection.close()
        await store.close()


def test_a_throughput_drop_gets_a_profile_served_as_a_flame_graph_frame(pg_db: str, python_pid: int) -> None:
    made = asyncio.run(_pipeline(pg_db, python_pid))
    app = create_app(None, ApiSettings.model_validate({"token_cache_seconds": 0}))
    with TestClient(app) as client:
        pool = client.portal.call(lambda: asyncpg.create_pool(pg_db, min_size=1, max_size=2))
        app.state.ctx.pool = pool
        try:
            def get(path: str, who: str = "admin", **params: Any) -> Any:
                return client.get(f"/api/v1{path}", params=params, headers={"Authorization": f"Bearer {made[who]}"})

            # the trace's anomalies lie at its own (recorded) time, the two added above at now: the default
            # range (the last 7 days) holds the trace's only for a week after it was recorded, so ask for both
            times = [r.ts for r in read_trace(TRACE)]
            at_trace = get("/anomalies", limit=50, start=f"{times[0] - 60:.0f}", end=f"{times[-1] + 600:.0f}")
            listed = get("/anomalies", limit=50)
            assert listed.status_code == 200 and at_trace.status_code == 200, (listed.text, at_trace.text)
            items = at_trace.json()["items"] + [a for a in listed.json()["items"]
                                                if a["id"] not in {b["id"] for b in at_trace.json()["items"]}]
            by_summary = {a["summary"]: a for a in items}
            drop_item = next(a for a in items if a["kind"] == "throughput_drop" and a["node"] == "h200-node")
            assert drop_item["profile"] == {"status": "captured", "reason": "1 of 1 process(es) sampled"}
            assert by_summary["denied drop"]["profile"]["status"] == "permission_denied"
            assert all(a["profile"] is None for a in items if a["kind"] == "memory_leak")

            frame = get(f"/anomalies/{drop_item['id']}/profile").json()
            assert frame["meta"]["preferredVisualisationType"] == "flamegraph"
            fields = {f["name"]: f for f in frame["fields"]}
            assert [f["name"] for f in frame["fields"]] == ["level", "value", "self", "label"]
            assert fields["label"]["values"][0] == "total"
            assert fields["label"]["values"][1].startswith(f"pid {python_pid} ") and "time.sleep" in \
                fields["label"]["values"][1]
            assert fields["value"]["values"][0] == 500 and fields["level"]["values"][0] == 0
            assert "recv (socket.py:3)" in fields["label"]["values"]
            assert frame["meta"]["custom"]["processes"][0]["samples"] == 500

            denied_id, other_id = by_summary["denied drop"]["id"], by_summary["prod drop"]["id"]
            no = get(f"/anomalies/{denied_id}/profile")
            assert no.status_code == 404 and no.json()["error"] == "no_profile"
            assert "permission_denied: no SYS_PTRACE" in no.json()["message"]
            leak = next(a for a in items if a["kind"] == "memory_leak")
            assert get(f"/anomalies/{leak['id']}/profile").json()["error"] == "no_profile"
            # scope: another namespace's anomaly is not found, not forbidden; a bad id is a 400
            assert get(f"/anomalies/{other_id}/profile").status_code == 200
            hidden = get(f"/anomalies/{other_id}/profile", "research")
            assert hidden.status_code == 404 and hidden.json()["error"] == "not_found"
            assert get(f"/anomalies/{drop_item['id']}/profile", "research").status_code == 200
            assert get("/anomalies/an_nonsense/profile").status_code == 400
            assert client.get(f"/api/v1/anomalies/{drop_item['id']}/profile").status_code == 401
        finally:
            client.portal.call(pool.close)
