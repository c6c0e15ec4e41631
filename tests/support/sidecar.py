"""Host-evidence rows rebuilt from a labelled run's sidecar log (benchmarks/gpu/record_labelled.py).

Why here: the test of trace g's host side (tests/detect/test_real_gpu_traces.py) and the
script that writes the rebuilt trace (benchmarks/gpu/host_from_sidecar.py) use the same
conversion; tests import no benchmark code. The sidecar holds the kernel's raw counters once
a second; each interval's rates follow the catalog's definitions, except the run-queue wait
(not recorded), so ``sleeping`` is 1 - the busiest thread's CPU share.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from telemetry import keys as k

HZ = 100.0  # USER_HZ: /proc ticks per second


def _psi_total(text: str) -> float | None:
    m = re.search(r"^some .*total=(\d+)", text, re.M)
    return float(m.group(1)) if m else None


def _cpu_stat(text: str) -> dict[str, float]:
    return {p[0]: float(p[1]) for p in (line.split() for line in text.splitlines()) if len(p) == 2}


def rows(sidecar: list[dict[str, Any]]) -> list[tuple[float, dict[str, float]]]:
    out = []
    for a, b in itertools.pairwise(sidecar):
        dt = b["t"] - a["t"]
        if dt <= 0:
            continue
        m: dict[str, float] = {}
        sa, sb = [float(x) for x in a["stat_cpu"].split()[1:]], [float(x) for x in b["stat_cpu"].split()[1:]]
        total = sum(sb) - sum(sa)
        if total > 0:
            m[k.NODE_CPU_BUSY_RATIO] = 1.0 - ((sb[3] + sb[4]) - (sa[3] + sa[4])) / total
        for what, key in (("cpu", k.NODE_PRESSURE_CPU_WAITING_RATIO), ("memory", k.NODE_PRESSURE_MEMORY_WAITING_RATIO),
                          ("io", k.NODE_PRESSURE_IO_WAITING_RATIO)):
            ta, tb = _psi_total(a[f"psi_{what}"]), _psi_total(b[f"psi_{what}"])
            if ta is not None and tb is not None:
                m[key] = min(1.0, max(0.0, (tb - ta) / 1e6 / dt))
        ca, cb = _cpu_stat(a["cgroup_cpu_stat"]), _cpu_stat(b["cgroup_cpu_stat"])
        if "usage_usec" in ca and "usage_usec" in cb:
            m[k.CONTAINER_CPU_USAGE_CORES] = (cb["usage_usec"] - ca["usage_usec"]) / 1e6 / dt
            periods = cb.get("nr_periods", 0.0) - ca.get("nr_periods", 0.0)
            if periods > 0:
                m[k.CONTAINER_CPU_THROTTLED_RATIO] = (cb["nr_throttled"] - ca["nr_throttled"]) / periods
        pa = {p["pid"]: p for p in a["procs"]}
        cores = busiest = 0.0
        blocked = 0
        seen = False
        for p in b["procs"]:
            before = pa.get(p["pid"])
            if before is None:
                continue
            seen = True
            cores += (p["ticks"] - before["ticks"]) / HZ / dt
            ticks = {tid: t for tid, _, t in before["threads"]}
            for tid, state, t in p["threads"]:
                if tid in ticks:
                    busiest = max(busiest, (t - ticks[tid]) / HZ / dt)
                blocked += state == "D"
        if seen:
            m[k.PROCESS_CPU_CORES] = cores
            m[k.PROCESS_BUSIEST_THREAD_RATIO] = min(1.0, busiest)
            m[k.PROCESS_SLEEPING_RATIO] = max(0.0, 1.0 - min(1.0, busiest))
            m[k.PROCESS_BLOCKED_THREADS] = float(blocked)
        out.append((b["t"], m))
    return out
