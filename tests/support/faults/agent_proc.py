"""``gpuwatch agent`` exactly as shipped, plus a side export of every sample it took.

The fault harness counts what the agents produced against what the database stored, so
each agent process writes one line per sampled record (``gpu<TAB>node<TAB>ts``) to
``--export``, line-buffered (a SIGKILLed agent loses only what it had not sampled yet).
Three harness-only knobs, none of which changes the agent's code path:

* ``--seed S``: the simulated fleet's seed (its GPU UUIDs). ``gpuwatch agent --simulate N``
  seeds them by the node's name; the harness gives each node its own seed unless a case
  wants two nodes to share UUIDs;
* ``--older-agent``: the agent as it was before issue 10 (no ``node``/``instance`` headers,
  keyframe requests on the control topic not read), for the cases that show what the
  collector does with agents not yet upgraded;
* ``--clock-offset S``: the agent's clock runs S seconds off (late data).

    python -m tests.support.faults.agent_proc --export F [--seed S] [--older-agent] \\
        [--clock-offset S] -- agent --simulate 4 --kafka-bootstrap ... --node-name n0
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.runtime import Agent, RecordSink
    from telemetry.records import GpuRecord

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str]) -> int:
    split = argv.index("--")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--export", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--older-agent", action="store_true")
    ap.add_argument("--clock-offset", type=float, default=0.0)
    own = ap.parse_args(argv[:split])
    rest = argv[split + 1:]

    import agent.driver.simulated as simulated
    import agent.framing as framing
    import agent.runtime as runtime
    import gpuwatch.agent_stack as agent_stack
    from gpuwatch.cli import main as gpuwatch_main

    fleet_init = simulated.SimulatedFleet.__init__

    def seeded(self: Any, *args: Any, **kwargs: Any) -> None:  # the harness's seed wins over the node's
        kwargs["seed"] = own.seed
        fleet_init(self, *args, **kwargs)

    simulated.SimulatedFleet.__init__ = seeded  # type: ignore[method-assign]
    if own.clock_offset:
        offset = own.clock_offset
        runtime.Agent.__init__ = functools.partialmethod(  # type: ignore[method-assign]
            runtime.Agent.__init__, clock=lambda: time.time() + offset)
    if own.older_agent:
        import agent.control as control

        framing.Framer.__init__ = functools.partialmethod(  # type: ignore[method-assign]
            framing.Framer.__init__, node="", instance="")
        control.ControlListener.start = lambda self: None  # type: ignore[method-assign]
    export = own.export.open("a", buffering=1)
    build = agent_stack.build_agent

    def build_agent(settings: Any, *, record_sinks: Sequence[RecordSink] = (), **kwargs: Any) -> Agent:
        def exported(r: GpuRecord) -> None:
            export.write(f"{r.gpu}\t{r.node}\t{r.ts!r}\n")

        return build(settings, record_sinks=(*record_sinks, exported), **kwargs)

    agent_stack.build_agent = build_agent
    try:
        return int(gpuwatch_main(rest) or 0)
    finally:
        export.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
