"""The incident suite judged as several collector replicas judge it: one engine per node.

Why: the agent keys its messages by node, so each node may be read by another collector
replica, and a service's replicas (on many nodes) by many. Three ways, on the same records:
``one`` engine for the whole fleet; one engine per node with no exchange (``alone``: what a
replica saw before collector/detect/remote.py); one engine per node exchanging peer summaries
every ``--every`` s of record time through the wire encoding (``exchange``). Reported per seed:
throughput drops labelled, found, false, and the anomalies that differ from ``one``'s (kind,
GPU, start rounded to the second).

    .venv/bin/python benchmarks/incidents/split.py --generator tuning --seeds 1,2,3 --nodes 4
    .venv/bin/python benchmarks/incidents/split.py --generator heldout --seeds 1201,1202,1203 --nodes 6
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from benchmarks.incidents.heldout import HeldoutFleet
from collector.detect.engine import AnomalyLog, DetectionEngine
from collector.detect.remote import decode, encode
from telemetry.records import EventRecord, GpuRecord
from tests.support.incidents.generate import Fleet, Incident
from tests.support.incidents.scoring import match


def _run(recs: list[GpuRecord | EventRecord], incidents: list[Incident], group: Callable[[str], str],
         every: float) -> tuple[dict[str, int], set[tuple[str, str, int]]]:
    engines: dict[str, DetectionEngine] = {}
    logs: dict[str, AnomalyLog] = {}
    due = -math.inf
    for rec in recs:
        if every and rec.ts >= due:
            due = rec.ts + every
            for name, engine in engines.items():
                value = encode(name, engine.summaries())
                for other, peer in engines.items():
                    if other != name:
                        peer.absorb(decode(value, peer.remote.wanted())[1])
        key = group(rec.node)
        engine = engines.get(key)
        if engine is None:
            engine, logs[key] = engines.setdefault(key, DetectionEngine()), AnomalyLog()
        logs[key].add(engine.feed_event(rec) if isinstance(rec, EventRecord) else engine.feed(rec))
    anomalies = sorted((a for log in logs.values() for a in log.anomalies), key=lambda a: a.start)
    detected, used = match(incidents, anomalies)
    drops = [i for i, inc in enumerate(incidents) if inc.kind == "throughput_drop"]
    row = {"drops": len(drops), "found": sum(1 for i in drops if i in detected),
           "false_drops": sum(1 for j, a in enumerate(anomalies) if a.kind == "throughput_drop" and j not in used),
           "false_all": sum(1 for j in range(len(anomalies)) if j not in used)}
    return row, {(a.kind, a.gpu, round(a.start)) for a in anomalies}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--generator", choices=["tuning", "heldout"], default="tuning")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--hours", type=float, default=3.0)
    p.add_argument("--every", type=float, default=5.0, help="seconds of record time between exchanges")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args()
    make: Any = HeldoutFleet if args.generator == "heldout" else Fleet
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        fleet = make(nodes=args.nodes, hours=args.hours, seed=seed)
        recs = list(fleet.records())
        one, base = _run(recs, fleet.incidents, lambda n: "all", 0.0)
        alone, k_alone = _run(recs, fleet.incidents, lambda n: n, 0.0)
        ex, k_ex = _run(recs, fleet.incidents, lambda n: n, args.every)
        row = {"seed": seed, "one": one, "alone": {**alone, "differ": len(base ^ k_alone)},
               "exchange": {**ex, "differ": len(base ^ k_ex)}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"generator": args.generator, "every_s": args.every, "rows": rows},
                                              indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
