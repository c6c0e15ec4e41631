"""The agent's fault cases as real processes (``tests/support/agent_faults.py``): nothing produced is lost.

Short versions of what ``benchmarks/bench_agent_faults.py`` runs for the fault table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures_kafka import BrokerFactory, create_topic
from tests.support.agent_faults import TOPIC, MountUnavailable, cpu_budget_during_outage, torn_spool_after_full_disk


def test_a_full_disk_under_the_spool_loses_nothing(kafka_broker: BrokerFactory, tmp_path: Path) -> None:
    broker = kafka_broker(durable=True)
    create_topic(broker.bootstrap, TOPIC, partitions=2)
    try:
        result = torn_spool_after_full_disk(broker, tmp_path, gpus=8, full_s=3.0)
    except MountUnavailable as exc:
        pytest.skip(f"no tmpfs can be mounted here: {exc}")
    print(result)
    assert result["spool_write_errors"] >= 1 and result["memory_backlog_peak"] > 0  # the disk did fill up
    assert result["lost"] == 0 and result["undecodable_frames"] == 0, result
    assert result["counted_as_lost"] == 0 and result["spool_corrupt_regions"] == 0, result


def test_a_broker_outage_does_not_thin_sampling(kafka_broker: BrokerFactory, tmp_path: Path) -> None:
    broker = kafka_broker(durable=True)
    create_topic(broker.bootstrap, TOPIC, partitions=2)
    result = cpu_budget_during_outage(broker, tmp_path, gpus=8, outage_s=7.0, ceiling_s=2.0)  # main stretches after 5 s
    print(result)
    assert result["max_interval_s"] <= result["ceiling_s"], result  # before: stretched past it
    # any stretch is sampling's own doing (on a loaded 2-core machine its own CPU can pass 1% for a few
    # seconds), never the transport's spooling charged to it: that is what this test was written for
    assert result["max_stretch"] == 1.0 or result["max_sampling_window_pct"] > 0.6 * result["sampling_budget_pct"], \
        result
    assert result["sampling_cpu_pct"] <= result["sampling_budget_pct"], result
    assert result["lost"] == 0 and result["counted_as_lost"] == 0 and result["undecodable_frames"] == 0, result
