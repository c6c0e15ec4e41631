"""Agent behaviour under faults: lost GPUs, XIDs, MIG, bad settings, SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from agent.driver.simulated import SimulatedFleet
from agent.exposition import Exposition
from agent.runtime import Agent, ScheduleConfig
from agent.settings import AgentSettings, SettingsError, load
from telemetry.records import EventRecord, GpuRecord
from tests.support.poll import wait_until


def _agent(fleet_kw: dict[str, object], n: int = 3, records: list[GpuRecord] | None = None,
           events: list[EventRecord] | None = None) -> tuple[Agent, SimulatedFleet, list[float]]:
    now = [1000.0]
    fleet = SimulatedFleet(n, clock=lambda: now[0], start=0.0, **fleet_kw)  # type: ignore[arg-type]
    agent = Agent(fleet, "node-a", ScheduleConfig(ceiling=1.0), clock=lambda: now[0], calibrate_calls=False,
                  record_sinks=() if records is None else (records.append,),
                  event_sinks=() if events is None else (events.append,))
    agent.open()
    return agent, fleet, now


def _run(agent: Agent, now: list[float], seconds: float) -> None:
    end = now[0] + seconds
    while now[0] < end:
        nxt = agent.step(now[0])
        now[0] = max(nxt if nxt is not None else now[0] + 1, now[0] + 1e-3)


def test_lost_gpu_is_reported_retried_and_others_keep_sampling() -> None:
    events: list[EventRecord] = []
    records: list[GpuRecord] = []
    agent, fleet, now = _agent({"profiles": ["training"]}, records=records, events=events)
    _run(agent, now, 5)
    lost_key = fleet.gpus[1].uuid
    fleet.fail(1)
    _run(agent, now, 30)
    assert not agent.targets[lost_key].healthy
    assert [e.kind for e in events if e.kind.startswith("gpu_")] == ["gpu_lost"]
    during = [r for r in records if r.ts > now[0] - 25]
    assert {r.gpu for r in during} == {fleet.gpus[0].uuid, fleet.gpus[2].uuid}
    text = Exposition(agent).render().decode()
    assert f'gpuwatch_agent_gpu_up{{UUID="{lost_key}"}} 0.0' in text
    assert lost_key not in text.split("gpuwatch_agent")[0]  # no stale DCGM series for a lost GPU
    fleet.recover(1)
    _run(agent, now, 70)  # backoff is at most 60 s
    assert agent.targets[lost_key].healthy
    assert [e.kind for e in events if e.kind.startswith("gpu_")][-1] == "gpu_recovered"
    assert any(r.gpu == lost_key and r.ts > now[0] - 10 for r in records)


def test_training_gpus_report_power_cap_throttling_and_ecc_as_events() -> None:
    events: list[EventRecord] = []
    agent, fleet, now = _agent({"profiles": ["training"]}, n=4, events=events)
    _run(agent, now, 1000)
    starts = [e for e in events if e.kind == "throttle_start"]
    assert starts and all(e.code == 0x4 and "SW_POWER_CAP" in e.detail for e in starts)
    sbe = [e for e in events if e.kind == "ecc_sbe"]
    assert sbe and {e.gpu for e in sbe} == {fleet.gpus[3].uuid}  # the simulator's GPU 3 logs corrected errors


def test_xid_79_marks_the_gpu_lost_and_xid_metric_shows_last_xid() -> None:
    agent, fleet, now = _agent({})
    _run(agent, now, 2)
    agent.on_xid(fleet.gpus[0].uuid, 48)
    _run(agent, now, 2)
    assert agent.latest[fleet.gpus[0].uuid].metrics["DCGM_FI_DEV_XID_ERRORS"] == 48
    fleet.inject_xid(2, 79)
    agent.on_xid(fleet.gpus[2].uuid, 79)
    _run(agent, now, 2)
    assert not agent.targets[fleet.gpus[2].uuid].healthy
    assert agent.targets[fleet.gpus[0].uuid].healthy


def test_xid_event_thread_delivers_events() -> None:
    fleet = SimulatedFleet(2)
    events: list[EventRecord] = []
    agent = Agent(fleet, "n", ScheduleConfig(), calibrate_calls=False, event_sinks=(events.append,))
    agent.start()
    try:
        fleet.inject_xid(1, 63)
        wait_until(lambda: bool(events), timeout=5, interval=0.02, what="the injected XID's event")
    finally:
        agent.stop()
    assert events and events[0].kind == "xid" and events[0].code == 63
    assert events[0].gpu == fleet.gpus[1].uuid


def test_mig_gpu_is_enumerated_with_instances_and_labelled() -> None:
    agent, fleet, now = _agent({"mig": {0: ["1g.18gb", "3g.71gb"]}}, n=2)
    assert len(agent.targets) == 4  # GPU 0, its 2 instances, GPU 1
    _run(agent, now, 3)
    text = Exposition(agent).render().decode()
    assert 'GPU_I_PROFILE="3g.71gb",GPU_I_ID="2"' in text
    instance = next(t for t in agent.targets.values() if t.mig_profile == "1g.18gb")
    assert instance.parent == fleet.gpus[0].uuid
    assert "DCGM_FI_DEV_FB_USED" in agent.latest[instance.key].metrics
    assert "DCGM_FI_DEV_GPU_UTIL" not in agent.latest[instance.key].metrics  # NotSupported: absent, not 0


def test_unsupported_metrics_are_absent_not_zero() -> None:
    agent, fleet, now = _agent({"models": ["Tesla T4", "NVIDIA A100-SXM4-80GB"]}, n=2)
    _run(agent, now, 3)
    t4, a100 = (agent.latest[g.uuid].metrics for g in fleet.gpus)
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in t4
    assert not any(k.startswith("DCGM_FI_PROF_") for k in a100)
    assert "DCGM_FI_DEV_POWER_USAGE" in a100


def test_settings_errors_name_the_setting() -> None:
    with pytest.raises(SettingsError, match=r"interval_floor \(env GPUWATCH_INTERVAL_FLOOR, flag --interval-floor\)"):
        load(AgentSettings, {"interval_floor": 0.01})
    with pytest.raises(SettingsError, match="interval_ceiling"):
        load(AgentSettings, {"interval_floor": 5.0, "interval_ceiling": 1.0})
    os.environ["GPUWATCH_CPU_BUDGET"] = "lots"
    try:
        with pytest.raises(SettingsError, match="cpu_budget"):
            load(AgentSettings, {})
    finally:
        del os.environ["GPUWATCH_CPU_BUDGET"]


def test_inference_scrape_settings_come_from_the_environment_and_are_checked() -> None:
    assert load(AgentSettings, {}).inference_scrape_period == 5.0
    os.environ["GPUWATCH_INFERENCE_SCRAPE_PERIOD"] = "15"
    try:
        assert load(AgentSettings, {}).inference_scrape_period == 15.0
    finally:
        del os.environ["GPUWATCH_INFERENCE_SCRAPE_PERIOD"]
    assert load(AgentSettings, {"inference_scrape_period": 0}).inference_scrape_period == 0  # off
    with pytest.raises(SettingsError, match=r"inference_scrape_timeout \(env GPUWATCH_INFERENCE_SCRAPE_TIMEOUT\) is "
                                            r"3.0 s: it must not exceed inference_scrape_period"):
        load(AgentSettings, {"inference_scrape_period": 2, "inference_scrape_timeout": 3})


def test_cli_rejects_bad_setting_at_start() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "agent", "--simulate", "2", "--metrics-port", "70000"],
        capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 2
    assert "metrics_port" in proc.stderr and "--metrics-port" in proc.stderr


def test_spool_settings_are_checked_against_each_other_at_start(tmp_path: Path) -> None:
    """``--spool-max-mb 1`` used to pass validation and crash later with a ValueError (two 8 MiB segments)."""
    base = [sys.executable, "-m", "gpuwatch", "agent", "--simulate", "1", "--metrics-port", "0",
            "--kafka-bootstrap", "127.0.0.1:1"]
    proc = subprocess.run([*base, "--spool-max-mb", "1", "--spool-dir", str(tmp_path / "s")],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stderr
    for name in ("spool_max_mb", "GPUWATCH_SPOOL_MAX_MB", "--spool-max-mb", "spool_segment_mb", "--spool-segment-mb"):
        assert name in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    with pytest.raises(SettingsError, match="at least two segments"):
        load(AgentSettings, {"spool_max_mb": 3, "spool_segment_mb": 2})
    assert load(AgentSettings, {"spool_max_mb": 1, "spool_segment_mb": 0.5}).spool_segment_bytes() == 1 << 19
    (tmp_path / "file").write_text("not a directory")
    proc = subprocess.run([*base, "--spool-dir", str(tmp_path / "file" / "spool")],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1, proc.stderr
    assert "--spool-dir" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_agent_serves_and_shuts_down_on_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "agent", "--simulate", "2", "--metrics-port", "0",
         "--metrics-host", "127.0.0.1", "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:"), line
        def ready() -> bool:
            try:
                with urllib.request.urlopen(url.replace("/metrics", "/readyz"), timeout=2) as resp:
                    assert resp.status == 200
                    return True
            except OSError:
                return False

        wait_until(ready, timeout=10, what="the agent's /readyz")
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert b"DCGM_FI_DEV_GPU_UTIL" in resp.read()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
