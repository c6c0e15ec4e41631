"""The fault table of issue 10: run fault cases against real processes and count every sample.

Each case starts its own tansu broker (durable through a local S3 server where it
restarts the broker), a fresh database in one embedded PostgreSQL cluster, ``gpuwatch
collector`` processes and ``gpuwatch agent --simulate N`` processes (each with a side
export of what it sampled), runs its fault, stops the agents (they flush), waits for the
collector to store what is left, and compares: produced, stored distinct and total,
duplicates, lost, dead-lettered (valid frames / injected garbage), the seconds from the
end of the fault until every sample taken before it was stored, how often a collector
exited by itself (the harness restarts it, as Kubernetes would), and the collector's log
lines per second during the fault.

    python benchmarks/faults/run.py --case all --json docs/bench-runs/faults.json --markdown faults.md
    python benchmarks/faults/run.py --case message_5mib --case postgres_restart_x3
    python benchmarks/faults/run.py --list
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.faults.cases import CASES, Case  # noqa: E402
from tests.support.faults.harness import Counts, Env, Params, Shared, summary  # noqa: E402


def run_case(shared: Shared, case: Case, params: Params, label: str = "") -> dict[str, Any]:
    """One case, start to count; the row of the table (as a dict)."""
    suffix = re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")
    env = Env(shared, case.name + (f"_{suffix}" if suffix else ""), params)
    started = time.monotonic()
    try:
        case.run(env)
        env.stop_agents()
        env.drain()
        for check in env.checks:
            check()
        counts = env.count()
        if env.valid_dead:
            env.note(f"valid messages dead-lettered, e.g. {env.valid_dead[:3]}")
        exits = sum(c.exits for c in env.collectors)
        return {"case": case.name, "title": case.title, "collector": label or "this branch", **summary(counts),
                "collector_exits": exits,
                "notes": env.notes, "seconds": round(time.monotonic() - started, 1), "workdir": str(env.dir)}
    finally:
        env.close()


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    head = ["fault", "collector", "produced", "stored distinct", "stored total", "duplicates", "lost",
            "dead-lettered (valid / injected)", "recovery s", "collector exits", "collector log lines in fault"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['title']} | {r.get('collector', '')} | error: {r['error']} |" + " |" * (len(head) - 3))
            continue
        valid = r["dead_lettered"] - r["dead_injected"]
        logged = r["log_lines"]
        if logged is not None and (r["fault_s"] or 0) >= 5:
            logged = f"{logged} in {r['fault_s']:.0f} s"
        cells = [r["title"], r["collector"], r["produced"], r["stored_distinct"], r["stored_total"],
                 r["duplicates"], r["lost"], f"{valid:,} / {r['dead_injected']:,}", r["recovery_s"],
                 r["collector_exits"], logged]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    notes = [f"- {r['title']} ({r.get('collector')}): " + "; ".join(r["notes"]) for r in rows if r.get("notes")]
    return "\n".join(lines + (["", *notes] if notes else []))


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10, check=False)
        return out.stdout.strip()
    except OSError:
        return ""


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", default=[], help="case name, or 'all' (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the cases")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--markdown", type=Path, help="write the table here")
    ap.add_argument("--agents", type=int, default=Params.agents)
    ap.add_argument("--gpus", type=int, default=Params.gpus)
    ap.add_argument("--interval", type=float, default=Params.interval, help="agent sampling interval, s")
    ap.add_argument("--outage-s", type=float, default=Params.outage_s)
    ap.add_argument("--baseline-tree", type=Path, metavar="DIR",
                    help="also run each case with the collector from this source tree (e.g. `git archive` of the "
                         "commit before the change), as the baseline row")
    ap.add_argument("--baseline-label", default="baseline", help="the baseline rows' label")
    args = ap.parse_args(argv)
    if args.list or not args.case:
        for c in CASES.values():
            print(f"{c.name:26s} {c.title}")
        return 0
    names = list(CASES) if "all" in args.case else args.case
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"unknown case(s) {unknown}; --list shows them", file=sys.stderr)
        return 2
    params = replace(Params(), agents=args.agents, gpus=args.gpus, interval=args.interval, outage_s=args.outage_s)
    shared = Shared()
    rows: list[dict[str, Any]] = []
    try:
        for name in names:
            case = CASES[name]
            print(f"== {name}: {case.title}", flush=True)
            runs = [("", params)]
            if args.baseline_tree is not None:
                runs.insert(0, (args.baseline_label, replace(params, collector_tree=str(args.baseline_tree))))
            for label, run_params in runs:
                try:
                    row = run_case(shared, case, run_params, label)
                except Exception as exc:  # noqa: BLE001 - one broken case must not lose the others' rows
                    traceback.print_exc()
                    row = {"case": name, "title": case.title, "collector": label or "this branch",
                           "error": f"{type(exc).__name__}: {exc}"}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        shared.close()
    table = markdown(rows)
    print(table)
    meta = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "commit": _commit(),
            "machine": f"{platform.node()} ({platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores)",
            "params": asdict(params)}
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(table + "\n")
    return 0


def counts_ok(counts: Counts) -> bool:
    """No loss and no duplicates (what the test suite asserts for most cases)."""
    return counts.lost == 0 and counts.duplicates == 0 and counts.extra == 0


if __name__ == "__main__":
    sys.exit(main())
