-- Host evidence (issue 14): the CPU of each GPU's processes and containers and the node's
-- (catalog rows 60001-60012, cost "host"), stored next to the GPU samples.
--
-- TimescaleDB profile. The raw hypertable gains the columns (nullable, no default: allowed on
-- a compressed hypertable). A continuous aggregate cannot gain columns, and rebuilding the
-- GPU rollups (as migration 0050 did) would cost a cutover each time a metric is added, so the
-- new columns get continuous aggregates of their own, gpu_samples_1m_host and the hierarchical
-- gpu_samples_1h_host, with the GPU rollups' policies (refresh windows of 7 and 8 days,
-- retention 90 days and 2 years), and the views gpu_samples_1m / gpu_samples_1h join them in:
-- the rollups keep the plain profile's columns, so the API reads a host column from either
-- profile and any step the same way (raw-only would have limited host history to the raw
-- retention, 14 days). Late data: Store.maintain() refreshes these aggregates with the others.

ALTER TABLE gpu_samples
    ADD COLUMN gpuwatch_process_cpu_cores double precision,
    ADD COLUMN gpuwatch_process_busiest_thread_ratio double precision,
    ADD COLUMN gpuwatch_process_runqueue_wait_cores double precision,
    ADD COLUMN gpuwatch_process_blocked_threads bigint,
    ADD COLUMN gpuwatch_process_sleeping_ratio double precision,
    ADD COLUMN gpuwatch_container_cpu_usage_cores double precision,
    ADD COLUMN gpuwatch_container_cpu_limit_cores double precision,
    ADD COLUMN gpuwatch_container_cpu_throttled_ratio double precision,
    ADD COLUMN gpuwatch_node_cpu_busy_ratio double precision,
    ADD COLUMN gpuwatch_node_pressure_cpu_waiting_ratio double precision,
    ADD COLUMN gpuwatch_node_pressure_memory_waiting_ratio double precision,
    ADD COLUMN gpuwatch_node_pressure_io_waiting_ratio double precision;

CREATE MATERIALIZED VIEW gpu_samples_1m_host
WITH (timescaledb.continuous, timescaledb.materialized_only = false) AS
SELECT
    time_bucket(INTERVAL '1 minute', ts) AS bucket,
    gpu,
    max(node) AS node,
    count(*) AS samples,
    avg(gpuwatch_process_cpu_cores::double precision) AS gpuwatch_process_cpu_cores,
    avg(gpuwatch_process_busiest_thread_ratio::double precision) AS gpuwatch_process_busiest_thread_ratio,
    max(gpuwatch_process_busiest_thread_ratio) AS gpuwatch_process_busiest_thread_ratio_max,
    avg(gpuwatch_process_runqueue_wait_cores::double precision) AS gpuwatch_process_runqueue_wait_cores,
    avg(gpuwatch_process_blocked_threads::double precision) AS gpuwatch_process_blocked_threads,
    avg(gpuwatch_process_sleeping_ratio::double precision) AS gpuwatch_process_sleeping_ratio,
    avg(gpuwatch_container_cpu_usage_cores::double precision) AS gpuwatch_container_cpu_usage_cores,
    avg(gpuwatch_container_cpu_limit_cores::double precision) AS gpuwatch_container_cpu_limit_cores,
    avg(gpuwatch_container_cpu_throttled_ratio::double precision) AS gpuwatch_container_cpu_throttled_ratio,
    max(gpuwatch_container_cpu_throttled_ratio) AS gpuwatch_container_cpu_throttled_ratio_max,
    avg(gpuwatch_node_cpu_busy_ratio::double precision) AS gpuwatch_node_cpu_busy_ratio,
    avg(gpuwatch_node_pressure_cpu_waiting_ratio::double precision) AS gpuwatch_node_pressure_cpu_waiting_ratio,
    max(gpuwatch_node_pressure_cpu_waiting_ratio) AS gpuwatch_node_pressure_cpu_waiting_ratio_max,
    avg(gpuwatch_node_pressure_memory_waiting_ratio::double precision) AS gpuwatch_node_pressure_memory_waiting_ratio,
    avg(gpuwatch_node_pressure_io_waiting_ratio::double precision) AS gpuwatch_node_pressure_io_waiting_ratio,
    count(gpuwatch_process_cpu_cores) AS gpuwatch_process_cpu_cores_n,
    count(gpuwatch_process_busiest_thread_ratio) AS gpuwatch_process_busiest_thread_ratio_n,
    count(gpuwatch_process_runqueue_wait_cores) AS gpuwatch_process_runqueue_wait_cores_n,
    count(gpuwatch_process_blocked_threads) AS gpuwatch_process_blocked_threads_n,
    count(gpuwatch_process_sleeping_ratio) AS gpuwatch_process_sleeping_ratio_n,
    count(gpuwatch_container_cpu_usage_cores) AS gpuwatch_container_cpu_usage_cores_n,
    count(gpuwatch_container_cpu_limit_cores) AS gpuwatch_container_cpu_limit_cores_n,
    count(gpuwatch_container_cpu_throttled_ratio) AS gpuwatch_container_cpu_throttled_ratio_n,
    count(gpuwatch_node_cpu_busy_ratio) AS gpuwatch_node_cpu_busy_ratio_n,
    count(gpuwatch_node_pressure_cpu_waiting_ratio) AS gpuwatch_node_pressure_cpu_waiting_ratio_n,
    count(gpuwatch_node_pressure_memory_waiting_ratio) AS gpuwatch_node_pressure_memory_waiting_ratio_n,
    count(gpuwatch_node_pressure_io_waiting_ratio) AS gpuwatch_node_pressure_io_waiting_ratio_n
