#!/usr/bin/env bash
# Record the real-GPU trace for the codec benchmark, and measure the agent's CPU on a real
# GPU while a workload trains. Run on the GPU machine from the repo root, with OUT set.
set -euo pipefail
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
marker=/tmp/gpuwatch-trace-phases
rm -f "$marker"
python3 benchmarks/gpu/workload_phases.py "$marker" idle:30 train:150 infer:120 idle:30 train:120 idle:30 \
    >"$OUT/workload.log" 2>&1 &
wl=$!
until [ -s "$marker" ]; do sleep 0.2; done
python3 -m gpuwatch export --node-name h200-node --duration 478 -o "$OUT/h200-phases.jsonl" 2>"$OUT/export.log" &
ex=$!
until grep -q '^train' "$marker"; do sleep 0.5; done
sleep 10
python3 benchmarks/bench_agent.py cpu --real --seconds 60 --json "$OUT/bench_cpu_real.json" >"$OUT/bench.log" 2>&1
wait $wl $ex
cp "$marker" "$OUT/phases.txt"
wc -l "$OUT/h200-phases.jsonl"
cat "$OUT/bench_cpu_real.json"
