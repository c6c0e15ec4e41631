"""The metric columns of the migrations, generated from the catalog (``gpuwatch catalog --sql``).

Why: the raw table and the rollups hold one column per catalog metric (plus ``_max`` and
``_n`` columns), so the migrations list 32 metrics six times over; typed by hand, a list
can miss a metric or roll it up differently from :mod:`collector.store.schema`, which the
writer and the plain profile's maintenance use. Here each migration that lists metrics is
a template (``collector/migrations/templates/<profile>/NNNN_name.sql.in``) whose
``{{block}}`` markers are filled from :mod:`collector.store.schema`'s columns, the same
aggregates maintenance runs. The output is committed under ``collector/migrations/`` (what
:mod:`collector.store.migrate` applies and a reviewer reads), and a test regenerates it
and compares.

Applied migrations are history: their text is checksummed into every database that ran
them (:mod:`collector.store.migrate` refuses one that changed). So each template renders
the catalog rows it was written for, those up to and including its ``through`` key, never
rows added later; the catalog only grows by appending. The templates reproduce the files
that were applied byte for byte, so no database sees a change. A metric added to the
catalog after ``through`` is :func:`pending`: its columns need a new migration, which
:func:`add_metrics_sql` writes for both profiles; listed in :data:`GENERATED` with the
rows it adds (``after`` exclusive, ``through`` inclusive), it is generated and checked too.

On TimescaleDB a continuous aggregate cannot gain columns, and rebuilding the rollups (as
0050 did) would recompute years of them for a few new columns. So a migration that adds
columns creates a pair of continuous aggregates for its columns alone (``gpu_samples_1m_host``
and ``_1h_host`` for 0060's host evidence, from its template; ``gpu_samples_1m_NNNN`` and
``_1h_NNNN`` for a generated one; same bucketing, policies and retention as ``_v2``). Migration
0060 renamed the GPU rollup views to ``gpu_samples_1m_gpu`` / ``_1h_gpu`` and made
``gpu_samples_1m`` / ``gpu_samples_1h`` join its aggregates to them by (bucket, gpu); each
later one redefines those views to join every added pair so far, its own last (the columns
keep their order, so ``CREATE OR REPLACE VIEW`` only appends). Readers see the plain profile's
columns, and the 1-minute and 1-hour rollups of the new metrics exist from the migration on
(NULL before it, as they have no raw data before it either).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Final

from collector.store.schema import (
    METRIC_COLUMNS,
    REAL_COLUMNS,
    MetricColumn,
    raw_aggregates,
    rollup_aggregates,
    rollup_metric_columns,
)
from telemetry.keys import INFERENCE_KV_CACHE_RATIO, NODE_PRESSURE_IO_WAITING_RATIO, NVLINK_RX_BYTES

MIGRATIONS: Final = Path(__file__).resolve().parents[1] / "migrations"
TEMPLATES: Final = MIGRATIONS / "templates"
_MARKER: Final = re.compile(r"\{\{(\w+)\}\}")
#: the width the views' column lists are wrapped at (migration 0050)
_VIEW_WIDTH: Final = 105


def columns_through(key: str, columns: Sequence[MetricColumn] = METRIC_COLUMNS) -> tuple[MetricColumn, ...]:
    """The metric columns of the catalog rows up to and including ``key``."""
    names = [c.key for c in columns]
    if key not in names:
        raise ValueError(f"{key} is not in the catalog")
    return tuple(columns[: names.index(key) + 1])


def _avg(columns: Sequence[MetricColumn]) -> list[MetricColumn]:
    return [c for c in columns if c.rollup == "avg"]


def _select(aggregates: list[tuple[str, str]]) -> list[str]:
    """``agg AS col`` items, less node and samples (templates spell those)."""
    return [f"{agg} AS {col}" for col, agg in aggregates if col not in ("node", "samples")]


def _v1_hourly(columns: Sequence[MetricColumn]) -> list[str]:
    """The 1-hour continuous aggregate of migration 0003: averages weighted by all samples."""
    out: list[str] = []
    for c in columns:
        if c.rollup == "avg":
            n = f"CASE WHEN {c.name} IS NOT NULL THEN samples END"
            out.append(f"(sum({c.name} * samples) / NULLIF(sum({n}), 0))::double precision AS {c.name}")
        else:
            out.append(f"{c.rollup}({c.name}) AS {c.name}")
        if c.keep_max:
            out.append(f"max({c.max_name}) AS {c.max_name}")
    return out


def _view_select(columns: Sequence[MetricColumn], counts: bool) -> str:
    """A rollup view's SELECT list (migration 0050): the v2 counts, or NULL for v1's rows."""
    names = ["bucket", "gpu", "node", "samples", *rollup_metric_columns(columns)]
    names += [c.count_name if counts else f"NULL::bigint AS {c.count_name}" for c in _avg(columns)]
    text = "SELECT " + ", ".join(names)
    return textwrap.fill(text, width=_VIEW_WIDTH, subsequent_indent="    ", break_long_words=False,
                         break_on_hyphens=False)


def _rollup_columns_added(columns: Sequence[MetricColumn]) -> list[str]:
    """``ADD COLUMN`` items for a rollup table: each metric (and its ``_max``), then the counts."""
    cols = [f"{name} {t}" for name, t in rollup_metric_columns(columns).items()]
    return [f"ADD COLUMN {c}" for c in cols + [f"{c.count_name} bigint" for c in _avg(columns)]]


#: block name -> its lines (joined by ",\n" at the marker's indentation), for the columns given
LIST_BLOCKS: Final[dict[str, Callable[[Sequence[MetricColumn]], list[str]]]] = {
    "sample_columns": lambda cols: [f"{c.name} {c.sql_type}" for c in cols],
    "sample_columns_add": lambda cols: [f"ADD COLUMN {c.name} {c.sql_type}" for c in cols],
    "rollup_columns_add": _rollup_columns_added,
    "host_rollup_names": lambda cols: [f"h.{name}" for name in (*rollup_metric_columns(cols),
                                                                  *(c.count_name for c in _avg(cols)))],
    "rollup_columns": lambda cols: [f"{name} {t}" for name, t in rollup_metric_columns(cols).items()],
    "count_columns_add": lambda cols: [f"ADD COLUMN {c.count_name} bigint" for c in _avg(cols)],
    "v1_minutely": lambda cols: _select([a for a in raw_aggregates(cols) if not a[0].endswith("_n")]),
    "v1_hourly": _v1_hourly,
    "minutely": lambda cols: _select(raw_aggregates(cols)),
    "hourly": lambda cols: _select(rollup_aggregates(cols)),
}
#: block name -> its text, for blocks that stand on lines of their own
TEXT_BLOCKS: Final[dict[str, Callable[[Sequence[MetricColumn]], str]]] = {
    "view_v2": lambda cols: _view_select(cols, counts=True),
    "view_v1": lambda cols: _view_select(cols, counts=False),
}


def render(template: str, columns: Sequence[MetricColumn]) -> str:
    """``template`` with each ``{{block}}`` marker filled for ``columns``."""

    def line(text: str) -> str:
        match = _MARKER.search(text)
        if match is None:
            return text
        name = match.group(1)
        if name in TEXT_BLOCKS:
            if text.strip() != match.group(0):
                raise ValueError(f"block {name} must stand alone on its line: {text!r}")
            return TEXT_BLOCKS[name](columns) + "\n"
        if name not in LIST_BLOCKS:
            raise ValueError(f"unknown block {{{{{name}}}}} in a migration template")
        indent = text[: len(text) - len(text.lstrip())]
        return text.replace(match.group(0), (",\n" + indent).join(LIST_BLOCKS[name](columns)))

    return "".join(line(text) for text in template.splitlines(keepends=True))


@dataclass(frozen=True, slots=True)
class Generated:
    """One generated migration: its output, and the catalog rows it covers (those after ``after``,
    if given, up to and including ``through``). Its text is its template's, filled, when it has one
    (``templates/<profile>/<name>.sql.in``), else :func:`add_metrics_sql`'s for the rows it adds.
    ``suffix`` names an added TimescaleDB migration's continuous aggregates
    (``gpu_samples_1m_<suffix>``); default: its number."""

    profile: str
    name: str
    through: str
    after: str | None = None
    suffix: str | None = None

    def columns(self, columns: Sequence[MetricColumn] = METRIC_COLUMNS) -> tuple[MetricColumn, ...]:
        upto = columns_through(self.through, columns)
        return upto[len(columns_through(self.after, columns)):] if self.after is not None else upto

    @property
    def aggregates(self) -> str:
        return self.suffix or _number(self.name)

    @property
    def template(self) -> Path:
        return TEMPLATES / self.profile / f"{self.name}.sql.in"

    @property
    def output(self) -> Path:
        return MIGRATIONS / self.profile / f"{self.name}.sql"

    def text(self, columns: Sequence[MetricColumn] = METRIC_COLUMNS) -> str:
        if self.template.exists():
            return render(self.template.read_text(encoding="utf-8"), self.columns(columns))
        return add_metrics_sql(self.profile, self.columns(columns), self.name, catalog=columns)


#: every migration that lists metric columns, in version order
GENERATED: Final[tuple[Generated, ...]] = (
    *(Generated(profile, name, NVLINK_RX_BYTES)
      for name in ("0002_samples", "0003_rollups", "0050_rollup_counts")
      for profile in ("plain", "timescale")),
    # issue 14's host evidence: columns added to the raw table and the rollups (see the templates)
    *(Generated(profile, "0060_host_evidence", NODE_PRESSURE_IO_WAITING_RATIO, after=NVLINK_RX_BYTES, suffix="host")
      for profile in ("plain", "timescale")),
    # issue 14's inference-server rows, after the host rows (no template: add_metrics_sql's)
    *(Generated(profile, "0061_inference_columns", INFERENCE_KV_CACHE_RATIO, after=NODE_PRESSURE_IO_WAITING_RATIO)
      for profile in ("plain", "timescale")),
)


def pending(columns: Sequence[MetricColumn] = METRIC_COLUMNS) -> tuple[MetricColumn, ...]:
    """The catalog's metrics that no migration has made columns for yet (rows after the last ``through``)."""
    covered = {c.key for g in GENERATED for c in g.columns(columns)}
    return tuple(c for c in columns if c.key not in covered)


