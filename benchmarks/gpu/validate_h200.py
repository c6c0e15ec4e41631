"""Validate the agent on a real GPU against nvidia-smi, and record a phase-changing trace.

Runs, on a machine with an NVIDIA GPU (the lent H200), in one go:

1. ``workload_phases.py``: idle, bf16 training, inference, idle;
2. ``gpuwatch export`` for the whole run -> ``$OUT/h200-phases.jsonl`` (the codec's real trace);
3. ``gpuwatch agent`` on 127.0.0.1:9400; in each phase, a scrape of /metrics side by side
   with ``nvidia-smi --query-gpu``, ``--query-compute-apps`` and ``pmon`` -> ``compare.json``;
4. a scan of every GPM metric id during training -> which returned values;
5. ``bench_agent.py cpu --real`` during training -> ``bench_cpu_real.json``.

    OUT=/tmp/out python benchmarks/gpu/validate_h200.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = Path(os.environ.get("OUT", "/tmp/gpuwatch-validate"))
MARKER = Path("/tmp/gpuwatch-phases")
PLAN = os.environ.get("PLAN", "idle:20 train:110 infer:60 idle:20").split()

SMI_FIELDS = {
    "utilization.gpu": "DCGM_FI_DEV_GPU_UTIL",
    "utilization.memory": "DCGM_FI_DEV_MEM_COPY_UTIL",
    "utilization.encoder": "DCGM_FI_DEV_ENC_UTIL",
    "utilization.decoder": "DCGM_FI_DEV_DEC_UTIL",
    "memory.used": "DCGM_FI_DEV_FB_USED",
    "memory.free": "DCGM_FI_DEV_FB_FREE",
    "memory.reserved": "DCGM_FI_DEV_FB_RESERVED",
    "power.draw": "DCGM_FI_DEV_POWER_USAGE",
    "enforced.power.limit": "DCGM_FI_DEV_POWER_MGMT_LIMIT",
    "temperature.gpu": "DCGM_FI_DEV_GPU_TEMP",
    "temperature.memory": "DCGM_FI_DEV_MEMORY_TEMP",
    "clocks.sm": "DCGM_FI_DEV_SM_CLOCK",
    "clocks.mem": "DCGM_FI_DEV_MEM_CLOCK",
    "pstate": "DCGM_FI_DEV_PSTATE",
    "clocks_event_reasons.active": "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "clocks_throttle_reasons.active": "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "ecc.errors.corrected.volatile.total": "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "ecc.errors.uncorrected.volatile.total": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
}
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}", "PYTHONUNBUFFERED": "1"}


def sh(cmd: list[str], timeout: float = 60) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False).stdout


def phase_started(name: str, occurrence: int = 1) -> float | None:
    if not MARKER.exists():
        return None
    seen = [float(line.split()[1]) for line in MARKER.read_text().splitlines() if line.split()[0] == name]
    return seen[occurrence - 1] if len(seen) >= occurrence else None


def wait_phase(name: str, after: float, occurrence: int = 1, limit: float = 400) -> None:
    deadline = time.time() + limit
    while time.time() < deadline:
        t = phase_started(name, occurrence)
        if t is not None and time.time() >= t + after:
            return
        time.sleep(0.2)
    raise SystemExit(f"phase {name} never started")


def parse_exposition(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, value = line.rsplit(" ", 1)
        if "{" in name_labels:
            name, rest = name_labels.split("{", 1)
            labels = dict(kv.split("=", 1) for kv in rest.rstrip("}").split('",') if "=" in kv)
            labels = {k: v.strip('"') for k, v in labels.items()}
        else:
            name, labels = name_labels, {}
        out.setdefault(name, []).append((labels, float(value)))
    return out


def smi_number(value: str) -> float | str:
    v = value.strip().split(" ")[0]
    if v.startswith("P") and v[1:].isdigit():
        return float(v[1:])
    if v.startswith("0x"):
        return float(int(v, 16))
    try:
        return float(v)
    except ValueError:
        return value.strip()


def compare(label: str, fields: list[str]) -> dict[str, Any]:
    """One scrape and one nvidia-smi reading, as close together as two processes allow."""
    t0 = time.time()
    with urllib.request.urlopen("http://127.0.0.1:9400/metrics", timeout=10) as resp:
        scraped = parse_exposition(resp.read().decode())
    smi = sh(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
    apps = sh(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"])
    pmon = sh(["nvidia-smi", "pmon", "-c", "1", "-s", "u"])
    t1 = time.time()
    smi_values = dict(zip(fields, [smi_number(v) for v in smi.strip().split(",")], strict=False))
    rows = []
    for field in fields:
        key = SMI_FIELDS[field]
        ours = scraped.get(key, [])
        rows.append({"nvidia_smi_field": field, "dcgm_key": key, "nvidia_smi": smi_values.get(field),
                     "gpuwatch": ours[0][1] if ours else None})
    procs = []
    for line in apps.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            pid = parts[0]
            mem = [v for lab, v in scraped.get("gpuwatch_process_used_memory_bytes", []) if lab.get("pid") == pid]
            sm = [v for lab, v in scraped.get("gpuwatch_process_sm_util", []) if lab.get("pid") == pid]
            pm = [ln.split() for ln in pmon.splitlines() if not ln.startswith("#") and len(ln.split()) > 3]
            pm_sm = [r[3] for r in pm if r[1] == pid]
            procs.append({"pid": int(pid), "name": parts[1], "nvidia_smi_used_mib": smi_number(parts[2]),
                          "gpuwatch_used_mib": mem[0] / 2**20 if mem else None,
                          "pmon_sm_pct": pm_sm[0] if pm_sm else None,
                          "gpuwatch_sm_util": sm[0] if sm else None})
    return {"label": label, "t": t0, "seconds": round(t1 - t0, 2), "rows": rows, "processes": procs,
            "gpm": {k: v[0][1] for k, v in scraped.items() if k.startswith("DCGM_FI_PROF_")}}


def gpm_scan() -> dict[str, Any]:
    import pynvml as nv

    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    s1, s2 = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
    nv.nvmlGpmSampleGet(h, s1)
    time.sleep(1.0)
    nv.nvmlGpmSampleGet(h, s2)
    ok: dict[int, float] = {}
    failed: dict[int, str] = {}
    ids = [v for k, v in vars(nv).items()
           if k.startswith("NVML_GPM_METRIC_") and isinstance(v, int) and k != "NVML_GPM_METRIC_MAX"]
    names = {v: k for k, v in vars(nv).items() if k.startswith("NVML_GPM_METRIC_")}
    for start in range(0, len(ids), 50):
        chunk = ids[start:start + 50]
        req = nv.c_nvmlGpmMetricsGet_t()
        req.version = nv.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(chunk)
        req.sample1, req.sample2 = s1, s2
        for i, mid in enumerate(chunk):
            req.metrics[i].metricId = mid
        nv.nvmlGpmMetricsGet(req)
        for i, mid in enumerate(chunk):
            m = req.metrics[i]
            if m.nvmlReturn == 0:
                ok[mid] = round(m.value, 3)
            else:
                failed[mid] = str(m.nvmlReturn)
    # GPM rule: what happens with two samples closer than 100 ms?
    nv.nvmlGpmSampleGet(h, s1)
    nv.nvmlGpmSampleGet(h, s2)
    req = nv.c_nvmlGpmMetricsGet_t()
    req.version, req.numMetrics, req.sample1, req.sample2 = nv.NVML_GPM_METRICS_GET_VERSION, 1, s1, s2
    req.metrics[0].metricId = nv.NVML_GPM_METRIC_SM_UTIL
    try:
        nv.nvmlGpmMetricsGet(req)
        close = f"returned {req.metrics[0].nvmlReturn} value {req.metrics[0].value}"
    except nv.NVMLError as exc:
        close = f"raised {exc.__class__.__name__}"
    nv.nvmlShutdown()
    return {"supported": {names.get(k, str(k)): v for k, v in ok.items()},
            "failed": {names.get(k, str(k)): v for k, v in failed.items()},
            "two_samples_back_to_back": close}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    MARKER.unlink(missing_ok=True)
    log = open(OUT / "run.log", "w")  # noqa: SIM115
    help_text = sh(["nvidia-smi", "--help-query-gpu"])
    fields = [f for f in SMI_FIELDS if f'"{f}"' in help_text]
    if "clocks_event_reasons.active" in fields and "clocks_throttle_reasons.active" in fields:
        fields.remove("clocks_throttle_reasons.active")
    total = sum(float(p.split(":")[1]) for p in PLAN)
    workload = subprocess.Popen([sys.executable, str(HERE / "workload_phases.py"), str(MARKER), *PLAN],
                                stdout=log, stderr=log, env=ENV)
    wait_phase("idle", 0, limit=120)
    export = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "export", "--node-name", "h200-node", "--duration", str(total - 2),
         "-o", str(OUT / "h200-phases.jsonl")], stdout=log, stderr=open(OUT / "export.log", "w"), env=ENV,  # noqa: SIM115
    )
    agent = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "agent", "--metrics-host", "127.0.0.1", "--node-name", "h200-node"],
        stdout=log, stderr=open(OUT / "agent.log", "w"), env=ENV,  # noqa: SIM115
    )
    results: dict[str, Any] = {"fields": fields, "comparisons": []}
    time.sleep(8)
    results["comparisons"].append(compare("idle", fields))
    wait_phase("train", 15)
    for i in range(3):
        results["comparisons"].append(compare(f"train-{i}", fields))
        time.sleep(2)
    results["gpm_scan"] = gpm_scan()
    bench = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_agent.py"), "cpu", "--real", "--seconds", "45",
         "--json", str(OUT / "bench_cpu_real.json")], capture_output=True, text=True, env=ENV, timeout=200,
    )
    log.write(bench.stdout + bench.stderr)
    wait_phase("infer", 10)
    for i in range(2):
        results["comparisons"].append(compare(f"infer-{i}", fields))
        time.sleep(2)
    wait_phase("idle", 8, occurrence=2)
    results["comparisons"].append(compare("idle-after", fields))
    with urllib.request.urlopen("http://127.0.0.1:9400/metrics", timeout=10) as resp:
        (OUT / "metrics.txt").write_bytes(resp.read())
    workload.wait(timeout=120)
    export.wait(timeout=60)
    agent.terminate()
    results["agent_exit_code_after_sigterm"] = agent.wait(timeout=30)
    results["nvidia_smi_q"] = sh(["nvidia-smi", "-q", "-d", "PERFORMANCE,POWER,CLOCK"])[:6000]
    (OUT / "compare.json").write_text(json.dumps(results, indent=1))
    print(json.dumps({"comparisons": len(results["comparisons"]),
                      "gpm_supported": len(results["gpm_scan"]["supported"]),
                      "agent_exit": results["agent_exit_code_after_sigterm"]}))


if __name__ == "__main__":
    main()
