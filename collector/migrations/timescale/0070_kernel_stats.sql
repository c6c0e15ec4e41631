-- Kernel statistics of the opt-in CUPTI probe (issue 15): one row per recording window of one
-- process (kernel_windows) and one per kernel name in it (kernel_stats), as the agent forwards
-- them in ``kernels`` messages (telemetry/kernels.py's KernelWindow). Written and read by
-- collector/store/kernels.py only; the API reads them per service.
--
-- TimescaleDB profile: the plain profile's tables as hypertables (6-hour chunks, as the raw
-- samples), compressed after 1 day and dropped after 14 days by TimescaleDB policies. The
-- unique keys make a redelivered message a no-op (INSERT ... ON CONFLICT DO NOTHING); a
-- compressed hypertable enforces them only when their columns are segmentby or orderby
-- columns, so node and pid are in the orderby. Segments: a service's windows, a service's
-- kernel (the API reads one service, and one kernel's rows compress well together: the same
-- launch shape, registers and category). grid and block are bigint[]: the contract allows each
-- dimension up to 2^32 - 1, which an integer cannot hold.

CREATE TABLE kernel_windows (
    ts timestamptz NOT NULL,
    node text NOT NULL,
    gpu text,
    pid integer NOT NULL,
    namespace text,
    pod text,
    container text,
    service text,
    command text NOT NULL DEFAULT '',
    duration_s double precision NOT NULL,
    period_s double precision NOT NULL,
    kernel_ns bigint NOT NULL,
    busy_ns bigint NOT NULL,
    idle_ns bigint NOT NULL,
    idle_gaps bigint NOT NULL,
    memset_calls bigint NOT NULL,
    memset_ns bigint NOT NULL,
    sync_calls bigint NOT NULL,
    sync_ns bigint NOT NULL,
    launch_calls bigint NOT NULL,
    launch_ns bigint NOT NULL,
    records bigint NOT NULL,
    dropped_records bigint NOT NULL,
    copies jsonb NOT NULL DEFAULT '[]',
    probe text NOT NULL DEFAULT '',
    CONSTRAINT kernel_windows_key UNIQUE (ts, node, pid)
);
SELECT create_hypertable('kernel_windows', by_range('ts', INTERVAL '6 hours'));
CREATE INDEX kernel_windows_service_ts ON kernel_windows (service, ts);
ALTER TABLE kernel_windows SET (
    timescaledb.compress,
    timescaledb.compress_segmentby = 'service',
    timescaledb.compress_orderby = 'ts DESC, node, pid'
);
SELECT add_compression_policy('kernel_windows', INTERVAL '1 day');
SELECT add_retention_policy('kernel_windows', INTERVAL '14 days');

CREATE TABLE kernel_stats (
    ts timestamptz NOT NULL,
    node text NOT NULL,
    gpu text,
    pid integer NOT NULL,
    namespace text,
    pod text,
    service text,
    kernel text NOT NULL,
    category text NOT NULL,
    calls bigint NOT NULL,
    total_ns bigint NOT NULL,
    p95_ns bigint NOT NULL,
    short_calls bigint NOT NULL,
    grid bigint[] NOT NULL,
    block bigint[] NOT NULL,
    registers integer NOT NULL,
    shared_bytes bigint NOT NULL,
    occupancy real,
    CONSTRAINT kernel_stats_key UNIQUE (ts, node, pid, kernel)
);
SELECT create_hypertable('kernel_stats', by_range('ts', INTERVAL '6 hours'));
CREATE INDEX kernel_stats_service_ts ON kernel_stats (service, ts);
ALTER TABLE kernel_stats SET (
    timescaledb.compress,
    timescaledb.compress_segmentby = 'service, kernel',
    timescaledb.compress_orderby = 'ts DESC, node, pid'
);
SELECT add_compression_policy('kernel_stats', INTERVAL '1 day');
SELECT add_retention_policy('kernel_stats', INTERVAL '14 days');
