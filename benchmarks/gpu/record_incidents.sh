#!/usr/bin/env bash
# Record a real-GPU trace with two incidents (an input-bound stall and a memory leak) while
# the agent samples, then replay it through the detectors on the same machine.
# Run on the GPU machine from the repo root with OUT set (wheels in .whl/).
set -euo pipefail
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --find-links .whl pydantic pydantic-settings zstandard psutil prometheus-client \
    pyyaml 2>&1 | tail -2 || true
plan="${PLAN:-idle:5 train:130 stall:75 leak:120 idle:10}"
marker=/tmp/gpuwatch-incident-phases
rm -f "$marker"
python3 benchmarks/gpu/workload_phases.py "$marker" $plan >"$OUT/incident-workload.log" 2>&1 &
wl=$!
until [ -s "$marker" ]; do sleep 0.2; done
python3 -m gpuwatch export --node-name h200-node --duration "${DURATION:-345}" -o "$OUT/h200-incidents.jsonl" \
    2>"$OUT/incident-export.log" &
ex=$!
while kill -0 $wl 2>/dev/null; do sleep 15; nvidia-smi --query-gpu=utilization.gpu,memory.used,power.draw --format=csv,noheader; done
wait $wl || true

wait $ex || true
cp "$marker" "$OUT/incident-phases.txt"
wc -l "$OUT/h200-incidents.jsonl"
python3 -m gpuwatch replay "$OUT/h200-incidents.jsonl" -o "$OUT/h200-incidents-anomalies.json"
python3 -c "
import json,sys
for a in json.load(open(sys.argv[1])): print(a['kind'], a['severity'], a['start'], a['end'], a['summary'][:160])
" "$OUT/h200-incidents-anomalies.json"
cat "$OUT/incident-phases.txt"
