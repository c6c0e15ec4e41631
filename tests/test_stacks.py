"""The composition root: the agent's and the collector's stacks, joined as ``gpuwatch up`` joins them.

What is checked is what the commands rely on: the stacks are built from settings and their
collaborators alone, a clean shutdown stores everything the agent sampled (the agent's stack
stops first and its last frames are drained into the database by the collector's), and a
shutdown stops every part once, the store last, whatever order the parts were started in.
"""

from __future__ import annotations

import asyncio

from agent.cpuclock import ThreadCpu
from agent.settings import AgentSettings
from collector.store import Store
from gpuwatch.agent_stack import AgentStack
from gpuwatch.collector_stack import CollectorStack
from gpuwatch.inprocess import InProcessReplies, InProcessTransport


def _settings() -> AgentSettings:
    return AgentSettings(simulate=2, node_name="stack-node", attribution=False, metrics_port=0,
                         metrics_host="127.0.0.1", interval_floor=0.25, busy_interval=0.25, probe_socket="")


async def _count(dsn: str) -> int:
    store = await Store.open(dsn)
    try:
        async with store.pool.acquire() as conn:
            return int(await conn.fetchval("SELECT count(*) FROM gpu_samples WHERE node = 'stack-node'"))
    finally:
        await store.close()


def test_up_is_the_two_stacks_joined_and_a_clean_stop_stores_every_sample(pg_db: str) -> None:
    async def run() -> tuple[int, int, dict[str, int]]:
        store = await Store.open(pg_db)
        transport = InProcessTransport(asyncio.get_running_loop())
        agent = AgentStack(_settings(), transport, cpu=ThreadCpu(), instance="stack-test")
        collector = CollectorStack(store, lambda _ingestor: transport,
                                   InProcessReplies([agent.framer], [agent.profiler]))
        agent.open()
        agent.start()
        await collector.start()
        await asyncio.sleep(2.0)
        assert agent.flush(1.0)
        await collector.flush(5.0)
        await asyncio.to_thread(agent.shutdown, 10.0)  # the sampler, then the framer's last frames
        sampled = agent.framer.stats().records_total
        await collector.shutdown(10.0)  # the queue drained into the database, then the store closed
        assert store.pool.is_closing()
        return sampled, agent.agent.samples_total, dict(collector.ingestor.counters)

    sampled, samples, counters = asyncio.run(run())
    assert sampled == samples > 0
    assert counters["records"] == sampled and counters.get("dead_lettered", 0) == 0
    assert asyncio.run(_count(pg_db)) == sampled


def test_a_collector_stopped_before_it_started_closes_what_it_was_built_with(pg_db: str) -> None:
    """A signal while the source still waits for its transport (Kafka not up yet): the start ends,
    and the shutdown closes detection and the store without a consume loop to drain."""
    async def run() -> bool:
        store = await Store.open(pg_db)
        transport = InProcessTransport(asyncio.get_running_loop())
        collector = CollectorStack(store, lambda _ingestor: transport, InProcessReplies([]))
        collector.stop.set()
        await collector.start()
        assert collector.runner is None and collector.failure() is None
        await collector.shutdown(5.0)
        return bool(store.pool.is_closing())

    assert asyncio.run(run())
