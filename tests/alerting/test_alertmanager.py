"""A real Alertmanager (Debian's binary, on loopback) accepts our alerts and routes them."""

from __future__ import annotations

import time
from dataclasses import replace

from collector.alerting.delivery import RetryPolicy, UrllibTransport, send
from collector.alerting.payloads import bodies
from collector.alerting.router import Router
from collector.alerting.rules import parse_rules
from collector.detect import Anomaly, Change
from tests.alerting.conftest import Alertmanager, Receiver
from tests.conftest import wait_until


def test_alertmanager_receives_routes_and_resolves_our_alerts(alertmanager: Alertmanager, receiver: Receiver) -> None:
    rs = parse_rules(f"""\
channels:
  am: {{type: alertmanager, url: "{alertmanager.url}"}}
rules:
  - name: GpuThermal
    group_by: [service]
    group_interval: 0s
    channels: [am]
""", "r.yaml")
    assert rs.errors == []
    now = time.time()
    router = Router(rs)
    hot = Anomaly("thermal_throttle", "critical", "gpu-node-00", "GPU-aaa", "DCGM_FI_DEV_GPU_TEMP", now - 30,
                  "GPU 0 on gpu-node-00 thermally throttled at 93 °C", ["clock event reason HW_THERMAL"],
                  namespace="research", pod="trainer-0", service="llm-pretrain")
    slow = Anomaly("throughput_drop", "warning", "gpu-node-01", "GPU-bbb", "DCGM_FI_PROF_SM_ACTIVE", now - 20,
                   "GPU 4 on gpu-node-01: throughput fell 58%", ["process 20004 still running"],
                   namespace="inference", pod="llm-serve-0", service="llm-serve")
    for a in (hot, slow):
        router.on_change(Change("open", a), now)
    _, notes = router.tick(now)
    assert len(notes) == 2
    policy = RetryPolicy(attempts=3, base_s=0.1)
    for n in notes:
        for body in bodies("alertmanager", n):
            assert send(rs.channels["am"], body, UrllibTransport(), policy).ok

    def active() -> list[dict[str, object]] | None:
        alerts = alertmanager.alerts()
        return alerts if len(alerts) == 2 else None

    alerts = wait_until(active, timeout=20, what="both alerts in Alertmanager")
    by_gpu = {a["labels"]["gpu"]: a for a in alerts}  # type: ignore[index]
    assert by_gpu["GPU-aaa"]["labels"]["kind"] == "thermal_throttle"  # type: ignore[index]
    assert by_gpu["GPU-aaa"]["annotations"]["summary"].startswith("GPU 0 on gpu-node-00")  # type: ignore[index]
    assert by_gpu["GPU-aaa"]["status"]["state"] == "active"  # type: ignore[index]
    # routed by severity: the critical one to the critical receiver, the warning to the default
    crit = wait_until(lambda: receiver.bodies("/am-critical") or None, timeout=20, what="critical webhook")
    warn = wait_until(lambda: receiver.bodies("/am-webhook") or None, timeout=20, what="default webhook")
    assert crit[0]["alerts"][0]["labels"]["gpu"] == "GPU-aaa"
    assert warn[0]["alerts"][0]["labels"]["gpu"] == "GPU-bbb"

    hot = replace(hot, end=time.time())
    router.on_change(Change("close", hot), hot.end)
    _, notes = router.tick(hot.end + 1)
    resolved = [n for n in notes if n.status == "resolved"]
    assert len(resolved) == 1
    for body in bodies("alertmanager", resolved[0]):
        assert send(rs.channels["am"], body, UrllibTransport(), policy).ok

    def resolved_hook() -> list[object] | None:
        return [b for b in receiver.bodies("/am-critical") if b["status"] == "resolved"] or None

    wait_until(resolved_hook, timeout=20, what="the resolve routed to the critical receiver")
    assert [a["labels"]["gpu"] for a in alertmanager.alerts()] == ["GPU-bbb"]  # type: ignore[index]
