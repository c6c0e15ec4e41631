#!/usr/bin/env bash
# The host evidence's cost on the GPU machine (issue 14): a PyTorch job runs on the GPU (its
# input work on every core, as benchmarks/gpu/workload_labelled.py's training does), and
# benchmarks/bench_host.py --nvml times two agents, host evidence on and off, alternating.
#   OUT=/tmp/out bash benchmarks/gpu/host_cost.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 - <<'PY' &
import os, time, torch
torch.set_num_threads(os.cpu_count() or 1)
w = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
h = torch.randn(1024, 1024)
end = time.time() + 150
while time.time() < end:
    x = h
    for _ in range(3):
        x = torch.tanh(x @ h)
    y = x[:64].to("cuda", dtype=torch.bfloat16).mean() + w
    for _ in range(6):
        y = y @ w
    torch.cuda.synchronize()
PY
job=$!
sleep 20
python3 benchmarks/bench_host.py --nvml --rounds 20 --steps 10 --json "$OUT/host-cost-h200.json"
kill $job || true
wait || true
