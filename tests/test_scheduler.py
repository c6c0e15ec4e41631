"""The adaptive, cost-aware schedule, on fake time and a fake CPU clock (no sleeps); the CPU ledger of the
agent's threads on their real CPU clocks."""

from __future__ import annotations

import itertools
import logging
import threading
import time

import pytest

from agent.cpuclock import HTTP, SAMPLING, TRANSPORT, ThreadCpu
from agent.driver.simulated import SimulatedFleet
from agent.exposition import Exposition
from agent.runtime import Agent, RecordSink, ScheduleConfig
from agent.scheduler import AdaptiveInterval, CpuBudget, CpuPacer, DueQueue, is_busy, slow_periods, volatility
from telemetry.keys import GPU_UTIL, SM_ACTIVE
from telemetry.records import GpuRecord


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


def _agent(n: int, clocks: FakeClocks, profiles: list[str], sink: RecordSink | None = None,
           **cfg: float) -> tuple[Agent, SimulatedFleet]:
    fleet = SimulatedFleet(n, clock=clocks.wall, profiles=profiles, start=0.0)  # type: ignore[arg-type]
    agent = Agent(
        fleet, "n", ScheduleConfig(**cfg), clock=clocks.wall, cpu_clock=clocks.thread_cpu,
        budget_cpu_clock=clocks.process_cpu, calibrate_calls=False, record_sinks=() if sink is None else (sink,),
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


def test_a_launch_bound_gpu_is_at_work() -> None:
    """The real H200 trace l: 600 tiny kernels per sync read 19-20% utilisation and SM activity
    0.0002; sampled as idle (every 10 s) its minute of launch-bound work was too few samples to be
    reported. Kernels resident are work, whatever the SMs do; an idle GPU reads neither."""
    assert is_busy({SM_ACTIVE: 0.0002, GPU_UTIL: 20.0})
    assert is_busy({SM_ACTIVE: 0.6, GPU_UTIL: 70.0}) and is_busy({GPU_UTIL: 30.0})
    assert not is_busy({SM_ACTIVE: 0.0, GPU_UTIL: 0.0}) and not is_busy({SM_ACTIVE: 0.01, GPU_UTIL: 2.0})


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
    records: list[GpuRecord] = []
    agent, _ = _agent(1, clocks, ["training"], records.append)
    agent.calibration = {"energy": 0.004}  # as measured on an H200
    agent.slow_period = slow_periods(agent.calibration, 0.001, 0.001)
    assert agent.sampler is not None
    agent.sampler.slow = frozenset(agent.slow_period)
    agent._recost_at = float("inf")  # live re-costing would see the simulator's fast call
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
                  budget_cpu_clock=clocks.process_cpu, calibrate_calls=False)
    agent.open()
    assert agent.slow_period == {}  # nothing measured yet
    _run(agent, clocks, 35.0)  # past the first re-costing window
    assert set(agent.slow_period) == {"energy"}
    assert agent.slow_period["energy"] >= 1.5


def test_the_budget_never_thins_sampling_below_the_ceiling(caplog: pytest.LogCaptureFixture) -> None:
    """64 GPUs at 5 ms a sample: even at the 10 s ceiling that is 3.2% of a core, over the 1% budget.
    Every GPU is still sampled every 10 s; the budget's lengthening is counted and logged once."""
    clocks = FakeClocks(cost=0.005)
    seen: dict[str, list[float]] = {}
    agent, _ = _agent(64, clocks, ["serving"], lambda r: seen.setdefault(r.gpu, []).append(r.ts),
                      floor=0.25, busy=1.0, ceiling=10.0, cpu_budget=0.01)
    with caplog.at_level(logging.WARNING, logger="agent.runtime"):
        _run(agent, clocks, 300.0)
    assert len(seen) == 64
    gaps = [b - a for ts in seen.values() for a, b in itertools.pairwise(ts)]
    assert max(gaps) <= 10.0 + 1e-6, max(gaps)
    assert all(agent.interval(k) <= 10.0 for k in agent.targets)
    assert agent.budget_stretched_total > 0 and agent.budget_capped_total > 0
    budget_lines = [r for r in caplog.records if "CPU budget" in r.getMessage()]
    assert len(budget_lines) <= 11, "rate-limited: one line per 30 s at most"
    assert "ceiling" in budget_lines[0].getMessage()
    text = Exposition(agent).render().decode()
    assert "gpuwatch_agent_budget_capped_samples_total" in text


