"""The fault table's important cases, small and fast, as real processes (issue 10).

``gpuwatch collector`` and ``gpuwatch agent --simulate`` processes on a real tansu broker
and the session's PostgreSQL, through the fault harness (``tests/support/faults``); every
sample the agents took is counted against every row stored. Several faults share one run
to keep the suite short (each collector start costs tansu's 5 s group join):

* bad input and a database that goes away: a 5 MiB message, garbage, PostgreSQL restarted
  three times in a row, with two nodes reporting the same GPU UUIDs (agents sending
  node/instance headers), then a broker that comes back empty while agents answer
  keyframe requests;
* rebalances: a second collector joins a backlog with garbage in it, then leaves, and the
  first rewinds its partitions to their keyframes: nothing valid is dead-lettered and
  nothing twice.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.faults.harness import Env, Params, Shared, garbage_messages

SMALL = Params(agents=2, gpus=2, interval=0.5, warmup_s=2.0, after_s=3.0, drain_timeout_s=60.0, partitions=3)


@pytest.fixture
def shared(pg_server: Any, tmp_path: Path, _moto_session: Callable[[], Any]) -> Iterator[Shared]:
    tmp_path.chmod(0o755)
    s = Shared(tmp_path, pg=pg_server, moto=_moto_session)
    try:
        yield s
    finally:
        s.close()


def _env(shared: Shared, name: str) -> Iterator[Env]:
    env = Env(shared, name, SMALL)
    try:
        yield env
    finally:
        env.close()


def _log(env: Env) -> str:
    return "\n".join(c.text()[-3000:] for c in env.collectors)


def test_bad_input_database_restarts_and_an_empty_broker(shared: Shared) -> None:
    for env in _env(shared, "bad_input"):
        broker = env.start_broker()
        collector = env.start_collector()
        for node in ("node-a", "node-b"):  # the same GPU UUIDs on two nodes, agents with identity headers
            env.start_agent(node, seed=7)  # agents as shipped: identity headers, keyframe requests answered
        env.wait_stored()
        time.sleep(SMALL.warmup_s)
        env.inject([(os.urandom(5 << 20), [("type", b"frame")]), *garbage_messages(env)])
        for _ in range(3):
            shared.pg.stop("fast")
            time.sleep(1.0)
            shared.pg.start()
            time.sleep(0.5)
        env.wait_caught_up()
        dead_before = env.dead_letters()[:2]
        exits = collector.exits
        # a broker that comes back empty, while the collector was away: what it acknowledged
        # meanwhile is lost with it, and the agents' next deltas have no base
        lost_from = time.time() - 3.0  # caught up to 2 s ago; a frame waits up to 1 s in the agent
        collector.stop()
        time.sleep(1.0)
        broker.kill()
        broker.start()
        env.create_topics()
        back = time.time()
        collector.start()
        env.fault_started()
        env.fault_ended()
        time.sleep(10.0)
        env.stop_agents()
        # what the broker lost never comes, so this ends on quiet; but under a loaded CI machine the collector's
        # last batch can take more than 5 s after the agents stopped (one clean-clone run read the final
        # second, 70 s after the broker came back, as lost): wait out 15 s of quiet
        env.drain(quiet_s=15)
        counts = env.count()
        conflicts = env.query("SELECT count(DISTINCT gpu) AS n FROM events WHERE kind = 'gpu_uuid_conflict'")[0]
        assert counts.produced > 50
        assert (counts.extra, counts.duplicates) == (0, 0), (counts, _log(env))
        assert dead_before == (env.injected, env.injected), (env.valid_dead, _log(env))
        assert exits == 0, _log(env)
        assert conflicts[0]["n"] == SMALL.gpus
        # lost: only what the broker lost, and the deltas until the agents' keyframes came
        late = sorted({round(us / 1e6 - back) for _g, _n, us in counts.lost_keys})
        assert all(lost_from <= us / 1e6 <= back + 15 for _g, _n, us in counts.lost_keys), (
            f"lost at {late} s after the broker was back ({lost_from - back:.1f} s: it died)", env.valid_dead,
            _log(env))
        assert env.metric("gpuwatch_collector_keyframe_requests_total") > 0


def test_rebalances_and_a_restart_dead_letter_nothing_valid(shared: Shared) -> None:
    for env in _env(shared, "rebalance"):
        env.start_broker()
        env.start_agents()
        time.sleep(3.0)  # a backlog before any collector runs
        env.inject(garbage_messages(env))
        small = {"GPUWATCH_MAX_BATCH": "20"}
        first = env.start_collector(env=small)
        env.wait_stored()
        second = env.start_collector(env=small)  # joins after the first batches: a rebalance
        time.sleep(6.0)
        second.stop()  # its partitions go back to the first, which rewinds them to their keyframes
        time.sleep(6.0)
        env.stop_agents()
        env.drain(quiet_s=15)
        counts = env.count()
        assert (counts.lost, counts.extra, counts.duplicates) == (0, 0, 0), (counts, _log(env))
        assert counts.dead_lettered == counts.dead_injected == env.injected, (env.valid_dead, _log(env))
        assert first.exits == 0
