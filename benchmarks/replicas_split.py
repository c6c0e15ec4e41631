"""What N collector replicas find against one, replayed: the fleet's records split as Kafka would split them.

Why: a replica reads whole partitions and judges only what they hold. This replays a generated
fleet (tests/support/incidents) through one detection engine, and through ``--replicas``
engines, each fed the records of the partitions a round-robin assignment of ``--partitions``
would give it (the key: the node, as the agent sends, or ``--key gpu``, as agents did before
issue 16), and prints the anomalies (kind, GPU, start to the second) found by one side only.

    python benchmarks/replicas_split.py --seeds 1,2,13,19,22,23 --hours 1
    python benchmarks/replicas_split.py --seeds 23 --hours 0.75 --key gpu
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.batching import PartitionOf
from collector.detect import Anomaly, AnomalyLog, DetectionEngine
from telemetry.records import EventRecord, GpuRecord
from telemetry.wire import partition_key
from tests.support.incidents.generate import Fleet


def _run(records: Iterable[GpuRecord | EventRecord]) -> list[Anomaly]:
    engine, log = DetectionEngine(), AnomalyLog()
    for r in records:
        log.add(engine.feed_event(r) if isinstance(r, EventRecord) else engine.feed(r))
    return log.anomalies


def compare(seed: int, nodes: int, hours: float, partitions: int, replicas: int, key: str) -> dict[str, object]:
    records = list(Fleet(nodes=nodes, hours=hours, seed=seed).records())
    part = PartitionOf()
    shares: list[list[GpuRecord | EventRecord]] = [[] for _ in range(replicas)]
    for r in records:
        k = partition_key(r.node) if key == "node" else r.gpu.encode()
        shares[part(k, list(range(partitions))) % replicas].append(r)  # round robin: partition p to p % N
    one = Counter((a.kind, a.gpu, round(a.start)) for a in _run(records))
    many = Counter((a.kind, a.gpu, round(a.start)) for share in shares for a in _run(share))
    return {"seed": seed, "one": sum(one.values()), "many": sum(many.values()),
            "only_one": dict(Counter(k for k, _, _ in (one - many).elements())),
            "only_many": dict(Counter(k for k, _, _ in (many - one).elements()))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="23")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--key", choices=("node", "gpu"), default="node")
    args = ap.parse_args()
    for seed in (int(s) for s in args.seeds.split(",")):
        print(compare(seed, args.nodes, args.hours, args.partitions, args.replicas, args.key), flush=True)


if __name__ == "__main__":
    main()
