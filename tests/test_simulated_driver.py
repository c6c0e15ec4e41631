"""The simulated fleet keeps NVML's semantics, so code tested against it runs on real NVML."""

from __future__ import annotations

import pynvml as nv
import pytest

from agent.driver.simulated import MIB, SimulatedFleet
from agent.gpm import GPM_METRICS


def _fleet(**kw: object) -> tuple[SimulatedFleet, list[float]]:
    now = [100.0]
    fleet = SimulatedFleet(4, clock=lambda: now[0], start=0.0, **kw)  # type: ignore[arg-type]
    fleet.init()
    return fleet, now


def test_units_are_nvmls() -> None:
    fleet, _ = _fleet()
    h = fleet.handle_by_index(0)
    used, free, reserved = fleet.memory(h)
    assert used + free + reserved == 143771 * MIB  # bytes, like nvmlMemory_v2
    assert 70_000 <= fleet.power(h) <= 700_000  # mW
    assert fleet.power_limit(h) == 700_000


def test_energy_counter_only_grows() -> None:
    fleet, now = _fleet()
    h = fleet.handle_by_index(0)
    last = fleet.energy(h)
    for _ in range(50):
        now[0] += 0.5
        value = fleet.energy(h)
        assert value >= last
        last = value
    now[0] -= 10  # a clock step backwards never makes a counter shrink
    assert fleet.energy(h) >= last


def test_models_lack_what_real_models_lack() -> None:
    fleet, _ = _fleet(models=["NVIDIA H200", "NVIDIA A100-SXM4-80GB", "Tesla T4"])
    a100, t4 = fleet.handle_by_index(1), fleet.handle_by_index(2)
    assert fleet.gpm_supported(fleet.handle_by_index(0))
    assert not fleet.gpm_supported(a100)
    with pytest.raises(nv.NVMLError_NotSupported):
        fleet.gpm_sample(a100, fleet.gpm_alloc())
    with pytest.raises(nv.NVMLError_NotSupported):
        fleet.memory_temperature(t4)


def test_gpm_needs_two_samples_100ms_apart() -> None:
    fleet, now = _fleet()
    h = fleet.handle_by_index(0)
    s1, s2 = fleet.gpm_alloc(), fleet.gpm_alloc()
    ids = tuple(GPM_METRICS.values())
    fleet.gpm_sample(h, s1)
    with pytest.raises(nv.NVMLError_InvalidArgument):
        fleet.gpm_metrics(s1, s2, ids)  # second buffer never filled
    now[0] += 0.05
    fleet.gpm_sample(h, s2)
    # closer than 100 ms the H200 answered success with zeros: nothing to catch, hence the agent's guard
    assert set(fleet.gpm_metrics(s1, s2, ids).values()) == {0.0}
    now[0] += 0.1
    fleet.gpm_sample(h, s2)
    values = fleet.gpm_metrics(s1, s2, ids)
    assert all(0.0 <= v <= 100.0 for k, v in values.items() if k < 20)  # percent, like GPM


def test_process_utilization_raises_not_found_without_processes() -> None:
    fleet, _ = _fleet(profiles=["idle"])
    h = fleet.handle_by_index(0)
    assert fleet.compute_processes(h) == []
    with pytest.raises(nv.NVMLError_NotFound):
        fleet.process_utilization(h, 0)


def test_lost_gpu_raises_gpu_is_lost_until_recovered() -> None:
    fleet, _ = _fleet()
    h = fleet.handle_by_index(1)
    fleet.inject_xid(1, 79)
    with pytest.raises(nv.NVMLError_GpuIsLost):
        fleet.utilization(h)
    assert fleet.wait_event(fleet.event_set(), 10).xid == 79
    with pytest.raises(nv.NVMLError_Timeout):
        fleet.wait_event(fleet.event_set(), 1)
    fleet.recover(1)
    assert fleet.utilization(h)[0] >= 0


def test_mig_instances_and_their_limits() -> None:
    fleet, _ = _fleet(mig={0: ["1g.18gb", "3g.71gb"]})
    h = fleet.handle_by_index(0)
    assert fleet.mig_enabled(h)
    instances = fleet.mig_devices(h)
    assert len(instances) == 2
    assert fleet.name(instances[1]).endswith("MIG 3g.71gb")
    assert fleet.uuid(instances[0]).startswith("MIG-")
    with pytest.raises(nv.NVMLError_NotSupported):
        fleet.utilization(instances[0])  # NVML has no per-instance utilisation
    with pytest.raises(nv.NVMLError_NotSupported):
        fleet.utilization(h)  # nor whole-GPU utilisation in MIG mode
    assert fleet.temperature(h) > 0 and fleet.power(h) > 0  # device-level counters still answer
    with pytest.raises(nv.NVMLError_NotSupported):
        fleet.power(instances[0])
    used, free, reserved = fleet.memory(instances[1])
    assert used + free + reserved > 0


def test_simulated_serving_pods_carry_inference_figures_that_follow_their_load() -> None:
    """`--simulate` has no inference server to scrape; its vLLM pods' figures follow the GPU's
    load as a server's do (requests with load, queue near saturation), other pods get none."""
    from agent.simulate.inference import SimulatedServerFigures
    from telemetry import keys as k
    from telemetry.records import ProcessRecord

    figures = SimulatedServerFigures()
    serving, training = [ProcessRecord(pid=1, name="vllm")], [ProcessRecord(pid=2, name="python")]
    low, full, other = {k.SM_ACTIVE: 0.4}, {k.SM_ACTIVE: 1.0}, {k.SM_ACTIVE: 0.9}
    for m in (low, full):
        figures.add_to(None, serving, m)  # type: ignore[arg-type]
    figures.add_to(None, training, other)  # type: ignore[arg-type]
    assert full[k.INFERENCE_REQUESTS_PER_SECOND] > low[k.INFERENCE_REQUESTS_PER_SECOND] > 0
    assert full[k.INFERENCE_QUEUE_SECONDS] > 10 * low[k.INFERENCE_QUEUE_SECONDS]
    assert set(other) == {k.SM_ACTIVE}