FROM gpu_samples
GROUP BY time_bucket(INTERVAL '1 minute', ts), gpu
WITH NO DATA;
SELECT add_continuous_aggregate_policy('gpu_samples_1m_host',
    start_offset => INTERVAL '7 days', end_offset => INTERVAL '1 minute',
    schedule_interval => INTERVAL '1 minute');
SELECT add_retention_policy('gpu_samples_1m_host', INTERVAL '90 days');

CREATE MATERIALIZED VIEW gpu_samples_1h_host
WITH (timescaledb.continuous, timescaledb.materialized_only = false) AS
SELECT
    time_bucket(INTERVAL '1 hour', bucket) AS bucket,
    gpu,
    max(node) AS node,
    sum(samples)::bigint AS samples,
    (sum(gpuwatch_process_cpu_cores * coalesce(gpuwatch_process_cpu_cores_n, CASE WHEN gpuwatch_process_cpu_cores IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(gpuwatch_process_cpu_cores_n, CASE WHEN gpuwatch_process_cpu_cores IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS gpuwatch_process_cpu_cores,
    (sum(gpuwatch_process_busiest_thread_ratio * coalesce(gpuwatch_process_busiest_thread_ratio_n, CASE WHEN gpuwatch_process_busiest_thread_ratio IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(gpuwatch_process_busiest_thread_ratio_n, CASE WHEN gpuwatch_process_busiest_thread_ratio IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS gpuwatch_process_busiest_thread_ratio,
    max(gpuwatch_process_busiest_thread_ratio_max) AS gpuwatch_process_busiest_thread_ratio_max,
    (sum(gpuwatch_process_runqueue_wait_cores * coalesce(gpuwatch_process_runqueue_wait_cores_n, CASE WHEN gpuwatch_process_runqueue_wait_cores IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(gpuwatch_process_runqueue_wait_cores_n, CASE WHEN gpuwatch_process_runqueue_wait_cores IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS gpuwatch_process_runqueue_wait_cores,
    (sum(gpuwatch_process_blocked_threads * coalesce(gpuwatch_process_blocked_threads_n, CASE WHEN gpuwatch_process_blocked_threads IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(gpuwatch_process_blocked_threads_n, CASE WHEN gpuwatch_process_blocked_threads IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS gpuwatch_process_blocked_threads,
    (sum(gpuwatch_process_sleeping_ratio * coalesce(gpuwatch_process_sleeping_ratio_n, CASE WHEN gpuwatch_process_sleeping_ratio IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(gpuwatch_process_sleeping_ratio_n, CASE WHEN gpuwatch_process_sleeping_ratio IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS gpuwatch_process_sleeping_ratio,
    (sum(gpuwatch_container_cpu_usage_cores * coalesce(gpuwatch_container_cpu_usage_cores_n, CASE WHEN gpuwatch_container_cpu_usage_cores IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(gpuwatch_container_cpu_usage_cores_n, CASE WHEN gpuwatch_container_cpu_usage_cores IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS gpuwatch_container_cpu_usage_cores,
    (sum(gpuwatch_container_cpu_limit_cores * coalesce(gpuwatch_container_cpu_limit_cores_n, CASE WHEN gpuwatch_container_cpu_limit_cores IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(gpuwatch_container_cpu_limit_cores_n, CASE WHEN gpuwatch_container_cpu_limit_cores IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS gpuwatch_container_cpu_limit_cores,
    (sum(gpuwatch_container_cpu_throttled_ratio * coalesce(gpuwatch_container_cpu_throttled_ratio_n, CASE WHEN gpuwatch_container_cpu_throttled_ratio IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(gpuwatch_container_cpu_throttled_ratio_n, CASE WHEN gpuwatch_container_cpu_throttled_ratio IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS gpuwatch_container_cpu_throttled_ratio,
    max(gpuwatch_container_cpu_throttled_ratio_max) AS gpuwatch_container_cpu_throttled_ratio_max,
    (sum(gpuwatch_node_cpu_busy_ratio * coalesce(gpuwatch_node_cpu_busy_ratio_n, CASE WHEN gpuwatch_node_cpu_busy_ratio IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(gpuwatch_node_cpu_busy_ratio_n, CASE WHEN gpuwatch_node_cpu_busy_ratio IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS gpuwatch_node_cpu_busy_ratio,
    (sum(gpuwatch_node_pressure_cpu_waiting_ratio * coalesce(gpuwatch_node_pressure_cpu_waiting_ratio_n, CASE WHEN gpuwatch_node_pressure_cpu_waiting_ratio IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(gpuwatch_node_pressure_cpu_waiting_ratio_n, CASE WHEN gpuwatch_node_pressure_cpu_waiting_ratio IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS gpuwatch_node_pressure_cpu_waiting_ratio,
    max(gpuwatch_node_pressure_cpu_waiting_ratio_max) AS gpuwatch_node_pressure_cpu_waiting_ratio_max,
    (sum(gpuwatch_node_pressure_memory_waiting_ratio * coalesce(gpuwatch_node_pressure_memory_waiting_ratio_n, CASE WHEN gpuwatch_node_pressure_memory_waiting_ratio IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(gpuwatch_node_pressure_memory_waiting_ratio_n, CASE WHEN gpuwatch_node_pressure_memory_waiting_ratio IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS gpuwatch_node_pressure_memory_waiting_ratio,
    (sum(gpuwatch_node_pressure_io_waiting_ratio * coalesce(gpuwatch_node_pressure_io_waiting_ratio_n, CASE WHEN gpuwatch_node_pressure_io_waiting_ratio IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(gpuwatch_node_pressure_io_waiting_ratio_n, CASE WHEN gpuwatch_node_pressure_io_waiting_ratio IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS gpuwatch_node_pressure_io_waiting_ratio,
    sum(coalesce(gpuwatch_process_cpu_cores_n, CASE WHEN gpuwatch_process_cpu_cores IS NOT NULL THEN samples ELSE 0 END))::bigint AS gpuwatch_process_cpu_cores_n,
    sum(coalesce(gpuwatch_process_busiest_thread_ratio_n, CASE WHEN gpuwatch_process_busiest_thread_ratio IS NOT NULL THEN samples ELSE 0 END))::bigint AS gpuwatch_process_busiest_thread_ratio_n,
    sum(coalesce(gpuwatch_process_runqueue_wait_cores_n, CASE WHEN gpuwatch_process_runqueue_wait_cores IS NOT NULL THEN samples ELSE 0 END))::bigint AS gpuwatch_process_runqueue_wait_cores_n,
    sum(coalesce(gpuwatch_process_blocked_threads_n, CASE WHEN gpuwatch_process_blocked_threads IS NOT NULL THEN samples ELSE 0 END))::bigint AS gpuwatch_process_blocked_threads_n,
    sum(coalesce(gpuwatch_process_sleeping_ratio_n, CASE WHEN gpuwatch_process_sleeping_ratio IS NOT NULL THEN samples ELSE 0 END))::bigint AS gpuwatch_process_sleeping_ratio_n,
    sum(coalesce(gpuwatch_container_cpu_usage_cores_n, CASE WHEN gpuwatch_container_cpu_usage_cores IS NOT NULL THEN samples ELSE 0 END))::bigint AS gpuwatch_container_cpu_usage_cores_n,
    sum(coalesce(gpuwatch_container_cpu_limit_cores_n, CASE WHEN gpuwatch_container_cpu_limit_cores IS NOT NULL THEN samples ELSE 0 END))::bigint AS gpuwatch_container_cpu_limit_cores_n,
    sum(coalesce(gpuwatch_container_cpu_throttled_ratio_n, CASE WHEN gpuwatch_container_cpu_throttled_ratio IS NOT NULL THEN samples ELSE 0 END))::bigint AS gpuwatch_container_cpu_throttled_ratio_n,
    sum(coalesce(gpuwatch_node_cpu_busy_ratio_n, CASE WHEN gpuwatch_node_cpu_busy_ratio IS NOT NULL THEN samples ELSE 0 END))::bigint AS gpuwatch_node_cpu_busy_ratio_n,
    sum(coalesce(gpuwatch_node_pressure_cpu_waiting_ratio_n, CASE WHEN gpuwatch_node_pressure_cpu_waiting_ratio IS NOT NULL THEN samples ELSE 0 END))::bigint AS gpuwatch_node_pressure_cpu_waiting_ratio_n,
    sum(coalesce(gpuwatch_node_pressure_memory_waiting_ratio_n, CASE WHEN gpuwatch_node_pressure_memory_waiting_ratio IS NOT NULL THEN samples ELSE 0 END))::bigint AS gpuwatch_node_pressure_memory_waiting_ratio_n,
    sum(coalesce(gpuwatch_node_pressure_io_waiting_ratio_n, CASE WHEN gpuwatch_node_pressure_io_waiting_ratio IS NOT NULL THEN samples ELSE 0 END))::bigint AS gpuwatch_node_pressure_io_waiting_ratio_n
FROM gpu_samples_1m_host
GROUP BY time_bucket(INTERVAL '1 hour', bucket), gpu
WITH NO DATA;
SELECT add_continuous_aggregate_policy('gpu_samples_1h_host',
    start_offset => INTERVAL '8 days', end_offset => INTERVAL '1 hour',
    schedule_interval => INTERVAL '30 minutes');
SELECT add_retention_policy('gpu_samples_1h_host', INTERVAL '2 years');

-- the GPU rollups of migration 0050, joined with the host ones (a bucket without host data: NULL)
ALTER VIEW gpu_samples_1m RENAME TO gpu_samples_1m_gpu;
ALTER VIEW gpu_samples_1h RENAME TO gpu_samples_1h_gpu;

CREATE VIEW gpu_samples_1m AS
SELECT r.*,
    h.gpuwatch_process_cpu_cores,
    h.gpuwatch_process_busiest_thread_ratio,
    h.gpuwatch_process_busiest_thread_ratio_max,
    h.gpuwatch_process_runqueue_wait_cores,
    h.gpuwatch_process_blocked_threads,
    h.gpuwatch_process_sleeping_ratio,
    h.gpuwatch_container_cpu_usage_cores,
    h.gpuwatch_container_cpu_limit_cores,
    h.gpuwatch_container_cpu_throttled_ratio,
    h.gpuwatch_container_cpu_throttled_ratio_max,
    h.gpuwatch_node_cpu_busy_ratio,
    h.gpuwatch_node_pressure_cpu_waiting_ratio,
    h.gpuwatch_node_pressure_cpu_waiting_ratio_max,
    h.gpuwatch_node_pressure_memory_waiting_ratio,
    h.gpuwatch_node_pressure_io_waiting_ratio,
    h.gpuwatch_process_cpu_cores_n,
    h.gpuwatch_process_busiest_thread_ratio_n,
    h.gpuwatch_process_runqueue_wait_cores_n,
    h.gpuwatch_process_blocked_threads_n,
    h.gpuwatch_process_sleeping_ratio_n,
    h.gpuwatch_container_cpu_usage_cores_n,
    h.gpuwatch_container_cpu_limit_cores_n,
    h.gpuwatch_container_cpu_throttled_ratio_n,
    h.gpuwatch_node_cpu_busy_ratio_n,
    h.gpuwatch_node_pressure_cpu_waiting_ratio_n,
    h.gpuwatch_node_pressure_memory_waiting_ratio_n,
    h.gpuwatch_node_pressure_io_waiting_ratio_n
FROM gpu_samples_1m_gpu r
LEFT JOIN gpu_samples_1m_host h ON h.bucket = r.bucket AND h.gpu = r.gpu;

CREATE VIEW gpu_samples_1h AS
SELECT r.*,
    h.gpuwatch_process_cpu_cores,
    h.gpuwatch_process_busiest_thread_ratio,
    h.gpuwatch_process_busiest_thread_ratio_max,
    h.gpuwatch_process_runqueue_wait_cores,
    h.gpuwatch_process_blocked_threads,
    h.gpuwatch_process_sleeping_ratio,
    h.gpuwatch_container_cpu_usage_cores,
    h.gpuwatch_container_cpu_limit_cores,
    h.gpuwatch_container_cpu_throttled_ratio,
    h.gpuwatch_container_cpu_throttled_ratio_max,
    h.gpuwatch_node_cpu_busy_ratio,
    h.gpuwatch_node_pressure_cpu_waiting_ratio,
    h.gpuwatch_node_pressure_cpu_waiting_ratio_max,
    h.gpuwatch_node_pressure_memory_waiting_ratio,
    h.gpuwatch_node_pressure_io_waiting_ratio,
    h.gpuwatch_process_cpu_cores_n,
    h.gpuwatch_process_busiest_thread_ratio_n,
    h.gpuwatch_process_runqueue_wait_cores_n,
    h.gpuwatch_process_blocked_threads_n,
    h.gpuwatch_process_sleeping_ratio_n,
    h.gpuwatch_container_cpu_usage_cores_n,
    h.gpuwatch_container_cpu_limit_cores_n,
    h.gpuwatch_container_cpu_throttled_ratio_n,
    h.gpuwatch_node_cpu_busy_ratio_n,
    h.gpuwatch_node_pressure_cpu_waiting_ratio_n,
    h.gpuwatch_node_pressure_memory_waiting_ratio_n,
    h.gpuwatch_node_pressure_io_waiting_ratio_n
FROM gpu_samples_1h_gpu r
LEFT JOIN gpu_samples_1h_host h ON h.bucket = r.bucket AND h.gpu = r.gpu;
