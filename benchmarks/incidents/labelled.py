"""Scoring a real trace against its labels, as a command (the scoring is tests/support/incidents/labelled.py)::

    python benchmarks/incidents/labelled.py TRACE.jsonl LABELS.json [--json out.json] [--interval 2]
    python benchmarks/incidents/labelled.py --all --interval 2     # every committed real trace, re-sampled

Exit status 0 when every incident was found and no anomaly fell on a normal phase.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from tests.support.incidents.labelled import evaluate

__all__ = ["evaluate", "main"]  # benchmarks/gpu/record_labelled.py scores through this module


DATA = Path(__file__).resolve().parent.parent / "data"


def _report(out: dict[str, Any]) -> None:
    print(f"{out['records']} records, {out['anomalies']} anomalies; {out['found']} of {len(out['incidents'])} "
          f"incidents found; {len(out['false'])} anomalies on normal phases")
    for i in out["incidents"]:
        lat = f"{i['latency_s']:.0f} s" if i["found"] else "MISSED"
        print(f"  {i['phase']:11} {i['expect']:16} {lat:>7}  (phase {i['seconds']:.0f} s)")
    for f in out["false"]:
        print(f"  FALSE {f['kind']} in {f['phase']} at +{f['at_s']} s: {f['summary']}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("trace", type=Path, nargs="?")
    p.add_argument("labels", type=Path, nargs="?")
    p.add_argument("--all", action="store_true", help="every labelled trace in benchmarks/data, with a total")
    p.add_argument("--interval", type=float, help="re-sample each GPU's records at this many seconds")
    p.add_argument("--json", type=Path, help="write the result here")
    args = p.parse_args()
    if args.interval is not None and not 0 < args.interval <= 300:
        p.error(f"--interval: {args.interval} is not a number of seconds between 0 and 300")
    if args.all == (args.trace is not None) or (args.trace is not None and args.labels is None):
        p.error("give TRACE and LABELS, or --all")
    if not args.all:
        out = evaluate(args.trace, args.labels, args.interval)
        if args.json:
            args.json.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        _report(out)
        return 0 if out["found"] == len(out["incidents"]) and not out["false"] else 1
    every: dict[str, Any] = {}
    for trace in sorted(DATA.glob("h[12]00-labelled*.jsonl")):
        out = every[trace.stem] = evaluate(trace, trace.with_suffix(".labels.json"), args.interval)
        missed = [i["phase"] for i in out["incidents"] if not i["found"]]
        found = " ".join(f"{i['phase']}:{i['latency_s']:.0f}" for i in out["incidents"] if i["found"])
        print(f"{trace.stem:20} {out['found']}/{len(out['incidents'])} missed {missed} "
              f"false {[(f['phase'], f['kind']) for f in out['false']]}  {found}")
    found_n = sum(o["found"] for o in every.values())
    total = sum(len(o["incidents"]) for o in every.values())
    false_n = sum(len(o["false"]) for o in every.values())
    print(f"all {len(every)} traces at {args.interval or 'their own'} s: {found_n} of {total} incidents found, "
          f"{false_n} anomalies on normal phases")
    if args.json:
        args.json.write_text(json.dumps({"interval_s": args.interval, "found": found_n, "incidents": total,
                                         "false": false_n, "traces": every}, indent=1) + "\n", encoding="utf-8")
    return 0 if found_n == total and not false_n else 1


if __name__ == "__main__":
    sys.exit(main())
