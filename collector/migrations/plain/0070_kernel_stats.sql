-- Kernel statistics of the opt-in CUPTI probe (issue 15): one row per recording window of one
-- process (kernel_windows) and one per kernel name in it (kernel_stats), as the agent forwards
-- them in ``kernels`` messages (telemetry/kernels.py's KernelWindow). Written and read by
-- collector/store/kernels.py only; the API reads them per service.
--
-- Plain profile: partitioned by day (UTC) like the raw samples, with a DEFAULT partition, so
-- Store.maintain() creates the days ahead and drops those past the raw retention (14 days;
-- collector/store/maintenance.py's PARTITIONED). The unique keys make a redelivered message a
-- no-op (INSERT ... ON CONFLICT DO NOTHING) and include ts, as a partitioned table's must.
-- grid and block are bigint[]: the contract allows each dimension up to 2^32 - 1, which an
-- integer cannot hold, and a message the decoder accepts must never fail in the database.
-- The (service, ts) indexes serve the API, which reads one service's range at a time.

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
) PARTITION BY RANGE (ts);
CREATE TABLE kernel_windows_default PARTITION OF kernel_windows DEFAULT;
CREATE INDEX kernel_windows_service_ts ON kernel_windows (service, ts);

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
) PARTITION BY RANGE (ts);
CREATE TABLE kernel_stats_default PARTITION OF kernel_stats DEFAULT;
CREATE INDEX kernel_stats_service_ts ON kernel_stats (service, ts);
