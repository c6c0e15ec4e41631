"""``gpuwatch up`` on a real GPU: NVML samples, node frames, the in-process collector, the embedded
PostgreSQL, the API, and a throughput drop found, as a new user on a GPU machine would meet them.

Run on the GPU machine from the repository root (the package's dependencies importable,
PyTorch present for the load)::

    OUT=/tmp/out python3 benchmarks/gpu/up_real_gpu.py

Why: the agent's default wire format changed to node frames (docs/codec.md, "Node frames"), and
the spool check (``node_frames_spool.py``) decodes them without a collector. Here everything
``up`` starts runs as shipped: its agent samples the GPU through NVML and hands node frames to
the collector in process, which stores, judges and serves them. A load runs beside it: a steady
job (bf16 matrix products, ``TRAIN_S``), then the same job starved of input (bursts of work
between waits, ``STALL_S``: the fall ``throughput_drop`` exists for), then idle. Then, with the
run's own admin token (printed in the web page's address), the API is asked for the GPUs, a
series, the anomalies, and the collector's counters; ``up`` is stopped with SIGTERM and must
exit 0 with no PostgreSQL left behind.
Writes ``$OUT/up.log``, ``$OUT/check.json``, the API's answers (``$OUT/api.json``) and both
``/metrics`` pages; the embedded PostgreSQL lives in ``$DATA`` (default a fresh temporary folder).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu.torch_load import PRELUDE  # noqa: E402

API_PORT, METRICS_PORT = 18080, 19400
TRAIN_S, STALL_S, IDLE_S = 120, 110, 15

LOAD = PRELUDE + f"""
print("train", time.time(), flush=True); run({TRAIN_S}, 0.97)
print("stall", time.time(), flush=True); run({STALL_S}, 0.25)
print("idle", time.time(), flush=True); time.sleep({IDLE_S})
"""


def _get(url: str, token: str | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            body = resp.read().decode()
            return resp.status, json.loads(body) if "json" in resp.headers.get("content-type", "") else body
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()[:500]


def _metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


def main() -> int:
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    data = Path(os.environ.get("DATA") or tempfile.mkdtemp(prefix="gpuwatch-up-"))
    env = {**os.environ, "GPUWATCH_PROBE_SOCKET": ""}
    log = open(out / "up.log", "w+b")  # noqa: SIM115 (read back below)
    started = time.time()
    up = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "up", "--data-dir", str(data), "--node-name", "gpu-node",
         "--api-port", str(API_PORT), "--metrics-port", str(METRICS_PORT)],
        env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT)
    token = None
    for _ in range(240):
        time.sleep(0.5)
        text = (out / "up.log").read_text(errors="replace")
        found = re.search(r"#token=(\S+)", text)
        if found:
            token = found.group(1)
            break
        if up.poll() is not None:
            break
    result: dict[str, Any] = {"up_ready_s": round(time.time() - started, 1), "token_seen": token is not None}
    if token is None:
        result["up_rc"] = up.poll()
        (out / "check.json").write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(result, indent=1))
        return 1
    base = f"http://127.0.0.1:{API_PORT}"
    load = subprocess.run([sys.executable, "-c", LOAD], capture_output=True, text=True, timeout=TRAIN_S + STALL_S + 120)
    marks = dict(line.split() for line in load.stdout.splitlines() if len(line.split()) == 2)
    time.sleep(5)
    answers = {
        "no_token": _get(f"{base}/api/v1/gpus"),
        "gpus": _get(f"{base}/api/v1/gpus", token),
        "nodes": _get(f"{base}/api/v1/nodes", token),
        "anomalies": _get(f"{base}/api/v1/anomalies", token),
        "bad_limit": _get(f"{base}/api/v1/anomalies?limit=abc", token),
    }
    gpus = answers["gpus"][1].get("items", []) if isinstance(answers["gpus"][1], dict) else []
    if gpus:
        uuid = gpus[0]["gpu"]
        answers["series"] = _get(f"{base}/api/v1/gpus/{uuid}/series?metrics=DCGM_FI_PROF_SM_ACTIVE&step=5s", token)
    status, collector_metrics = _get(f"{base}/metrics")
    _, agent_metrics = _get(f"http://127.0.0.1:{METRICS_PORT}/metrics")
    (out / "api.json").write_text(json.dumps({name: {"status": code, "body": body}
                                              for name, (code, body) in answers.items()}, indent=1) + "\n")
    (out / "collector-metrics.txt").write_text(str(collector_metrics))
    (out / "agent-metrics.txt").write_text(str(agent_metrics))
    up.send_signal(signal.SIGTERM)
    rc = up.wait(timeout=90)
    left = subprocess.run(["pgrep", "-f", str(data)], capture_output=True, text=True).stdout.split()
    anomalies = answers["anomalies"][1].get("items", []) if isinstance(answers["anomalies"][1], dict) else []
    series = answers.get("series", (0, {}))[1]
    result.update({
        "load_rc": load.returncode, "load_stderr": load.stderr[-400:], "marks": marks,
        "status": {name: code for name, (code, _) in answers.items()},
        "gpus": [{k: g.get(k) for k in ("gpu", "model", "node", "health", "sample_age_seconds")} for g in gpus],
        "anomalies": [{k: a.get(k) for k in ("kind", "severity", "start_ts", "summary")} for a in anomalies],
        "series": {"source": series.get("source"), "buckets": len(series.get("times", [])),
                   "filled": {k: sum(v is not None for v in vals) for k, vals in series.get("series", {}).items()},
                   "max": {k: max((v for v in vals if v is not None), default=None)
                           for k, vals in series.get("series", {}).items()}}
        if isinstance(series, dict) else series,
        "collector_records": _metric(str(collector_metrics), "gpuwatch_collector_records_total"),
        "collector_dead_letters": _metric(str(collector_metrics), "gpuwatch_collector_dead_lettered_frames_total"),
        "collector_metrics_status": status,
        "agent_dcgm_lines": sum(1 for line in str(agent_metrics).splitlines() if line.startswith("DCGM_FI_")),
        "agent_frames": {name: _metric(str(agent_metrics), f"gpuwatch_agent_{name}_total")
                         for name in ("frames", "frame_records", "frame_bytes")},
        "up_rc": rc, "left_behind": left,
    })
    (out / "check.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
