"""The shipped agent on a real GPU, its node frames kept in its spool (Kafka unreachable), then decoded.

Run on the GPU machine from the repository root (the package's dependencies importable,
PyTorch present for the load)::

    OUT=/tmp/out python3 benchmarks/gpu/node_frames_spool.py

Why the spool: it holds exactly the messages the agent would have produced (key, headers and
frame), so a machine without a Kafka broker still shows what the agent sends. The agent runs
with its defaults (node frames, window 10, 1-s maximum delay) and a broker address nothing
listens on, while a load runs on the GPU: idle, then matrix products, then products with
pauses (a bursty job), then idle. After SIGTERM (the agent flushes what is pending into the
spool) every spooled message is read back and decoded with the collector's node frame
decoder, and checked: every frame decodes, in sequence, each GPU's records in time order.
Writes ``$OUT/spool/`` (the agent's own files), ``$OUT/agent.log`` and ``$OUT/check.json``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

LOAD = """
import time, torch
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
def run(seconds, duty):
    end = time.time() + seconds
    while time.time() < end:
        t = time.time()
        while time.time() - t < duty:
            y = x @ x
        torch.cuda.synchronize()
        time.sleep(1.0 - duty)
time.sleep(15); run(30, 0.95); run(20, 0.3); time.sleep(15)
"""


def spooled(spool: Path) -> list[Any]:
    """Every message in the spool's segments, in order."""
    from agent.spool_format import ENTRY_HEADER, _decode_payload

    out = []
    for seg in sorted(spool.rglob("*.seg")):  # the agent's segments, or one kept beside its run
        data = seg.read_bytes()
        pos = 0
        while pos + ENTRY_HEADER.size <= len(data):
            length, _crc = ENTRY_HEADER.unpack_from(data, pos)
            if length == 0:
                break
            out.append(_decode_payload(data[pos + ENTRY_HEADER.size : pos + ENTRY_HEADER.size + length]))
            pos += ENTRY_HEADER.size + length
    return out


def check(spool: Path) -> dict[str, Any]:
    from telemetry.codec.node import NodeFrameDecoder, is_node_frame, peek_node_header

    messages = spooled(spool)
    decoder = NodeFrameDecoder()
    frames = records = values = frame_bytes = keyframes = 0
    per_gpu: dict[str, list[float]] = {}
    sm: list[float] = []
    kinds: dict[str, int] = {}
    for m in messages:
        kind = dict(m.headers).get("type", b"?").decode()
        kinds[kind] = kinds.get(kind, 0) + 1
        if kind != "frame":
            continue
        assert is_node_frame(m.value), "the agent's default is node frames"
        header = peek_node_header(m.value)
        keyframes += header.keyframe
        for group in decoder.decode_checked(m.value, header):
            for r in group:
                per_gpu.setdefault(r.gpu, []).append(r.ts)
                values += len(r.metrics)
                if "DCGM_FI_PROF_SM_ACTIVE" in r.metrics:
                    sm.append(float(r.metrics["DCGM_FI_PROF_SM_ACTIVE"]))
            records += len(group)
        frames += 1
        frame_bytes += len(m.value)
    ordered = all(ts == sorted(ts) for ts in per_gpu.values())
    span = max((ts[-1] - ts[0] for ts in per_gpu.values()), default=0.0)
    return {"messages": kinds, "frames": frames, "keyframes": keyframes, "gpus": len(per_gpu), "records": records,
            "values": values, "frame_bytes": frame_bytes, "frame_bytes_per_value": frame_bytes / max(1, values),
            "records_per_frame": records / max(1, frames), "each_gpu_in_time_order": ordered,
            "seconds_covered": span, "sm_active_max": max(sm, default=None),
            "sm_active_samples_over_0_5": sum(1 for v in sm if v > 0.5)}


def main() -> int:
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GPUWATCH_ATTRIBUTION": "false", "GPUWATCH_PROBE_SOCKET": ""}
    with open(out / "agent.log", "wb") as log:
        agent = subprocess.Popen(
            [sys.executable, "-m", "gpuwatch", "agent", "--node-name", "gpu-node", "--kafka-bootstrap", "127.0.0.1:9",
             "--spool-dir", str(out / "spool"), "--metrics-port", "0", "--metrics-host", "127.0.0.1"],
            env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=ROOT)
        time.sleep(5)
        load = subprocess.run([sys.executable, "-c", LOAD], capture_output=True, text=True, timeout=240)
        time.sleep(3)
        agent.send_signal(signal.SIGTERM)
        rc = agent.wait(timeout=60)
    result = {"agent_rc": rc, "load_rc": load.returncode, "load_stderr": load.stderr[-500:], **check(out / "spool")}
    (out / "check.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