def add_metrics_sql(profile: str, columns: Sequence[MetricColumn], name: str = "NNNN_new_metrics",
                    catalog: Sequence[MetricColumn] = METRIC_COLUMNS) -> str:
    """A migration ``name`` that adds ``columns`` (new catalog rows) to the raw table and the rollups.

    Plain: ALTER TABLE on the raw table and both rollup tables. TimescaleDB: ALTER TABLE on the
    raw hypertable, a pair of continuous aggregates for the new columns, and the rollup views
    redefined to join those of every added migration before ``name`` (of :data:`GENERATED`, their
    columns from ``catalog``) and this one's (see the module's docstring for why).

    The raw columns get ``sql_type`` on both profiles, not the ``real`` that migration 0091 gives a
    new TimescaleDB database (``timescale_type``): a metric added with a ceiling needs that decided
    in its migration, and tests/test_store_timescale.py's column test fails until it is.
    """
    keys = ", ".join(c.key for c in columns)
    raw = LIST_BLOCKS["sample_columns_add"](columns)
    parts = [f"-- Generated by `gpuwatch catalog --sql` for catalog rows {keys}.\n"]
    if profile == "plain":
        rollup = LIST_BLOCKS["rollup_columns_add"](columns)
        for table, cols in (("gpu_samples", raw), ("gpu_samples_1m", rollup), ("gpu_samples_1h", rollup)):
            parts.append(f"\nALTER TABLE {table}\n    " + ",\n    ".join(cols) + ";\n")
        return "".join(parts)
    if profile != "timescale":
        raise ValueError(f"no such profile {profile!r}")
    earlier = [(g.aggregates, g.columns(catalog)) for g in _added(profile) if g.name < name]
    return "".join(parts) + _timescale_added(raw, columns, _number(name), earlier)


