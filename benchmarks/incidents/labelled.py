"""Scoring a real trace against its labels, as a command (the scoring is tests/support/incidents/labelled.py)::

    python benchmarks/incidents/labelled.py TRACE.jsonl LABELS.json [--json out.json]

Exit status 0 when every incident was found and no anomaly fell on a normal phase.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from tests.support.incidents.labelled import evaluate

__all__ = ["evaluate", "main"]  # benchmarks/gpu/record_labelled.py scores through this module


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("trace", type=Path)
    p.add_argument("labels", type=Path)
    p.add_argument("--json", type=Path, help="write the result here")
    args = p.parse_args()
    out = evaluate(args.trace, args.labels)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"{out['records']} records, {out['anomalies']} anomalies; {out['found']} of {len(out['incidents'])} "
          f"incidents found; {len(out['false'])} anomalies on normal phases")
    for i in out["incidents"]:
        lat = f"{i['latency_s']:.0f} s" if i["found"] else "MISSED"
        print(f"  {i['phase']:11} {i['expect']:16} {lat:>7}  (phase {i['seconds']:.0f} s)")
    for f in out["false"]:
        print(f"  FALSE {f['kind']} in {f['phase']} at +{f['at_s']} s: {f['summary']}")
    return 0 if out["found"] == len(out["incidents"]) and not out["false"] else 1


if __name__ == "__main__":
    sys.exit(main())