def test_a_budget_stretch_is_shown_and_clears(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    cpu = [0.0]
    budget = CpuBudget(0.01, window_s=10.0, cpu_clock=lambda: cpu[0], wall_clock=lambda: now[0])
    clocks = FakeClocks()
    agent, _ = _agent(2, clocks, ["serving"], ceiling=10.0)
    agent.budget = budget
    with caplog.at_level(logging.INFO, logger="agent.runtime"):
        for _ in range(30):  # the sampling threads burn 3% of a core
            now[0] += 1.0
            cpu[0] += 0.03
            clocks.now = now[0] + 1000.0
            agent.step(clocks.now)
        assert budget.stretch > 1.0 and agent.budget_stretched_total > 0
        for _ in range(400):
            now[0] += 1.0
            clocks.now = now[0] + 1000.0
            agent.step(clocks.now)
    assert budget.stretch == 1.0
    messages = [r.getMessage() for r in caplog.records]
    assert any("CPU budget: the agent's sampling threads use" in m for m in messages)
    assert any("back to what the GPUs need" in m for m in messages)


def _burn(cpu_seconds: float) -> None:
    end = time.thread_time() + cpu_seconds
    while time.thread_time() < end:
        pass


def test_the_budget_counts_the_agents_threads_not_the_process() -> None:
    """The budget reads the agent's sampling account (:mod:`agent.cpuclock`): another thread of the
    process burning CPU (an API in ``gpuwatch up``), or a sink encoding frames on the sampling thread
    (the transport's work), does not stretch sampling. Measured on the threads' real CPU clocks."""
    wall = [1000.0]
    fleet = SimulatedFleet(4, clock=lambda: wall[0], profiles=["serving"], start=0.0)
    cpu = ThreadCpu()
    agent = Agent(fleet, "n", ScheduleConfig(cpu_budget=0.01), clock=lambda: wall[0], calibrate_calls=False, cpu=cpu,
                  record_sinks=(lambda _r: _burn(0.002),))  # 2 ms of frame encoding per record: transport work
    agent.open()
    go, done = threading.Event(), threading.Event()
    stop = False

    def api() -> None:  # not an agent thread
        while not stop:
            go.wait()
            go.clear()
            _burn(0.03)
            done.set()

    hog = threading.Thread(target=api, daemon=True)
    hog.start()
    cpu.register(SAMPLING)  # this test thread plays the sampling thread
    process0 = time.process_time()
    try:
        for _ in range(40):  # 40 s of fake wall time: 30 ms of "API" CPU per second, 3% of a core
            go.set()
            done.wait(10)
            done.clear()
            wall[0] += 1.0
            agent.step(wall[0])
    finally:
        stop = True
        go.set()
        cpu.unregister()
    hog.join(10)
    assert time.process_time() - process0 >= 40 * 0.03  # the process was busy...
    assert agent.budget.stretch == 1.0, agent.budget.usage()  # ...the budget did not mind
    accounts = cpu.accounts()
    assert accounts[TRANSPORT] >= 0.002 * agent.samples_total * 0.99  # the sinks' time went to the transport
    assert accounts[SAMPLING] < accounts[TRANSPORT]


def test_thread_cpu_keeps_a_finished_threads_time() -> None:
    cpu = ThreadCpu()
    th = cpu.spawn(TRANSPORT, lambda: _burn(0.02), "burner")
    th.start()
    th.join(10)
    assert cpu.seconds(TRANSPORT) >= 0.02 and cpu.threads() == 0
    cpu.transfer(TRANSPORT, SAMPLING, 0.01)
    cpu.add(HTTP, 0.5)
    accounts = cpu.accounts()
    assert accounts[SAMPLING] == 0.01 and accounts[HTTP] == 0.5 and accounts[TRANSPORT] >= 0.01


def test_the_pacer_lets_a_burst_through_then_paces_to_its_budget() -> None:
    wall = [0.0]
    cpu = [0.0]
    pacer = CpuPacer(0.01, cpu_clock=lambda: cpu[0], wall_clock=lambda: wall[0], burst_s=30.0)
    assert pacer.delay() == 0.0
    cpu[0] += 0.3  # a replay round: the whole burst (1% of a core for 30 s)
    assert pacer.delay() == 0.0
    cpu[0] += 0.05  # 50 ms more: 5 s of budget owed
    assert pacer.delay() == pytest.approx(5.0)
    wall[0] += 5.0
    assert pacer.delay() == pytest.approx(0.0, abs=1e-9)
    # over a long replay the work done matches the budget: 1% of the wall time
    done = 0.0
    for _ in range(1000):
        if (wait := pacer.delay()) > 0:
            wall[0] += wait
            continue
        cpu[0] += 0.01
        done += 0.01
        wall[0] += 0.001
    assert done / (wall[0] - 5.0) == pytest.approx(0.01, rel=0.05)


def test_a_debt_of_work_that_could_not_wait_holds_discretionary_work_back_one_longest_wait() -> None:
    """Spooling during a 30-s outage is never delayed and can spend seconds of CPU on 1% of a
    core: the reconnect and the replay after it then wait at most ``max_delay_s`` (the fault
    harness found an agent that had not reconnected 34 s after the broker was back)."""
    wall = [0.0]
    cpu = [0.0]
    pacer = CpuPacer(0.01, cpu_clock=lambda: cpu[0], wall_clock=lambda: wall[0], burst_s=30.0, max_delay_s=10.0)
    assert pacer.delay() == 0.0
    cpu[0] += 3.0  # 300 s of budget owed
    assert pacer.delay() == pytest.approx(10.0)
    wall[0] += 10.0
    assert pacer.delay() == pytest.approx(0.0, abs=1e-9)

def test_thread_cpu_without_per_thread_clock_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS has no pthread_getcpuclockid: a thread's own readings are used, nothing crashes."""
    monkeypatch.delattr(time, "pthread_getcpuclockid")
    cpu = ThreadCpu()
    cpu.register(SAMPLING)
    try:
        _burn(0.02)
        assert cpu.seconds(SAMPLING) >= 0.02
    finally:
        cpu.unregister()
    th = cpu.spawn(TRANSPORT, lambda: _burn(0.01), "burner")
    th.start()
    th.join(10)
    assert cpu.seconds(TRANSPORT) >= 0.01 and cpu.threads() == 0