def _number(name: str) -> str:
    """``0061_inference_columns`` -> ``0061``: a migration's number."""
    return name.split("_", 1)[0]


def _added(profile: str) -> list[Generated]:
    """The migrations of ``profile`` that add columns to those of 0050 (``after`` set), in order."""
    return [g for g in GENERATED if g.profile == profile and g.after is not None]


def _timescale_added(raw: Sequence[str], columns: Sequence[MetricColumn], suffix: str,
                     earlier: Sequence[tuple[str, Sequence[MetricColumn]]]) -> str:
    m1, h1 = f"gpu_samples_1m_{suffix}", f"gpu_samples_1h_{suffix}"
    indent = ",\n    "
    minutely = [f"{agg} AS {col}" for col, agg in raw_aggregates(columns) if col != "node"]
    hourly = [f"{agg} AS {col}" for col, agg in rollup_aggregates(columns) if col != "node"]
    out = [
        "-- TimescaleDB: the raw hypertable gains the columns; its continuous aggregates cannot, so these\n"
        f"-- columns get their own pair ({m1}, {h1}: same buckets, refresh and retention\n"
        "-- policies as the _v2 pair), and the gpu_samples_1m / _1h views (migration 0060's: the GPU\n"
        "-- rollups, gpu_samples_1m_gpu / _1h_gpu, joined with the host aggregates) join them too, by\n"
        "-- (bucket, gpu), so readers see the plain profile's columns (collector/store/sqlgen.py says why).\n",
        "\nALTER TABLE gpu_samples\n    " + indent.join(raw) + ";\n",
        f"\nCREATE MATERIALIZED VIEW {m1}\nWITH (timescaledb.continuous, timescaledb.materialized_only = false) AS\n"
        "SELECT\n    time_bucket(INTERVAL '1 minute', ts) AS bucket,\n    gpu,\n    " + indent.join(minutely)
        + "\nFROM gpu_samples\nGROUP BY time_bucket(INTERVAL '1 minute', ts), gpu\nWITH NO DATA;\n"
        f"SELECT add_continuous_aggregate_policy('{m1}',\n"
        "    start_offset => INTERVAL '7 days', end_offset => INTERVAL '1 minute',\n"
        "    schedule_interval => INTERVAL '1 minute');\n"
        f"SELECT add_retention_policy('{m1}', INTERVAL '90 days');\n",
        f"\nCREATE MATERIALIZED VIEW {h1}\nWITH (timescaledb.continuous, timescaledb.materialized_only = false) AS\n"
        "SELECT\n    time_bucket(INTERVAL '1 hour', bucket) AS bucket,\n    gpu,\n    " + indent.join(hourly)
        + f"\nFROM {m1}\nGROUP BY time_bucket(INTERVAL '1 hour', bucket), gpu\nWITH NO DATA;\n"
        f"SELECT add_continuous_aggregate_policy('{h1}',\n"
        "    start_offset => INTERVAL '8 days', end_offset => INTERVAL '1 hour',\n"
        "    schedule_interval => INTERVAL '30 minutes');\n"
        f"SELECT add_retention_policy('{h1}', INTERVAL '2 years');\n",
    ]
    joined = [*earlier, (suffix, columns)]
    for width in ("1m", "1h"):
        view = f"gpu_samples_{width}"
        names: list[str] = []
        joins = []
        for s, cols in joined:
            alias = f"a{s}"
            names += [f"{alias}.{c}" for c in (*rollup_metric_columns(cols), *(c.count_name for c in _avg(cols)))]
            joins.append(f"LEFT JOIN {view}_{s} {alias} ON {alias}.bucket = r.bucket AND {alias}.gpu = r.gpu")
        # the view's columns keep their order (the GPU rollups', then each added migration's), so
        # CREATE OR REPLACE only appends this one's
        out.append(f"\nCREATE OR REPLACE VIEW {view} AS\n" + _wrap("SELECT r.*, " + ", ".join(names))
                   + f"\nFROM {view}_gpu r\n" + "\n".join(joins) + ";\n")
    return "".join(out)


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=_VIEW_WIDTH, subsequent_indent="    ", break_long_words=False,
                         break_on_hyphens=False)


