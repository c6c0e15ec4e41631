"""The catalog drives sampling, the exporter and the docs: these tests keep the three equal."""

from __future__ import annotations

import re
from pathlib import Path

from agent.devices import discover
from agent.driver.simulated import SimulatedFleet
from agent.exposition import Exposition
from agent.gpm import GPM_METRICS
from agent.host import HostReader
from agent.readers import READERS
from agent.runtime import Agent, ScheduleConfig
from agent.sampler import Sampler
from telemetry.catalog import BY_FIELD_ID, BY_KEY, CATALOG, HOST_KEYS, metrics_markdown
from telemetry.keys import CONTAINER_CPU_USAGE_CORES
from tests.support.hostfs import write_cgroup_v2, write_node, write_process

ROOT = Path(__file__).resolve().parents[1]
TELEMETRY_MD = ROOT / "docs" / "telemetry-contract.md"  # the data contract, kept in the repository


def test_catalog_rows_are_unique_and_well_formed() -> None:
    assert len(BY_KEY) == len(CATALOG) == len(BY_FIELD_ID)
    for m in CATALOG:
        # DCGM's names for what NVML gives; gpuwatch's own rows (issue 14: the host evidence and the
        # inference servers' figures) are snake_case, prefixed, gauges with ids of their own
        assert m.key.startswith("DCGM_FI_") != (m.cost in ("host", "scrape")), m.key
        if not m.key.startswith("DCGM_FI_"):
            assert re.fullmatch(r"gpuwatch_[a-z0-9_]+", m.key) and m.kind == "gauge", m.key
        if m.cost == "host":
            assert 60001 <= m.field_id <= 60099, m.key
        if m.cost == "scrape":
            assert 60101 <= m.field_id <= 60199, m.key
        assert m.kind in ("gauge", "counter")
        assert m.help and m.unit
        if m.unit == "ratio":
            assert 0 < m.resolution <= 1e-4, m.key  # issue 3: no coarser than 1e-4 for ratios
        if m.unit == "W":
            assert 0 < m.resolution <= 0.001, m.key  # NVML reports mW


def test_every_telemetry_md_key_is_in_the_catalog() -> None:
    """Each key in the contract's table (with its X / Y shorthand expanded) has a row."""
    keys: set[str] = set()
    for line in TELEMETRY_MD.read_text().splitlines():
        if not line.startswith("| DCGM_FI_"):
            continue
        cell = line.split("|")[1].strip()
        first, *rest = [part.strip() for part in cell.split("/")]
        keys.add(first)
        prefix = first.rsplit("_", 1)[0] if "PIPE_" in first else first.rsplit("_", 2)[0]
        for short in rest:
            if short.startswith("DCGM_FI_"):
                keys.add(short)
            elif "PIPE_" in first:
                keys.add(f"{prefix.rsplit('_', 1)[0]}_{short}_ACTIVE")
            else:
                keys.add(f"{first.rsplit('_', len(short.split('_')))[0]}_{short}")
    missing = keys - set(BY_KEY)
    assert not missing, missing
    assert len(keys) >= 30


def test_every_source_has_a_reader_and_readers_write_their_keys() -> None:
    fleet = SimulatedFleet(1)
    fleet.init()
    h = fleet.handle_by_index(0)
    polled = {m.source for m in CATALOG if m.cost in ("fast", "slow")}
    assert polled == set(READERS)
    for source, reader in READERS.items():
        out: dict[str, float] = {}
        reader(fleet, h, out)
        assert set(out) == {m.key for m in CATALOG if m.source == source}, source
    assert set(GPM_METRICS) == {m.key for m in CATALOG if m.cost == "gpm"}


#: rows the sampler never fills itself: the inference servers' figures (cost "scrape") are there only
#: for a GPU whose pod asks to be scraped (tests/test_inference_scraper.py fills them)
SCRAPED = frozenset(m.key for m in CATALOG if m.cost == "scrape")


def test_the_scraped_rows_are_the_inference_signals() -> None:
    assert {m.key for m in CATALOG if m.key.startswith("gpuwatch_inference_")} == SCRAPED
    assert sorted(BY_KEY[k].field_id for k in SCRAPED) == list(range(60101, 60108))


def test_sampler_fills_every_catalog_key_on_an_h200(tmp_path: Path) -> None:
    """The driver's rows from the simulated H200; the host rows from the host reader, here over a
    fake /proc and cgroup v2 tree holding the simulated GPU's process (every host row readable)."""
    now = 1000.0
    fleet = SimulatedFleet(1, clock=lambda: now, start=0.0)
    fleet.init()
    (target,) = discover(fleet)
    without = Sampler(fleet, "n", "v")
    without.sample(target, now)
    assert set(without.sample(target, now + 0.5).metrics) == set(BY_KEY) - set(HOST_KEYS) - SCRAPED  # host evidence off
    (pid,) = [p.pid for p in fleet.compute_processes(target.handle)]
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    clock = [0.0]

    def host_tree(tick: int) -> None:
        write_process(proc, pid, utime=10 * tick, stime=0, cgroup="0::/pod\n",
                      threads={pid: ("S", tick * 10**8, tick * 10**7)})
        write_node(proc, idle=100 + tick, busy=100 + tick, psi_us={r: tick * 1000 for r in ("cpu", "memory", "io")})
        write_cgroup_v2(cg, "/pod", usage_us=tick * 10**5, periods=10 * tick, throttled=tick)

    sampler = Sampler(fleet, "n", "v", host=HostReader(str(proc), str(cg), clock=lambda: clock[0]))
    host_tree(0)
    sampler.sample(target, now)
    host_tree(1)
    clock[0] += 1.0
    record = sampler.sample(target, now + 1.0)
    assert set(record.metrics) == set(BY_KEY) - SCRAPED  # no pod asked to be scraped: those are absent
    # a host value that cannot be read any more is absent from the next record and from /metrics' view
    host_tree(2)
    (cg / "pod" / "cpu.stat").write_text("")  # e.g. a v2 cgroup whose cpu.stat lost usage_usec
    clock[0] += 1.0
    record = sampler.sample(target, now + 2.0)
    assert CONTAINER_CPU_USAGE_CORES not in record.metrics and CONTAINER_CPU_USAGE_CORES not in target.last_metrics


def test_exporter_emits_every_sampled_key_with_its_type() -> None:
    now = [1000.0]
    fleet = SimulatedFleet(2, clock=lambda: now[0], start=0.0)
    agent = Agent(fleet, "n", ScheduleConfig(), clock=lambda: now[0], calibrate_calls=False)
    agent.open()
    for _ in range(3):
        agent.step(now[0])
        now[0] += 1.0
    text = Exposition(agent).render().decode()
    for t, _record in agent.snapshot():
        for key in t.last_metrics:
            m = BY_KEY[key]
            assert f"# TYPE {key} {m.kind}\n" in text
            assert f"# HELP {key} {m.help}\n" in text
            assert f'{key}{{gpu="{t.index}",UUID="{t.key}"' in text


def test_docs_metrics_md_is_generated_from_the_catalog() -> None:
    assert (ROOT / "docs" / "metrics.md").read_text() == metrics_markdown(), (
        "docs/metrics.md is stale: run `gpuwatch catalog --markdown > docs/metrics.md`"
    )
