"""The faults of the table: one function per case, registered with :func:`case`.

A case gets a fresh :class:`~tests.support.faults.harness.Env` (its own database and broker),
starts what it needs, runs the fault, and calls ``env.fault_ended()`` when the fault is over
(that starts the recovery clock). The runner then stops the agents (SIGTERM: they flush),
waits for the collector to store what is left, and counts. To add a case, write a
function here with ``@case("name", "what the row says")``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.support.faults.harness import Env, garbage_messages
from tests.support.poll import WaitTimeout, wait_until

CaseFn = Callable[[Env], None]


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    run: CaseFn


CASES: dict[str, Case] = {}


def case(name: str, title: str) -> Callable[[CaseFn], CaseFn]:
    def register(fn: CaseFn) -> CaseFn:
        CASES[name] = Case(name, title, fn)
        return fn

    return register


def _flow(env: Env, seconds: float) -> None:
    """Normal flow for ``seconds`` (collectors that exit by themselves are restarted meanwhile)."""
    time.sleep(seconds)


def _standard(env: Env, *, durable: bool = False, collectors: int = 1, **agents: bool) -> None:
    env.start_broker(durable=durable)
    for _ in range(collectors):
        env.start_collector()
    env.start_agents(**agents)
    env.wait_stored()
    _flow(env, env.params.warmup_s)


@case("normal", "no fault")
def normal(env: Env) -> None:
    _standard(env)
    env.fault_started()
    env.fault_ended()
    _flow(env, env.params.after_s)


@case("broker_killed", "broker SIGKILLed, back after 30 s (durable storage)")
def broker_killed(env: Env) -> None:
    _standard(env, durable=True)
    assert env.broker is not None
    env.fault_started()
    env.broker.kill()
    time.sleep(env.params.outage_s)
    env.broker.start()
    env.fault_ended()
    # the agents retry with a backoff that doubles up to 30 s: let them find the broker again
    _flow(env, max(env.params.after_s, 35.0))
    env.note("recovery includes the agents' reconnect backoff (doubling from 0.5 s to 30 s)")


@case("collector_sigkill_x3", "collector SIGKILLed 3 times (1 s down each)")
def collector_sigkill(env: Env) -> None:
    _standard(env)
    collector = env.collectors[0]
    env.fault_started()
    for _ in range(3):
        collector.kill()
        time.sleep(1.0)
        collector.start()
        time.sleep(3.0)
    env.fault_ended()
    _flow(env, env.params.after_s)


def _pg_restarts(env: Env, times: int, down_s: float, between_s: float) -> None:
    _standard(env)
    env.fault_started()
    for i in range(times):
        env.shared.pg.stop("fast")
        time.sleep(down_s)
        env.shared.pg.start()
        if i < times - 1:
            time.sleep(between_s)
    env.fault_ended()
    _flow(env, env.params.after_s)


@case("postgres_restart", "PostgreSQL restarted once (5 s down)")
def postgres_restart(env: Env) -> None:
    _pg_restarts(env, 1, 5.0, 0.0)


@case("postgres_restart_x3", "PostgreSQL restarted 3 times in a row (3 s down, 2 s up)")
def postgres_restart_x3(env: Env) -> None:
    _pg_restarts(env, 3, 3.0, 2.0)


@case("agent_sigkill", "an agent SIGKILLed, restarted after 2 s (same spool)")
def agent_sigkill(env: Env) -> None:
    _standard(env)
    agent = env.agents[0]
    env.fault_started()
    agent.kill()
    killed_at = time.time()
    time.sleep(2.0)
    agent.start()
    env.fault_ended()
    _flow(env, env.params.after_s)
    env.note(f"the agent was killed at {killed_at:.3f}: what it had sampled but not yet handed to Kafka "
             "(its frame window, up to 1 s, and its send queue) died with it")


@case("garbage_frames", "garbage, truncated frames and a bad event injected")
def garbage_frames(env: Env) -> None:
    _standard(env)
    env.fault_started()
    env.inject(garbage_messages(env))
    env.fault_ended()
    _flow(env, env.params.after_s)


@case("message_5mib", "one 5 MiB message in the topic")
def message_5mib(env: Env) -> None:
    _standard(env)
    env.fault_started()
    env.inject([(os.urandom(5 << 20), [("type", b"frame")])])
    env.fault_ended()
    _flow(env, env.params.after_s)
    env.after_drain(lambda: env.note(
        f"dead letters cut to fit the 1 MiB dead-letter limit: "
        f"{env.metric('gpuwatch_collector_dead_letters_truncated_total'):.0f}"))


@case("rebalance_at_start", "2 collectors start on a backlog (rebalance after the first batch)")
def rebalance_at_start(env: Env) -> None:
    env.start_broker()
    env.start_agents()
    _flow(env, env.params.warmup_s + 6)  # a backlog, no collector yet
    env.fault_started()
    small = {"GPUWATCH_MAX_BATCH": "40"}  # many batches: the rebalance lands after the first
    first = env.start_collector(env=small)
    with contextlib.suppress(WaitTimeout):  # not in time: the counts at the end say what is missing
        wait_until(lambda: env.stored_count() > 0, timeout=60, what="the first rows stored")
    env.start_collector(env=small)
    env.fault_ended()
    _flow(env, env.params.after_s)
    if not first.alive:
        env.note("the first collector is not running")


@case("collector_restart_reread", "collector restarted (SIGTERM) re-reads from the last keyframe")
def collector_restart_reread(env: Env) -> None:
    _standard(env)
    env.inject(garbage_messages(env))
    _flow(env, 3.0)
    env.fault_started()
    collector = env.collectors[0]
    collector.stop()
    collector.start()
    env.fault_ended()
    _flow(env, env.params.after_s)
    env.note("garbage injected before the restart: each piece must be dead-lettered once")


def _uuid_conflict(env: Env, headers: bool) -> None:
    env.start_broker()
    env.start_collector()
    env.fault_started()
    for node in ("node-a", "node-b"):  # one seed: the same GPU UUIDs on both nodes
        env.start_agent(node, seed=7, older=not headers)
    _flow(env, env.params.warmup_s + env.params.after_s)
    env.fault_ended()

    def check() -> None:
        events = env.query("SELECT count(DISTINCT gpu) AS n FROM events WHERE kind = 'gpu_uuid_conflict'")[0][0]["n"]
        env.note(f"gpu_uuid_conflict events for {events} of {env.params.gpus} shared UUIDs; collector metric "
                 f"gpuwatch_collector_gpu_uuid_conflicts_total = "
                 f"{env.metric('gpuwatch_collector_gpu_uuid_conflicts_total'):.0f}; rows stored with the wrong "
                 "node are counted under 'lost' (and would show as rows nobody produced)")

    env.after_drain(check)


@case("uuid_conflict", "two agents (nodes) with the same GPU UUIDs, older agents (no node/instance headers)")
def uuid_conflict(env: Env) -> None:
    _uuid_conflict(env, headers=False)


@case("uuid_conflict_headers", "two agents (nodes) with the same GPU UUIDs, agents as shipped (node/instance headers)")
def uuid_conflict_headers(env: Env) -> None:
    _uuid_conflict(env, headers=True)


def _restart_empty(env: Env, answer: bool) -> None:
    _standard(env, older=not answer)
    assert env.broker is not None
    collector = env.collectors[0]
    env.fault_started()
    collector.stop()  # what the broker acknowledged meanwhile is read by nobody before it is lost
    time.sleep(4.0)
    env.broker.kill()
    env.broker.start()
    env.create_topics()
    collector.start()
    env.fault_ended()
    _flow(env, env.params.after_s + 10)
    env.note("the collector was stopped 4 s before the broker died, so the frames the broker acknowledged in "
             "those 4 s were lost with it (the broker lost acknowledged data)")
    env.after_drain(lambda: env.note(
        f"collector: partition log resets seen {env.metric('gpuwatch_collector_partition_log_resets_total'):.0f}, "
        f"deltas without base {env.metric('gpuwatch_collector_frames_without_base_total'):.0f}, "
        f"keyframe requests {env.metric('gpuwatch_collector_keyframe_requests_total'):.0f}"))


@case("broker_restarted_empty",
      "broker restarted empty (in-memory storage, topics recreated), older agents (no keyframe requests)")
def broker_restarted_empty(env: Env) -> None:
    _restart_empty(env, answer=False)


@case("broker_restarted_empty_kfreq",
      "broker restarted empty, agents as shipped (answer keyframe requests, keyframe after a reconnect)")
def broker_restarted_empty_kfreq(env: Env) -> None:
    _restart_empty(env, answer=True)


@case("late_data", "an agent whose samples are 10 days late, next to a current one")
def late_data(env: Env) -> None:
    env.start_broker()
    env.start_collector()
    env.start_agent("node-now")
    env.start_agent("node-late", clock_offset=-10 * 86400)
    env.fault_started()
    _flow(env, env.params.warmup_s + env.params.after_s)
    env.fault_ended()

    def check() -> None:
        time.sleep(5)  # two maintenance rounds (GPUWATCH_MAINTENANCE_INTERVAL=2)
        raw, m1, h1 = (r[0]["n"] for r in env.query(
            "SELECT count(*) AS n FROM gpu_samples WHERE ts < now() - interval '5 days'",
            "SELECT coalesce(sum(samples), 0) AS n FROM gpu_samples_1m WHERE bucket < now() - interval '5 days'",
            "SELECT coalesce(sum(samples), 0) AS n FROM gpu_samples_1h WHERE bucket < now() - interval '5 days'"))
        env.note(f"late samples: {raw} raw, {m1} in the 1-minute rollup, {h1} in the 1-hour rollup")

    env.after_drain(check)


@case("fetch_wait_50ms", "durable broker, fetch_max_wait_ms 50 (where tansu stalled a partition)")
def fetch_wait_50ms(env: Env) -> None:
    env.start_broker(durable=True)
    env.start_agents()
    _flow(env, env.params.warmup_s)  # a backlog on object storage
    env.fault_started()
    env.start_collector(env={"GPUWATCH_FETCH_MAX_WAIT_MS": "50", "GPUWATCH_STALL_AFTER_S": "10"})
    _flow(env, env.params.after_s + 10)
    env.fault_ended()
    env.after_drain(lambda: env.note(
        f"partition stalls detected: {env.metric('gpuwatch_collector_partition_stalls_total'):.0f}"))
