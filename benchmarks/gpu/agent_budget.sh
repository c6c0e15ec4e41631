#!/usr/bin/env bash
# The agent's thread-CPU budget on the real GPU: 60 s quiet, 60 s with a CPU hog thread and a
# /metrics scraper in the same process, 60 s of the same with the old whole-process measure.
# Run on the GPU machine from the repo root with OUT set (wheels in .whl/); about 3.5 minutes.
set -euo pipefail
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --find-links .whl nvidia-ml-py pydantic pydantic-settings prometheus-client \
    2>&1 | tail -2 || true
nvidia-smi --query-gpu=name,driver_version,utilization.gpu --format=csv,noheader | tee "$OUT/agent-budget-gpu.txt"
python3 benchmarks/gpu/agent_budget.py --seconds "${SECONDS_PER_RUN:-60}" --json "$OUT/agent-budget.json" \
    2>"$OUT/agent-budget.log"
