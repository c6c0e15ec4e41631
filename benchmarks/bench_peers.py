"""CPU a membership change costs in a large service's peer samples (collector/detect/peers.py).

A replica of an N-replica service that restarts leaves and joins the group; then every member's
next record asks for its sample again. Run from the repository root::

    python benchmarks/bench_peers.py                     # this tree, 5,000 replicas on 625 nodes
    python benchmarks/bench_peers.py --tree /tmp/old     # the same on another checkout (a baseline)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]), help="the checkout to import")
    p.add_argument("--replicas", type=int, default=5000)
    p.add_argument("--per-node", type=int, default=8)
    p.add_argument("--changes", type=int, default=3)
    args = p.parse_args()
    if args.replicas < 2 or args.per_node < 1 or args.changes < 1:
        p.error("--replicas must be 2 or more, --per-node and --changes 1 or more")
    sys.path.insert(0, args.tree)
    from collector.detect.peers import Groups
    from collector.detect.state import GpuState

    members = [GpuState(f"n{i // args.per_node}", f"GPU-{i:08d}") for i in range(args.replicas)]
    groups = Groups()
    for st in members:
        groups.add("ns/svc", st)
    for st in members:
        list(groups.candidates("ns/svc", st))
    began = time.process_time()
    for k in range(args.changes):
        groups.remove("ns/svc", members[k].gpu)
        groups.add("ns/svc", members[k])
        for st in members:
            list(groups.candidates("ns/svc", st))
    cpu = (time.process_time() - began) / args.changes
    print(json.dumps({"tree": args.tree, "replicas": args.replicas, "per_node": args.per_node,
                      "cpu_s_per_membership_change": round(cpu, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
