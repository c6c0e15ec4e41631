"""``gpuwatch agent`` exactly as shipped, plus a side export of every sample it took.

The fault harness counts what the agents produced against what the database stored, so
each agent process writes one line per sampled record (``gpu<TAB>node<TAB>ts``) to
``--export``, line-buffered (a SIGKILLed agent loses only what it had not sampled yet).
Three harness-only knobs, none of which changes the agent's code path:

* ``--seed S``: the simulated fleet's seed (its GPU UUIDs). ``gpuwatch agent --simulate N``
  gives every process the same UUIDs; the harness gives each node its own unless a case
  wants two nodes to share them;
* ``--identity-headers``: pass ``node`` and a per-process ``instance`` to the agent's Framer
  (the Kafka headers the collector keys streams by), as the agent-side change of issue 10 does;
* ``--clock-offset S``: the agent's clock runs S seconds off (late data);
* ``--answer-keyframe-requests TOPIC``: a stand-in for the agent half of issue 10 item 7
  (which another change brings): read the collector's keyframe requests from the control
  topic and make the next frames keyframes (``Framer.resync``).

    python -m benchmarks.faults.agent_proc --export F [--seed S] [--identity-headers] \\
        [--clock-offset S] -- agent --simulate 4 --kafka-bootstrap ... --node-name n0
"""

from __future__ import annotations

import argparse
import functools
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str]) -> int:
    split = argv.index("--")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--export", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--identity-headers", action="store_true")
    ap.add_argument("--clock-offset", type=float, default=0.0)
    ap.add_argument("--answer-keyframe-requests", metavar="TOPIC")
    own = ap.parse_args(argv[:split])
    rest = argv[split + 1:]

    import agent.driver.simulated as simulated
    import agent.framing as framing
    import agent.runtime as runtime
    import gpuwatch.cmd_agent as cmd_agent
    from gpuwatch.cli import main as gpuwatch_main

    simulated.SimulatedFleet.__init__ = functools.partialmethod(  # type: ignore[method-assign]
        simulated.SimulatedFleet.__init__, seed=own.seed)
    if own.clock_offset:
        offset = own.clock_offset
        runtime.Agent.__init__ = functools.partialmethod(  # type: ignore[method-assign]
            runtime.Agent.__init__, clock=lambda: time.time() + offset)
    node = rest[rest.index("--node-name") + 1] if "--node-name" in rest else ""
    instance = uuid.uuid4().hex[:12]
    if own.identity_headers:
        framing.Framer.__init__ = functools.partialmethod(  # type: ignore[method-assign]
            framing.Framer.__init__, node=node, instance=instance)
    if own.answer_keyframe_requests:
        bootstrap = rest[rest.index("--kafka-bootstrap") + 1]
        framers: list[Any] = []
        init = framing.Framer.__init__

        def capture(self: Any, *a: Any, **kw: Any) -> None:
            init(self, *a, **kw)
            framers.append(self)

        framing.Framer.__init__ = capture  # type: ignore[method-assign]
        threading.Thread(target=_answer, args=(bootstrap, own.answer_keyframe_requests, node, instance, framers),
                         name="keyframe-requests", daemon=True).start()
    export = own.export.open("a", buffering=1)
    build = cmd_agent.build_agent

    def build_agent(settings: Any) -> Any:
        agent = build(settings)
        agent.record_sinks.append(lambda r: export.write(f"{r.gpu}\t{r.node}\t{r.ts!r}\n"))
        return agent

    cmd_agent.build_agent = build_agent  # type: ignore[assignment]
    try:
        return int(gpuwatch_main(rest) or 0)
    finally:
        export.close()


def _answer(bootstrap: str, topic: str, node: str, instance: str, framers: list[Any]) -> None:
    """Read keyframe requests from ``topic`` (from its end) and resync the Framer on a match."""
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaError

    from telemetry.control import ControlError, KeyframeRequest

    async def loop() -> None:
        while True:
            consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                        auto_offset_reset="latest")
            try:
                await consumer.start()
                async for msg in consumer:
                    try:
                        request = KeyframeRequest.decode(msg.value or b"")
                    except ControlError:
                        continue
                    if request.matches(node, instance):
                        for framer in framers:
                            framer.resync()
            except KafkaError:
                await asyncio.sleep(1.0)
            finally:
                await consumer.stop()

    asyncio.run(loop())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
