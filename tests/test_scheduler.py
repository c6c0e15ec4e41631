"""The adaptive, cost-aware schedule, on fake time and a fake CPU clock (no sleeps)."""

from __future__ import annotations

import time

from agent.driver.simulated import SimulatedFleet
from agent.runtime import Agent, ScheduleConfig
from agent.scheduler import AdaptiveInterval, CpuBudget, DueQueue, slow_periods, volatility


class FakeClocks:
    """Wall time and CPU time that move only when told; each sample costs ``cost`` CPU seconds."""

    def __init__(self, cost: float = 0.0002) -> None:
        self.now = 1_000.0
        self.cpu = 0.0
        self.cost = cost
        self._in_sample = False

    def wall(self) -> float:
        return self.now

    def thread_cpu(self) -> float:
        # called before and after each sample: charge the sample's cost on the second call
        if self._in_sample:
            self.cpu += self.cost
        self._in_sample = not self._in_sample
        return self.cpu

    def process_cpu(self) -> float:
        return self.cpu


def _agent(n: int, clocks: FakeClocks, profiles: list[str], **cfg: float) -> tuple[Agent, SimulatedFleet]:
    fleet = SimulatedFleet(n, clock=clocks.wall, profiles=profiles, start=0.0)  # type: ignore[arg-type]
    agent = Agent(
        fleet, "n", ScheduleConfig(**cfg), clock=clocks.wall, cpu_clock=clocks.thread_cpu,
        process_cpu_clock=clocks.process_cpu, calibrate_calls=False,
    )
    agent.open()
    return agent, fleet


def _run(agent: Agent, clocks: FakeClocks, seconds: float) -> None:
    end = clocks.now + seconds
    while clocks.now < end:
        next_at = agent.step(clocks.now)
        assert next_at is not None
        clocks.now = max(next_at, clocks.now + 1e-3)


def test_interval_bounds_and_directions() -> None:
    iv = AdaptiveInterval(floor=0.25, ceiling=10.0, busy=1.0)
    for _ in range(20):
        iv.update(busy=False, volatility=0.0, processes_changed=False)
    assert iv.value == 10.0  # idle and stable: stretches to the ceiling, no further
    assert iv.update(busy=False, volatility=0.0, processes_changed=True) == 0.25  # processes changed
    for _ in range(10):
        iv.update(busy=True, volatility=0.01, processes_changed=False)
    assert iv.value == 1.0  # relaxes back to the busy interval
    assert iv.update(busy=True, volatility=0.5, processes_changed=False) == 0.25  # a jump


def test_volatility_sees_jumps_and_ignores_noise() -> None:
    base = {"DCGM_FI_DEV_GPU_UTIL": 50, "DCGM_FI_DEV_POWER_USAGE": 400.0, "DCGM_FI_DEV_POWER_MGMT_LIMIT": 700.0}
    assert volatility(base, {**base, "DCGM_FI_DEV_POWER_USAGE": 403.0}) < 0.05
    assert volatility(base, {**base, "DCGM_FI_DEV_GPU_UTIL": 95}) >= 0.15
    assert volatility(None, base) == 1.0


def test_idle_gpus_sample_slowly_and_busy_ones_fast() -> None:
    clocks = FakeClocks()
    agent, _ = _agent(2, clocks, ["idle", "training"])
    _run(agent, clocks, 120.0)
    idle, busy = (agent.state[t].samples for t in agent.targets)
    assert idle <= 20  # ~10 s apart once stable
    assert busy >= 100  # ~1 s apart while training
    intervals = [agent.interval(k) for k in agent.targets]
    assert intervals[0] == 10.0 and 0.25 <= intervals[1] <= 1.0