def added_aggregates() -> tuple[tuple[str, str, timedelta], ...]:
    """(rollup view, continuous aggregate, bucket width) of every added TimescaleDB migration, for
    Store.maintain()'s refresh of late buckets."""
    return tuple(
        (f"gpu_samples_{w}", f"gpu_samples_{w}_{g.aggregates}", width)
        for g in _added("timescale")
        for w, width in (("1m", timedelta(minutes=1)), ("1h", timedelta(hours=1))))


#: migration 0091 builds these migrations' rollups again, from their own text (less the raw table's
#: ``ALTER TABLE gpu_samples``), in this order
_REBUILT: Final = ("0003_rollups", "0050_rollup_counts", "0060_host_evidence", "0061_inference_columns",
                   "0090_rollup_compression")
REAL_VALUES: Final = MIGRATIONS / "timescale" / "0091_real_values.sql"
#: what 0091 drops before building them again: the views, then the 1-hour aggregates (built on the
#: 1-minute ones), then the 1-minute ones, then 0050's tables
_DROPPED: Final = (
    *(f"VIEW {v}" for v in ("gpu_samples_1m", "gpu_samples_1h", "gpu_samples_1m_gpu", "gpu_samples_1h_gpu")),
    *(f"MATERIALIZED VIEW gpu_samples_1h_{s}" for s in ("v1", "v2", "host", "0061")),
    *(f"MATERIALIZED VIEW gpu_samples_1m_{s}" for s in ("v1", "v2", "host", "0061")),
    "MATERIALIZED VIEW process_samples_1m", "TABLE rollup_cutover", "TABLE rollup_pending",
)
_ADD_RAW_COLUMNS: Final = re.compile(r"^ALTER TABLE gpu_samples\n(?:    ADD COLUMN [^\n]*\n)+", re.MULTILINE)


