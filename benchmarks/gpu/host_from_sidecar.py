"""Rebuild the host-evidence columns of a labelled trace from its sidecar log (trace g).

Why: trace g was recorded (2026-12-01) by an agent that did not yet read the host, with
``record_labelled.py``'s sidecar beside it writing the kernel's raw counters once a second
(``/proc/stat``, PSI, the cgroup's ``cpu.stat``, the workload process's and its threads'
CPU ticks and states). This script turns those counters into the catalog's host rows the
way the agent's reader defines them (telemetry/catalog.py), over each sidecar interval, and
adds them to the GPU records that have a process, so the diagnosis can be checked on a real
H200 run's host side. What it cannot rebuild: the run-queue wait (the sidecar did not read
``schedstat``), so ``sleeping`` is 1 - the busiest thread's CPU share, an upper bound.

    python benchmarks/gpu/host_from_sidecar.py benchmarks/data/h200-labelled-g.jsonl \
        docs/gpu-runs/2026-12-01-labelled-g-host.jsonl.gz OUT.jsonl
"""

from __future__ import annotations

import bisect
import gzip
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.sidecar import rows


def main() -> None:
    trace, sidecar_path, out_path = (Path(a) for a in sys.argv[1:4])
    opener = gzip.open if sidecar_path.suffix == ".gz" else open
    with opener(sidecar_path, "rt", encoding="utf-8") as fh:
        sidecar = [json.loads(line) for line in fh if line.strip()]
    host = rows(sidecar)
    times = [t for t, _ in host]
    with open(trace, encoding="utf-8") as src, open(out_path, "w", encoding="utf-8") as dst:
        for line in src:
            rec = json.loads(line)
            i = bisect.bisect_right(times, rec["ts"]) - 1
            if rec.get("processes") and i >= 0 and rec["ts"] - times[i] <= 3.0:
                rec["metrics"].update(host[i][1])
            dst.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