def test_process_change_drops_to_the_floor() -> None:
    clocks = FakeClocks()
    agent, _ = _agent(1, clocks, ["batch"])
    # find a job boundary of the batch profile: the first time the process set changes
    seen: list[tuple[float, float]] = []
    end = clocks.now + 2000.0
    while clocks.now < end:
        key = next(iter(agent.targets))
        before = agent.state[key].prev_pids
        next_at = agent.step(clocks.now)
        after = agent.state[key].prev_pids
        if before != after and agent.state[key].samples > 1:
            seen.append((clocks.now, agent.interval(key)))
        assert next_at is not None
        clocks.now = next_at
    assert seen, "the batch profile should start or end a job within 2000 s"
    assert all(interval == 0.25 for _, interval in seen)


def test_cpu_budget_is_never_exceeded() -> None:
    """64 busy GPUs at a 250 ms floor would want 256 samples/s; at 0.2 ms each that is 5% of a core."""
    clocks = FakeClocks(cost=0.0002)
    agent, _ = _agent(64, clocks, ["serving"], floor=0.25, busy=0.25, cpu_budget=0.01)
    _run(agent, clocks, 30.0)  # warm-up: the cost estimate settles
    cpu0, t0 = clocks.cpu, clocks.now
    _run(agent, clocks, 120.0)
    usage = (clocks.cpu - cpu0) / (clocks.now - t0)
    assert usage <= 0.01, usage
    assert usage >= 0.005  # and the budget is used, not wasted


def test_feedback_stretches_when_the_process_spends_more_than_sampling() -> None:
    now = [0.0]
    cpu = [0.0]
    budget = CpuBudget(0.01, window_s=10.0, cpu_clock=lambda: cpu[0], wall_clock=lambda: now[0])
    for _ in range(40):  # something else in the process burns 3% of a core
        now[0] += 1.0
        cpu[0] += 0.03
        budget.observe()
    assert budget.stretch > 2.0
    for _ in range(200):
        now[0] += 1.0
        budget.observe()
    assert budget.stretch == 1.0


def test_slow_calls_get_their_own_period() -> None:
    periods = slow_periods({"energy": 0.004, "power": 2e-6, "memory": 1e-5}, threshold_s=0.001, duty=0.001)
    assert periods == {"energy": 4.0}


def test_slow_source_is_read_less_often() -> None:
    clocks = FakeClocks()
    agent, _ = _agent(1, clocks, ["training"])
    agent.calibration = {"energy": 0.004}  # as measured on an H200
    agent.slow_period = slow_periods(agent.calibration, 0.001, 0.001)
    assert agent.sampler is not None
    agent.sampler.slow = frozenset(agent.slow_period)
    agent._recost_at = float("inf")  # live re-costing would see the simulator's fast call
    records = []
    agent.record_sinks.append(records.append)
    _run(agent, clocks, 60.0)
    with_energy = [r for r in records if "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in r.metrics]
    assert len(records) >= 50
    assert 10 <= len(with_energy) <= 20  # every 4 s


def test_due_queue_orders_and_supersedes() -> None:
    q = DueQueue()
    q.put("a", 5.0)
    q.put("b", 3.0)
    q.put("a", 1.0)  # supersedes a@5
    assert q.pop_due(2.0) == ["a"]
    assert q.peek() == 3.0
    assert q.pop_due(10.0) == ["b"]
    assert q.peek() is None


class SlowEnergyFleet(SimulatedFleet):
    """A driver whose energy counter really takes 1.5 ms, like the H200's took 2-4 ms."""

    def energy(self, h: object) -> int:
        time.sleep(0.0015)
        return super().energy(h)


def test_calls_that_turn_slow_at_run_time_get_a_slow_period() -> None:
    clocks = FakeClocks()
    fleet = SlowEnergyFleet(1, clock=clocks.wall, profiles=["training"], start=0.0)
    agent = Agent(fleet, "n", ScheduleConfig(), clock=clocks.wall, cpu_clock=clocks.thread_cpu,
                  process_cpu_clock=clocks.process_cpu, calibrate_calls=False)
    agent.open()
    assert agent.slow_period == {}  # nothing measured yet
    _run(agent, clocks, 35.0)  # past the first re-costing window
    assert set(agent.slow_period) == {"energy"}
    assert agent.slow_period["energy"] >= 1.5