def real_values_sql(columns: Sequence[MetricColumn] = REAL_COLUMNS) -> str:
    """Migration 0091 (TimescaleDB): ``columns`` of ``gpu_samples`` become ``real`` on a database that
    holds no samples and no rollups yet (a new one), and nothing changes on any other.

    Why this shape: TimescaleDB refuses ``ALTER COLUMN ... TYPE`` on a hypertable with compression
    enabled (2.23.1: "operation not supported on hypertables that have columnstore enabled", with no
    compressed chunk yet), and PostgreSQL refuses it under the views of the continuous aggregates
    over the column. So the rollups are dropped, compression switched off, the types changed, and
    compression and the rollups made again from the text of the migrations that made them
    (:data:`_REBUILT`), so a new database ends with the very objects an older one has. On a database
    with stored samples or rollups that would drop their history (the rollups keep 2 years, the raw
    samples 14 days), so it warns instead, in one line that the collector logs
    (docs/deploy.md says how to convert such a database by hand).
    """
    listed = textwrap.fill("Columns: " + ", ".join(c.name for c in columns) + ".", width=_VIEW_WIDTH,
                           initial_indent="-- ", subsequent_indent="-- ", break_long_words=False,
                           break_on_hyphens=False)
    rebuilt = "".join(_ADD_RAW_COLUMNS.sub("", (MIGRATIONS / "timescale" / f"{name}.sql").read_text(encoding="utf-8"))
                      for name in _REBUILT)
    if "$rollups$" in rebuilt:
        raise ValueError("a rebuilt migration uses the dollar quote $rollups$")
    views = ("gpu_samples_1m_v1", "gpu_samples_1m_v2", "gpu_samples_1m_host", "gpu_samples_1m_0061",
             "gpu_samples_1h_v1", "gpu_samples_1h_v2", "gpu_samples_1h_host", "gpu_samples_1h_0061")
    held = "\n       OR ".join(f"EXISTS (SELECT 1 FROM {t})" for t in ("gpu_samples", "process_samples", *views,
                                                                       "process_samples_1m"))
    alter = ",\n        ".join(f"ALTER COLUMN {c.name} TYPE real" for c in columns)
    drops = "".join(f"    DROP {d};\n" for d in _DROPPED)
    return (
        "-- Generated by `gpuwatch catalog --sql` (collector/store/sqlgen.py, real_values_sql); do not edit.\n"
        "--\n"
        "-- Single-precision metric columns, TimescaleDB profile (issue 16 item 4): the float metrics whose\n"
        "-- every value a 32-bit float keeps at the catalog's resolution (telemetry/catalog.py: resolution and\n"
        "-- ceiling; collector/store/schema.py single_precision_keeps) become real in gpu_samples: ratios,\n"
        "-- watts, cores. Compressed, a real costs about half a double (Gorilla XORs the bits: a decimal\n"
        "-- rounded double has a full 52-bit mantissa). Counters, bytes/s and the metrics with no ceiling\n"
        "-- stay as they are, and so do the rollups' averages; a real metric's peak (<col>_max) is real.\n"
        "--\n"
        "-- Only on a database that holds no samples and no rollups (a new one: the first start applies\n"
        "-- this right after the migrations that made the rollups): TimescaleDB refuses the type change\n"
        "-- while compression is enabled and PostgreSQL under the continuous aggregates' views, so the\n"
        "-- rollups are dropped and made again from the text of migrations 0003, 0050, 0060, 0061 and 0090.\n"
        "-- Any other database keeps double precision and the collector logs this migration's warning\n"
        "-- (docs/deploy.md, \"Single-precision metric columns\", says how to convert one by hand).\n"
        f"{listed}\n"
        "\nDO $migration$\nBEGIN\n"
        f"    IF {held}\n    THEN\n"
        "        RAISE WARNING 'gpu_samples keeps its double precision metric columns: this database already holds "
        "samples or rollups, and changing their type means dropping the rollups (TimescaleDB refuses it under "
        "continuous aggregates and on compressed chunks); docs/deploy.md \"Single-precision metric columns\" says "
        "how to convert it by hand (decompress, alter, rebuild the rollups, recompress)';\n"
        "        RETURN;\n    END IF;\n"
        f"{drops}"
        "    PERFORM remove_compression_policy('gpu_samples', if_exists => true);\n"
        "    ALTER TABLE gpu_samples SET (timescaledb.compress = false);\n"
        f"    ALTER TABLE gpu_samples\n        {alter};\n"
        "    -- compression as migration 0002 set it\n"
        "    ALTER TABLE gpu_samples SET (\n"
        "        timescaledb.compress,\n"
        "        timescaledb.compress_segmentby = 'gpu',\n"
        "        timescaledb.compress_orderby = 'ts DESC'\n"
        "    );\n"
        "    PERFORM add_compression_policy('gpu_samples', INTERVAL '1 day');\n"
        f"    EXECUTE $rollups$\n{rebuilt}$rollups$;\n"
        "END\n$migration$;\n"
    )


#: generated migrations that are not a catalog range's (:data:`GENERATED`): output and text
_DERIVED: Final[tuple[tuple[Path, Callable[[], str]], ...]] = ((REAL_VALUES, real_values_sql),)


def check() -> list[str]:
    """The generated files that differ from what the templates give now (empty: all current)."""
    stale = [g.output for g in GENERATED
             if not g.output.exists() or g.output.read_text(encoding="utf-8") != g.text()]
    stale += [out for out, text in _DERIVED if not out.exists() or out.read_text(encoding="utf-8") != text()]
    return [str(path.relative_to(MIGRATIONS.parent.parent)) for path in stale]


def write() -> list[str]:
    """Write every generated file that differs; returns their paths."""
    changed = check()
    for g in GENERATED:
        text = g.text()
        if not g.output.exists() or g.output.read_text(encoding="utf-8") != text:
            g.output.write_text(text, encoding="utf-8")
    for out, derive in _DERIVED:  # after GENERATED: built from their output
        text = derive()
        if not out.exists() or out.read_text(encoding="utf-8") != text:
            out.write_text(text, encoding="utf-8")
    return changed
