"""The migrations' metric columns are generated from the catalog, and adding a metric is one row plus one reader.

Why these tests: the committed SQL under ``collector/migrations/`` is what runs on users'
databases (checksummed there), so it must be exactly what the templates give for the
catalog, and no catalog row may lack its columns. The last test adds a catalog row and a
reader in a fresh interpreter and follows the metric through the sampler, ``/metrics``,
the frame codec, the store's column lists and the generated migration, which a real
PostgreSQL then applies on top of the committed ones.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from collector.store import schema, sqlgen
from collector.store.migrate import migrate

ROOT = Path(__file__).resolve().parents[1]


def test_committed_migrations_are_what_the_templates_give() -> None:
    assert sqlgen.check() == [], "generated SQL is stale: run `gpuwatch catalog --sql`"


def test_every_catalog_metric_has_columns_in_a_migration() -> None:
    assert sqlgen.pending() == ()
    assert {c.key for g in sqlgen.GENERATED for c in sqlgen.columns_through(g.through)} == set(schema.BY_KEY)


def test_a_real_column_gives_back_every_value_at_its_resolution_and_the_others_could_not() -> None:
    """Migration 0091's rule (schema.single_precision_keeps): each ``real`` column's values, at its
    resolution up to its ceiling, come back from a 32-bit float rounded to the resolution; a float
    metric left double has no ceiling, and integers (counters past 2**24) stay bigint."""
    import struct

    from telemetry.catalog import BY_KEY as METRICS

    def via_real(v: float) -> float:
        return float(struct.unpack("f", struct.pack("f", v))[0])

    real = {c.key for c in schema.REAL_COLUMNS}
    for key in real:
        m = METRICS[key]
        assert m.ceiling is not None
        r, top = m.resolution, m.ceiling
        for v in (r, 0.1234, top / 3, top - r, top):
            q = round(v / r) * r
            assert abs(via_real(q) - q) < r / 2, (key, q)
    for c in schema.METRIC_COLUMNS:
        if c.key not in real:
            assert c.timescale_type == c.sql_type
            assert c.sql_type == "bigint" or METRICS[c.key].ceiling is None, c.key
    assert {"DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_POWER_USAGE"} <= real
    assert not {"DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"} & real
    sql = sqlgen.REAL_VALUES.read_text()
    assert {line.split()[2] for line in sql.splitlines() if "TYPE real" in line} == {c.name for c in
                                                                                     schema.REAL_COLUMNS}


def test_the_hand_wrapped_v1_view_lists_of_0050_equal_the_catalog() -> None:
    """The one metric list left as text in a template (its line breaks are not any wrapper's):
    the same columns, in the same order, as the generator gives."""
    template = (sqlgen.TEMPLATES / "timescale" / "0050_rollup_counts.sql.in").read_text()
    lists = [part.split("FROM gpu_samples_1", 1)[0] for part in template.split("UNION ALL\n")[1:]]
    want = " ".join(sqlgen.TEXT_BLOCKS["view_v1"](sqlgen.columns_through(sqlgen.NVLINK_RX_BYTES)).split())
    assert len(lists) == 2
    assert all(" ".join(text.split()) == want for text in lists)


def test_a_template_names_only_known_blocks() -> None:
    with pytest.raises(ValueError, match="unknown block"):
        sqlgen.render("    {{no_such_block}}\n", schema.METRIC_COLUMNS)
    assert sqlgen.render("a\n    {{sample_columns}},\nb\n", schema.METRIC_COLUMNS[:2]) == (
        "a\n    dcgm_fi_dev_gpu_util bigint,\n    dcgm_fi_dev_mem_copy_util bigint,\nb\n")


def test_the_timescale_profile_adds_columns_through_a_second_pair_of_aggregates() -> None:
    """A continuous aggregate cannot gain columns: the added ones get their own, joined into the views."""
    sql = sqlgen.add_metrics_sql("timescale", schema.METRIC_COLUMNS[-2:], "0099_more")
    assert "ALTER TABLE gpu_samples\n" in sql and "CREATE MATERIALIZED VIEW gpu_samples_1m_0099" in sql
    assert "CREATE OR REPLACE VIEW gpu_samples_1h AS" in sql and "LEFT JOIN gpu_samples_1h_0099 a0099" in sql
    with pytest.raises(ValueError, match="no such profile"):
        sqlgen.add_metrics_sql("sqlite", schema.METRIC_COLUMNS[:1])


_ADD_A_METRIC = r'''
import json
import telemetry.catalog as c
from telemetry import keys

FAN = "DCGM_FI_DEV_FAN_SPEED"
row = c.Metric(FAN, 191, "%", "gauge", "Fan speed (in %).", "fan", "fast", keep_max=True)  # the one row
c.CATALOG += (row,)
c.BY_KEY[FAN], c.BY_FIELD_ID[row.field_id], c.KEYS, c.SOURCES = row, row, c.KEYS + (FAN,), c.SOURCES | {"fan"}

from agent.readers import READERS

def _fan(d, h, out):  # the one reader
    out[FAN] = 42
READERS["fan"] = _fan

from agent.devices import discover
from agent.driver.simulated import SimulatedFleet
from agent.exposition import Exposition
from agent.runtime import Agent, ScheduleConfig
from collector.store import schema, sqlgen
from telemetry.codec.frame import FrameDecoder, FrameEncoder

now = [1000.0]
fleet = SimulatedFleet(1, clock=lambda: now[0], start=0.0)
agent = Agent(fleet, "n", ScheduleConfig(), clock=lambda: now[0], calibrate_calls=False)
agent.open()
for _ in range(2):
    agent.step(now[0])
    now[0] += 1.0
(target, record), = agent.snapshot()
text = Exposition(agent).render().decode()
frame = FrameEncoder().encode([record])
decoded = FrameDecoder().decode(frame)
print(json.dumps({
    "sampled": record.metrics.get(FAN),
    "exposed": f"# TYPE {FAN} gauge" in text and f'{FAN}{{gpu="0"' in text,
    "decoded": [r.metrics.get(FAN) for r in decoded],
    "sample_column": schema.SAMPLE_COLUMNS.get("dcgm_fi_dev_fan_speed"),
    "rollup_columns": [n for n in schema.GPU_ROLLUP_COLUMNS if n.startswith("dcgm_fi_dev_fan_speed")],
    "pending": [m.key for m in sqlgen.pending()],
    "stale": sqlgen.check(),
    "sql": sqlgen.add_metrics_sql("plain", sqlgen.pending()),
}))
'''


def test_adding_a_metric_is_one_catalog_row_plus_one_reader(pg_db: str) -> None:
    done = subprocess.run([sys.executable, "-c", _ADD_A_METRIC], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["sampled"] == 42
    assert out["exposed"]
    assert out["decoded"] == [42]
    assert out["sample_column"] == "bigint"
    assert out["rollup_columns"] == ["dcgm_fi_dev_fan_speed", "dcgm_fi_dev_fan_speed_max", "dcgm_fi_dev_fan_speed_n"]
    assert out["pending"] == ["DCGM_FI_DEV_FAN_SPEED"]
    assert out["stale"] == []  # the applied migrations do not change

    async def apply() -> dict[str, list[str]]:
        conn = await asyncpg.connect(pg_db)
        try:
            await migrate(conn, "plain")
            await conn.execute(out["sql"])
            rows = await conn.fetch(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE column_name LIKE 'dcgm_fi_dev_fan_speed%' ORDER BY table_name, ordinal_position")
        finally:
            await conn.close()
        found: dict[str, list[str]] = {}
        for r in rows:
            found.setdefault(str(r["table_name"]), []).append(str(r["column_name"]))
        return found

    found = asyncio.run(apply())
    assert found.pop("gpu_samples") == found.pop("gpu_samples_default") == ["dcgm_fi_dev_fan_speed"]  # a partition
    assert found == {t: out["rollup_columns"] for t in ("gpu_samples_1m", "gpu_samples_1h")}
