-- Rollups, TimescaleDB profile: per averaged gauge, how many samples of the bucket had it
-- (<col>_n, collector/store/schema.py), so that coarser steps weight each bucket's average
-- by that count, not by all of its samples. A continuous aggregate cannot gain columns, so:
--
-- * the rollups of migration 0003 are kept, renamed gpu_samples_1m_v1 / gpu_samples_1h_v1,
--   without refresh policies (their retention policies still run): they hold the history
--   before the cutover, which no raw rows can rebuild after the raw retention;
-- * gpu_samples_1m_v2 / gpu_samples_1h_v2 are the new continuous aggregates, with the same
--   policies as before (refresh windows of 7 and 8 days, retention 90 days and 2 years);
-- * gpu_samples_1m and gpu_samples_1h become views with the plain profile's columns: v2
--   from the cutover on, v1 before it (its rows have no counts, NULL, and are weighted by
--   their sample count as before). The cutover is 7 days before this migration (plus an
--   hour, so that it lies inside v2's first refresh window): v2's first policy run fills
--   everything from there; v1 was refreshed up to this migration. On a database that
--   holds no samples yet it is -infinity: v2 serves everything.
--
-- Late data older than the refresh windows is rolled up by Store.maintain() (it refreshes
-- the buckets marked in rollup_pending, v1 ones before the cutover), up to the raw retention.

ALTER MATERIALIZED VIEW gpu_samples_1h RENAME TO gpu_samples_1h_v1;
ALTER MATERIALIZED VIEW gpu_samples_1m RENAME TO gpu_samples_1m_v1;
SELECT remove_continuous_aggregate_policy('gpu_samples_1h_v1');
SELECT remove_continuous_aggregate_policy('gpu_samples_1m_v1');

CREATE TABLE rollup_cutover (
    rollup text PRIMARY KEY,
    cutover timestamptz NOT NULL
);
-- A database without samples yet has no history to keep: v2 serves everything.
INSERT INTO rollup_cutover (rollup, cutover)
SELECT name, CASE WHEN EXISTS (SELECT 1 FROM gpu_samples) OR EXISTS (SELECT 1 FROM gpu_samples_1h_v1)
                  THEN date_trunc('hour', now() - INTERVAL '7 days') + INTERVAL '1 hour'
                  ELSE '-infinity'::timestamptz END
FROM (VALUES ('gpu_samples_1m'), ('gpu_samples_1h')) AS v(name);

CREATE MATERIALIZED VIEW gpu_samples_1m_v2
WITH (timescaledb.continuous, timescaledb.materialized_only = false) AS
SELECT
    time_bucket(INTERVAL '1 minute', ts) AS bucket,
    gpu,
    max(node) AS node,
    count(*) AS samples,
    avg(dcgm_fi_dev_gpu_util::double precision) AS dcgm_fi_dev_gpu_util,
    avg(dcgm_fi_dev_mem_copy_util::double precision) AS dcgm_fi_dev_mem_copy_util,
    avg(dcgm_fi_dev_enc_util::double precision) AS dcgm_fi_dev_enc_util,
    avg(dcgm_fi_dev_dec_util::double precision) AS dcgm_fi_dev_dec_util,
    avg(dcgm_fi_dev_fb_free::double precision) AS dcgm_fi_dev_fb_free,
    avg(dcgm_fi_dev_fb_used::double precision) AS dcgm_fi_dev_fb_used,
    max(dcgm_fi_dev_fb_used) AS dcgm_fi_dev_fb_used_max,
    avg(dcgm_fi_dev_fb_reserved::double precision) AS dcgm_fi_dev_fb_reserved,
    avg(dcgm_fi_dev_power_usage::double precision) AS dcgm_fi_dev_power_usage,
    max(dcgm_fi_dev_power_usage) AS dcgm_fi_dev_power_usage_max,
    max(dcgm_fi_dev_total_energy_consumption) AS dcgm_fi_dev_total_energy_consumption,
    avg(dcgm_fi_dev_gpu_temp::double precision) AS dcgm_fi_dev_gpu_temp,
    max(dcgm_fi_dev_gpu_temp) AS dcgm_fi_dev_gpu_temp_max,
    avg(dcgm_fi_dev_memory_temp::double precision) AS dcgm_fi_dev_memory_temp,
    max(dcgm_fi_dev_memory_temp) AS dcgm_fi_dev_memory_temp_max,
    avg(dcgm_fi_dev_sm_clock::double precision) AS dcgm_fi_dev_sm_clock,
    avg(dcgm_fi_dev_mem_clock::double precision) AS dcgm_fi_dev_mem_clock,
    bit_or(dcgm_fi_dev_clocks_event_reasons) AS dcgm_fi_dev_clocks_event_reasons,
    max(dcgm_fi_dev_pcie_replay_counter) AS dcgm_fi_dev_pcie_replay_counter,
    max(dcgm_fi_dev_xid_errors) AS dcgm_fi_dev_xid_errors,
    max(dcgm_fi_dev_ecc_sbe_vol_total) AS dcgm_fi_dev_ecc_sbe_vol_total,
    max(dcgm_fi_dev_ecc_dbe_vol_total) AS dcgm_fi_dev_ecc_dbe_vol_total,
    avg(dcgm_fi_dev_pstate::double precision) AS dcgm_fi_dev_pstate,
    avg(dcgm_fi_dev_power_mgmt_limit::double precision) AS dcgm_fi_dev_power_mgmt_limit,
    avg(dcgm_fi_prof_gr_engine_active::double precision) AS dcgm_fi_prof_gr_engine_active,
    avg(dcgm_fi_prof_sm_active::double precision) AS dcgm_fi_prof_sm_active,
    avg(dcgm_fi_prof_sm_occupancy::double precision) AS dcgm_fi_prof_sm_occupancy,
    avg(dcgm_fi_prof_pipe_tensor_active::double precision) AS dcgm_fi_prof_pipe_tensor_active,
    avg(dcgm_fi_prof_dram_active::double precision) AS dcgm_fi_prof_dram_active,
    avg(dcgm_fi_prof_pipe_fp64_active::double precision) AS dcgm_fi_prof_pipe_fp64_active,
    avg(dcgm_fi_prof_pipe_fp32_active::double precision) AS dcgm_fi_prof_pipe_fp32_active,
    avg(dcgm_fi_prof_pipe_fp16_active::double precision) AS dcgm_fi_prof_pipe_fp16_active,
    avg(dcgm_fi_prof_pcie_tx_bytes::double precision) AS dcgm_fi_prof_pcie_tx_bytes,
    avg(dcgm_fi_prof_pcie_rx_bytes::double precision) AS dcgm_fi_prof_pcie_rx_bytes,
    avg(dcgm_fi_prof_nvlink_tx_bytes::double precision) AS dcgm_fi_prof_nvlink_tx_bytes,
    avg(dcgm_fi_prof_nvlink_rx_bytes::double precision) AS dcgm_fi_prof_nvlink_rx_bytes,
    count(dcgm_fi_dev_gpu_util) AS dcgm_fi_dev_gpu_util_n,
    count(dcgm_fi_dev_mem_copy_util) AS dcgm_fi_dev_mem_copy_util_n,
    count(dcgm_fi_dev_enc_util) AS dcgm_fi_dev_enc_util_n,
    count(dcgm_fi_dev_dec_util) AS dcgm_fi_dev_dec_util_n,
    count(dcgm_fi_dev_fb_free) AS dcgm_fi_dev_fb_free_n,
    count(dcgm_fi_dev_fb_used) AS dcgm_fi_dev_fb_used_n,
    count(dcgm_fi_dev_fb_reserved) AS dcgm_fi_dev_fb_reserved_n,
    count(dcgm_fi_dev_power_usage) AS dcgm_fi_dev_power_usage_n,
    count(dcgm_fi_dev_gpu_temp) AS dcgm_fi_dev_gpu_temp_n,
    count(dcgm_fi_dev_memory_temp) AS dcgm_fi_dev_memory_temp_n,
    count(dcgm_fi_dev_sm_clock) AS dcgm_fi_dev_sm_clock_n,
    count(dcgm_fi_dev_mem_clock) AS dcgm_fi_dev_mem_clock_n,
    count(dcgm_fi_dev_pstate) AS dcgm_fi_dev_pstate_n,
    count(dcgm_fi_dev_power_mgmt_limit) AS dcgm_fi_dev_power_mgmt_limit_n,
    count(dcgm_fi_prof_gr_engine_active) AS dcgm_fi_prof_gr_engine_active_n,
    count(dcgm_fi_prof_sm_active) AS dcgm_fi_prof_sm_active_n,
    count(dcgm_fi_prof_sm_occupancy) AS dcgm_fi_prof_sm_occupancy_n,
    count(dcgm_fi_prof_pipe_tensor_active) AS dcgm_fi_prof_pipe_tensor_active_n,
    count(dcgm_fi_prof_dram_active) AS dcgm_fi_prof_dram_active_n,
    count(dcgm_fi_prof_pipe_fp64_active) AS dcgm_fi_prof_pipe_fp64_active_n,
    count(dcgm_fi_prof_pipe_fp32_active) AS dcgm_fi_prof_pipe_fp32_active_n,
    count(dcgm_fi_prof_pipe_fp16_active) AS dcgm_fi_prof_pipe_fp16_active_n,
    count(dcgm_fi_prof_pcie_tx_bytes) AS dcgm_fi_prof_pcie_tx_bytes_n,
    count(dcgm_fi_prof_pcie_rx_bytes) AS dcgm_fi_prof_pcie_rx_bytes_n,
    count(dcgm_fi_prof_nvlink_tx_bytes) AS dcgm_fi_prof_nvlink_tx_bytes_n,
    count(dcgm_fi_prof_nvlink_rx_bytes) AS dcgm_fi_prof_nvlink_rx_bytes_n
FROM gpu_samples
GROUP BY time_bucket(INTERVAL '1 minute', ts), gpu
WITH NO DATA;
SELECT add_continuous_aggregate_policy('gpu_samples_1m_v2',
    start_offset => INTERVAL '7 days', end_offset => INTERVAL '1 minute',
    schedule_interval => INTERVAL '1 minute');
SELECT add_retention_policy('gpu_samples_1m_v2', INTERVAL '90 days');

CREATE MATERIALIZED VIEW gpu_samples_1h_v2
WITH (timescaledb.continuous, timescaledb.materialized_only = false) AS
SELECT
    time_bucket(INTERVAL '1 hour', bucket) AS bucket,
    gpu,
    max(node) AS node,
    sum(samples)::bigint AS samples,
    (sum(dcgm_fi_dev_gpu_util * coalesce(dcgm_fi_dev_gpu_util_n, CASE WHEN dcgm_fi_dev_gpu_util IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_dev_gpu_util_n, CASE WHEN dcgm_fi_dev_gpu_util IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_dev_gpu_util,
    (sum(dcgm_fi_dev_mem_copy_util * coalesce(dcgm_fi_dev_mem_copy_util_n, CASE WHEN dcgm_fi_dev_mem_copy_util IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_dev_mem_copy_util_n, CASE WHEN dcgm_fi_dev_mem_copy_util IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_dev_mem_copy_util,
    (sum(dcgm_fi_dev_enc_util * coalesce(dcgm_fi_dev_enc_util_n, CASE WHEN dcgm_fi_dev_enc_util IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_dev_enc_util_n, CASE WHEN dcgm_fi_dev_enc_util IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_dev_enc_util,
    (sum(dcgm_fi_dev_dec_util * coalesce(dcgm_fi_dev_dec_util_n, CASE WHEN dcgm_fi_dev_dec_util IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_dev_dec_util_n, CASE WHEN dcgm_fi_dev_dec_util IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_dev_dec_util,
    (sum(dcgm_fi_dev_fb_free * coalesce(dcgm_fi_dev_fb_free_n, CASE WHEN dcgm_fi_dev_fb_free IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_dev_fb_free_n, CASE WHEN dcgm_fi_dev_fb_free IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_dev_fb_free,
    (sum(dcgm_fi_dev_fb_used * coalesce(dcgm_fi_dev_fb_used_n, CASE WHEN dcgm_fi_dev_fb_used IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_dev_fb_used_n, CASE WHEN dcgm_fi_dev_fb_used IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_dev_fb_used,
    max(dcgm_fi_dev_fb_used_max) AS dcgm_fi_dev_fb_used_max,
    (sum(dcgm_fi_dev_fb_reserved * coalesce(dcgm_fi_dev_fb_reserved_n, CASE WHEN dcgm_fi_dev_fb_reserved IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_dev_fb_reserved_n, CASE WHEN dcgm_fi_dev_fb_reserved IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_dev_fb_reserved,
    (sum(dcgm_fi_dev_power_usage * coalesce(dcgm_fi_dev_power_usage_n, CASE WHEN dcgm_fi_dev_power_usage IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_dev_power_usage_n, CASE WHEN dcgm_fi_dev_power_usage IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_dev_power_usage,
    max(dcgm_fi_dev_power_usage_max) AS dcgm_fi_dev_power_usage_max,
    max(dcgm_fi_dev_total_energy_consumption) AS dcgm_fi_dev_total_energy_consumption,
    (sum(dcgm_fi_dev_gpu_temp * coalesce(dcgm_fi_dev_gpu_temp_n, CASE WHEN dcgm_fi_dev_gpu_temp IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_dev_gpu_temp_n, CASE WHEN dcgm_fi_dev_gpu_temp IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_dev_gpu_temp,
    max(dcgm_fi_dev_gpu_temp_max) AS dcgm_fi_dev_gpu_temp_max,
    (sum(dcgm_fi_dev_memory_temp * coalesce(dcgm_fi_dev_memory_temp_n, CASE WHEN dcgm_fi_dev_memory_temp IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_dev_memory_temp_n, CASE WHEN dcgm_fi_dev_memory_temp IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_dev_memory_temp,
    max(dcgm_fi_dev_memory_temp_max) AS dcgm_fi_dev_memory_temp_max,
    (sum(dcgm_fi_dev_sm_clock * coalesce(dcgm_fi_dev_sm_clock_n, CASE WHEN dcgm_fi_dev_sm_clock IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_dev_sm_clock_n, CASE WHEN dcgm_fi_dev_sm_clock IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_dev_sm_clock,
    (sum(dcgm_fi_dev_mem_clock * coalesce(dcgm_fi_dev_mem_clock_n, CASE WHEN dcgm_fi_dev_mem_clock IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_dev_mem_clock_n, CASE WHEN dcgm_fi_dev_mem_clock IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_dev_mem_clock,
    bit_or(dcgm_fi_dev_clocks_event_reasons) AS dcgm_fi_dev_clocks_event_reasons,
    max(dcgm_fi_dev_pcie_replay_counter) AS dcgm_fi_dev_pcie_replay_counter,
    max(dcgm_fi_dev_xid_errors) AS dcgm_fi_dev_xid_errors,
    max(dcgm_fi_dev_ecc_sbe_vol_total) AS dcgm_fi_dev_ecc_sbe_vol_total,
    max(dcgm_fi_dev_ecc_dbe_vol_total) AS dcgm_fi_dev_ecc_dbe_vol_total,
    (sum(dcgm_fi_dev_pstate * coalesce(dcgm_fi_dev_pstate_n, CASE WHEN dcgm_fi_dev_pstate IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_dev_pstate_n, CASE WHEN dcgm_fi_dev_pstate IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_dev_pstate,
    (sum(dcgm_fi_dev_power_mgmt_limit * coalesce(dcgm_fi_dev_power_mgmt_limit_n, CASE WHEN dcgm_fi_dev_power_mgmt_limit IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_dev_power_mgmt_limit_n, CASE WHEN dcgm_fi_dev_power_mgmt_limit IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_dev_power_mgmt_limit,
    (sum(dcgm_fi_prof_gr_engine_active * coalesce(dcgm_fi_prof_gr_engine_active_n, CASE WHEN dcgm_fi_prof_gr_engine_active IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_prof_gr_engine_active_n, CASE WHEN dcgm_fi_prof_gr_engine_active IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_prof_gr_engine_active,
    (sum(dcgm_fi_prof_sm_active * coalesce(dcgm_fi_prof_sm_active_n, CASE WHEN dcgm_fi_prof_sm_active IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_prof_sm_active_n, CASE WHEN dcgm_fi_prof_sm_active IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_prof_sm_active,
    (sum(dcgm_fi_prof_sm_occupancy * coalesce(dcgm_fi_prof_sm_occupancy_n, CASE WHEN dcgm_fi_prof_sm_occupancy IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_prof_sm_occupancy_n, CASE WHEN dcgm_fi_prof_sm_occupancy IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_prof_sm_occupancy,
    (sum(dcgm_fi_prof_pipe_tensor_active * coalesce(dcgm_fi_prof_pipe_tensor_active_n, CASE WHEN dcgm_fi_prof_pipe_tensor_active IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_prof_pipe_tensor_active_n, CASE WHEN dcgm_fi_prof_pipe_tensor_active IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_prof_pipe_tensor_active,
    (sum(dcgm_fi_prof_dram_active * coalesce(dcgm_fi_prof_dram_active_n, CASE WHEN dcgm_fi_prof_dram_active IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_prof_dram_active_n, CASE WHEN dcgm_fi_prof_dram_active IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_prof_dram_active,
    (sum(dcgm_fi_prof_pipe_fp64_active * coalesce(dcgm_fi_prof_pipe_fp64_active_n, CASE WHEN dcgm_fi_prof_pipe_fp64_active IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_prof_pipe_fp64_active_n, CASE WHEN dcgm_fi_prof_pipe_fp64_active IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_prof_pipe_fp64_active,
    (sum(dcgm_fi_prof_pipe_fp32_active * coalesce(dcgm_fi_prof_pipe_fp32_active_n, CASE WHEN dcgm_fi_prof_pipe_fp32_active IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_prof_pipe_fp32_active_n, CASE WHEN dcgm_fi_prof_pipe_fp32_active IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_prof_pipe_fp32_active,
    (sum(dcgm_fi_prof_pipe_fp16_active * coalesce(dcgm_fi_prof_pipe_fp16_active_n, CASE WHEN dcgm_fi_prof_pipe_fp16_active IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_prof_pipe_fp16_active_n, CASE WHEN dcgm_fi_prof_pipe_fp16_active IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_prof_pipe_fp16_active,
    (sum(dcgm_fi_prof_pcie_tx_bytes * coalesce(dcgm_fi_prof_pcie_tx_bytes_n, CASE WHEN dcgm_fi_prof_pcie_tx_bytes IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_prof_pcie_tx_bytes_n, CASE WHEN dcgm_fi_prof_pcie_tx_bytes IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_prof_pcie_tx_bytes,
    (sum(dcgm_fi_prof_pcie_rx_bytes * coalesce(dcgm_fi_prof_pcie_rx_bytes_n, CASE WHEN dcgm_fi_prof_pcie_rx_bytes IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_prof_pcie_rx_bytes_n, CASE WHEN dcgm_fi_prof_pcie_rx_bytes IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_prof_pcie_rx_bytes,
    (sum(dcgm_fi_prof_nvlink_tx_bytes * coalesce(dcgm_fi_prof_nvlink_tx_bytes_n, CASE WHEN dcgm_fi_prof_nvlink_tx_bytes IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_prof_nvlink_tx_bytes_n, CASE WHEN dcgm_fi_prof_nvlink_tx_bytes IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_prof_nvlink_tx_bytes,
    (sum(dcgm_fi_prof_nvlink_rx_bytes * coalesce(dcgm_fi_prof_nvlink_rx_bytes_n, CASE WHEN dcgm_fi_prof_nvlink_rx_bytes IS NOT NULL THEN samples ELSE 0 END)) / NULLIF(sum(coalesce(dcgm_fi_prof_nvlink_rx_bytes_n, CASE WHEN dcgm_fi_prof_nvlink_rx_bytes IS NOT NULL THEN samples ELSE 0 END)), 0))::double precision AS dcgm_fi_prof_nvlink_rx_bytes,
    sum(coalesce(dcgm_fi_dev_gpu_util_n, CASE WHEN dcgm_fi_dev_gpu_util IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_dev_gpu_util_n,
    sum(coalesce(dcgm_fi_dev_mem_copy_util_n, CASE WHEN dcgm_fi_dev_mem_copy_util IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_dev_mem_copy_util_n,
    sum(coalesce(dcgm_fi_dev_enc_util_n, CASE WHEN dcgm_fi_dev_enc_util IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_dev_enc_util_n,
    sum(coalesce(dcgm_fi_dev_dec_util_n, CASE WHEN dcgm_fi_dev_dec_util IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_dev_dec_util_n,
    sum(coalesce(dcgm_fi_dev_fb_free_n, CASE WHEN dcgm_fi_dev_fb_free IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_dev_fb_free_n,
    sum(coalesce(dcgm_fi_dev_fb_used_n, CASE WHEN dcgm_fi_dev_fb_used IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_dev_fb_used_n,
    sum(coalesce(dcgm_fi_dev_fb_reserved_n, CASE WHEN dcgm_fi_dev_fb_reserved IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_dev_fb_reserved_n,
    sum(coalesce(dcgm_fi_dev_power_usage_n, CASE WHEN dcgm_fi_dev_power_usage IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_dev_power_usage_n,
    sum(coalesce(dcgm_fi_dev_gpu_temp_n, CASE WHEN dcgm_fi_dev_gpu_temp IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_dev_gpu_temp_n,
    sum(coalesce(dcgm_fi_dev_memory_temp_n, CASE WHEN dcgm_fi_dev_memory_temp IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_dev_memory_temp_n,
    sum(coalesce(dcgm_fi_dev_sm_clock_n, CASE WHEN dcgm_fi_dev_sm_clock IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_dev_sm_clock_n,
    sum(coalesce(dcgm_fi_dev_mem_clock_n, CASE WHEN dcgm_fi_dev_mem_clock IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_dev_mem_clock_n,
    sum(coalesce(dcgm_fi_dev_pstate_n, CASE WHEN dcgm_fi_dev_pstate IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_dev_pstate_n,
    sum(coalesce(dcgm_fi_dev_power_mgmt_limit_n, CASE WHEN dcgm_fi_dev_power_mgmt_limit IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_dev_power_mgmt_limit_n,
    sum(coalesce(dcgm_fi_prof_gr_engine_active_n, CASE WHEN dcgm_fi_prof_gr_engine_active IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_prof_gr_engine_active_n,
    sum(coalesce(dcgm_fi_prof_sm_active_n, CASE WHEN dcgm_fi_prof_sm_active IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_prof_sm_active_n,
    sum(coalesce(dcgm_fi_prof_sm_occupancy_n, CASE WHEN dcgm_fi_prof_sm_occupancy IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_prof_sm_occupancy_n,
    sum(coalesce(dcgm_fi_prof_pipe_tensor_active_n, CASE WHEN dcgm_fi_prof_pipe_tensor_active IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_prof_pipe_tensor_active_n,
    sum(coalesce(dcgm_fi_prof_dram_active_n, CASE WHEN dcgm_fi_prof_dram_active IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_prof_dram_active_n,
    sum(coalesce(dcgm_fi_prof_pipe_fp64_active_n, CASE WHEN dcgm_fi_prof_pipe_fp64_active IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_prof_pipe_fp64_active_n,
    sum(coalesce(dcgm_fi_prof_pipe_fp32_active_n, CASE WHEN dcgm_fi_prof_pipe_fp32_active IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_prof_pipe_fp32_active_n,
    sum(coalesce(dcgm_fi_prof_pipe_fp16_active_n, CASE WHEN dcgm_fi_prof_pipe_fp16_active IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_prof_pipe_fp16_active_n,
    sum(coalesce(dcgm_fi_prof_pcie_tx_bytes_n, CASE WHEN dcgm_fi_prof_pcie_tx_bytes IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_prof_pcie_tx_bytes_n,
    sum(coalesce(dcgm_fi_prof_pcie_rx_bytes_n, CASE WHEN dcgm_fi_prof_pcie_rx_bytes IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_prof_pcie_rx_bytes_n,
    sum(coalesce(dcgm_fi_prof_nvlink_tx_bytes_n, CASE WHEN dcgm_fi_prof_nvlink_tx_bytes IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_prof_nvlink_tx_bytes_n,
    sum(coalesce(dcgm_fi_prof_nvlink_rx_bytes_n, CASE WHEN dcgm_fi_prof_nvlink_rx_bytes IS NOT NULL THEN samples ELSE 0 END))::bigint AS dcgm_fi_prof_nvlink_rx_bytes_n
FROM gpu_samples_1m_v2
GROUP BY time_bucket(INTERVAL '1 hour', bucket), gpu
WITH NO DATA;
SELECT add_continuous_aggregate_policy('gpu_samples_1h_v2',
    start_offset => INTERVAL '8 days', end_offset => INTERVAL '1 hour',
    schedule_interval => INTERVAL '30 minutes');
SELECT add_retention_policy('gpu_samples_1h_v2', INTERVAL '2 years');

CREATE VIEW gpu_samples_1m AS
SELECT bucket, gpu, node, samples, dcgm_fi_dev_gpu_util, dcgm_fi_dev_mem_copy_util, dcgm_fi_dev_enc_util,
    dcgm_fi_dev_dec_util, dcgm_fi_dev_fb_free, dcgm_fi_dev_fb_used, dcgm_fi_dev_fb_used_max,
    dcgm_fi_dev_fb_reserved, dcgm_fi_dev_power_usage, dcgm_fi_dev_power_usage_max,
    dcgm_fi_dev_total_energy_consumption, dcgm_fi_dev_gpu_temp, dcgm_fi_dev_gpu_temp_max,
    dcgm_fi_dev_memory_temp, dcgm_fi_dev_memory_temp_max, dcgm_fi_dev_sm_clock, dcgm_fi_dev_mem_clock,
    dcgm_fi_dev_clocks_event_reasons, dcgm_fi_dev_pcie_replay_counter, dcgm_fi_dev_xid_errors,
    dcgm_fi_dev_ecc_sbe_vol_total, dcgm_fi_dev_ecc_dbe_vol_total, dcgm_fi_dev_pstate,
    dcgm_fi_dev_power_mgmt_limit, dcgm_fi_prof_gr_engine_active, dcgm_fi_prof_sm_active,
    dcgm_fi_prof_sm_occupancy, dcgm_fi_prof_pipe_tensor_active, dcgm_fi_prof_dram_active,
    dcgm_fi_prof_pipe_fp64_active, dcgm_fi_prof_pipe_fp32_active, dcgm_fi_prof_pipe_fp16_active,
    dcgm_fi_prof_pcie_tx_bytes, dcgm_fi_prof_pcie_rx_bytes, dcgm_fi_prof_nvlink_tx_bytes,
    dcgm_fi_prof_nvlink_rx_bytes, dcgm_fi_dev_gpu_util_n, dcgm_fi_dev_mem_copy_util_n,
    dcgm_fi_dev_enc_util_n, dcgm_fi_dev_dec_util_n, dcgm_fi_dev_fb_free_n, dcgm_fi_dev_fb_used_n,
    dcgm_fi_dev_fb_reserved_n, dcgm_fi_dev_power_usage_n, dcgm_fi_dev_gpu_temp_n,
    dcgm_fi_dev_memory_temp_n, dcgm_fi_dev_sm_clock_n, dcgm_fi_dev_mem_clock_n, dcgm_fi_dev_pstate_n,
    dcgm_fi_dev_power_mgmt_limit_n, dcgm_fi_prof_gr_engine_active_n, dcgm_fi_prof_sm_active_n,
    dcgm_fi_prof_sm_occupancy_n, dcgm_fi_prof_pipe_tensor_active_n, dcgm_fi_prof_dram_active_n,
    dcgm_fi_prof_pipe_fp64_active_n, dcgm_fi_prof_pipe_fp32_active_n, dcgm_fi_prof_pipe_fp16_active_n,
    dcgm_fi_prof_pcie_tx_bytes_n, dcgm_fi_prof_pcie_rx_bytes_n, dcgm_fi_prof_nvlink_tx_bytes_n,
    dcgm_fi_prof_nvlink_rx_bytes_n
FROM gpu_samples_1m_v2
WHERE bucket >= (SELECT cutover FROM rollup_cutover WHERE rollup = 'gpu_samples_1m')
UNION ALL
SELECT bucket, gpu, node, samples, dcgm_fi_dev_gpu_util, dcgm_fi_dev_mem_copy_util, dcgm_fi_dev_enc_util,
    dcgm_fi_dev_dec_util, dcgm_fi_dev_fb_free, dcgm_fi_dev_fb_used, dcgm_fi_dev_fb_used_max,
    dcgm_fi_dev_fb_reserved, dcgm_fi_dev_power_usage, dcgm_fi_dev_power_usage_max,
    dcgm_fi_dev_total_energy_consumption, dcgm_fi_dev_gpu_temp, dcgm_fi_dev_gpu_temp_max,
    dcgm_fi_dev_memory_temp, dcgm_fi_dev_memory_temp_max, dcgm_fi_dev_sm_clock, dcgm_fi_dev_mem_clock,
    dcgm_fi_dev_clocks_event_reasons, dcgm_fi_dev_pcie_replay_counter, dcgm_fi_dev_xid_errors,
    dcgm_fi_dev_ecc_sbe_vol_total, dcgm_fi_dev_ecc_dbe_vol_total, dcgm_fi_dev_pstate,
    dcgm_fi_dev_power_mgmt_limit, dcgm_fi_prof_gr_engine_active, dcgm_fi_prof_sm_active,
    dcgm_fi_prof_sm_occupancy, dcgm_fi_prof_pipe_tensor_active, dcgm_fi_prof_dram_active,
    dcgm_fi_prof_pipe_fp64_active, dcgm_fi_prof_pipe_fp32_active, dcgm_fi_prof_pipe_fp16_active,
    dcgm_fi_prof_pcie_tx_bytes, dcgm_fi_prof_pcie_rx_bytes, dcgm_fi_prof_nvlink_tx_bytes,
    dcgm_fi_prof_nvlink_rx_bytes, NULL::bigint AS dcgm_fi_dev_gpu_util_n, NULL::bigint AS
    dcgm_fi_dev_mem_copy_util_n, NULL::bigint AS dcgm_fi_dev_enc_util_n, NULL::bigint AS
    dcgm_fi_dev_dec_util_n, NULL::bigint AS dcgm_fi_dev_fb_free_n, NULL::bigint AS
    dcgm_fi_dev_fb_used_n, NULL::bigint AS dcgm_fi_dev_fb_reserved_n, NULL::bigint AS
    dcgm_fi_dev_power_usage_n, NULL::bigint AS dcgm_fi_dev_gpu_temp_n, NULL::bigint AS
    dcgm_fi_dev_memory_temp_n, NULL::bigint AS dcgm_fi_dev_sm_clock_n, NULL::bigint AS
    dcgm_fi_dev_mem_clock_n, NULL::bigint AS dcgm_fi_dev_pstate_n, NULL::bigint AS
    dcgm_fi_dev_power_mgmt_limit_n, NULL::bigint AS dcgm_fi_prof_gr_engine_active_n, NULL::bigint AS
    dcgm_fi_prof_sm_active_n, NULL::bigint AS dcgm_fi_prof_sm_occupancy_n, NULL::bigint AS
    dcgm_fi_prof_pipe_tensor_active_n, NULL::bigint AS dcgm_fi_prof_dram_active_n, NULL::bigint AS
    dcgm_fi_prof_pipe_fp64_active_n, NULL::bigint AS dcgm_fi_prof_pipe_fp32_active_n, NULL::bigint AS
    dcgm_fi_prof_pipe_fp16_active_n, NULL::bigint AS dcgm_fi_prof_pcie_tx_bytes_n, NULL::bigint AS
    dcgm_fi_prof_pcie_rx_bytes_n, NULL::bigint AS dcgm_fi_prof_nvlink_tx_bytes_n, NULL::bigint AS
    dcgm_fi_prof_nvlink_rx_bytes_n
FROM gpu_samples_1m_v1
WHERE bucket < (SELECT cutover FROM rollup_cutover WHERE rollup = 'gpu_samples_1m');

CREATE VIEW gpu_samples_1h AS
SELECT bucket, gpu, node, samples, dcgm_fi_dev_gpu_util, dcgm_fi_dev_mem_copy_util, dcgm_fi_dev_enc_util,
    dcgm_fi_dev_dec_util, dcgm_fi_dev_fb_free, dcgm_fi_dev_fb_used, dcgm_fi_dev_fb_used_max,
    dcgm_fi_dev_fb_reserved, dcgm_fi_dev_power_usage, dcgm_fi_dev_power_usage_max,
    dcgm_fi_dev_total_energy_consumption, dcgm_fi_dev_gpu_temp, dcgm_fi_dev_gpu_temp_max,
    dcgm_fi_dev_memory_temp, dcgm_fi_dev_memory_temp_max, dcgm_fi_dev_sm_clock, dcgm_fi_dev_mem_clock,
    dcgm_fi_dev_clocks_event_reasons, dcgm_fi_dev_pcie_replay_counter, dcgm_fi_dev_xid_errors,
    dcgm_fi_dev_ecc_sbe_vol_total, dcgm_fi_dev_ecc_dbe_vol_total, dcgm_fi_dev_pstate,
    dcgm_fi_dev_power_mgmt_limit, dcgm_fi_prof_gr_engine_active, dcgm_fi_prof_sm_active,
    dcgm_fi_prof_sm_occupancy, dcgm_fi_prof_pipe_tensor_active, dcgm_fi_prof_dram_active,
    dcgm_fi_prof_pipe_fp64_active, dcgm_fi_prof_pipe_fp32_active, dcgm_fi_prof_pipe_fp16_active,
    dcgm_fi_prof_pcie_tx_bytes, dcgm_fi_prof_pcie_rx_bytes, dcgm_fi_prof_nvlink_tx_bytes,
    dcgm_fi_prof_nvlink_rx_bytes, dcgm_fi_dev_gpu_util_n, dcgm_fi_dev_mem_copy_util_n,
    dcgm_fi_dev_enc_util_n, dcgm_fi_dev_dec_util_n, dcgm_fi_dev_fb_free_n, dcgm_fi_dev_fb_used_n,
    dcgm_fi_dev_fb_reserved_n, dcgm_fi_dev_power_usage_n, dcgm_fi_dev_gpu_temp_n,
    dcgm_fi_dev_memory_temp_n, dcgm_fi_dev_sm_clock_n, dcgm_fi_dev_mem_clock_n, dcgm_fi_dev_pstate_n,
    dcgm_fi_dev_power_mgmt_limit_n, dcgm_fi_prof_gr_engine_active_n, dcgm_fi_prof_sm_active_n,
    dcgm_fi_prof_sm_occupancy_n, dcgm_fi_prof_pipe_tensor_active_n, dcgm_fi_prof_dram_active_n,
    dcgm_fi_prof_pipe_fp64_active_n, dcgm_fi_prof_pipe_fp32_active_n, dcgm_fi_prof_pipe_fp16_active_n,
    dcgm_fi_prof_pcie_tx_bytes_n, dcgm_fi_prof_pcie_rx_bytes_n, dcgm_fi_prof_nvlink_tx_bytes_n,
    dcgm_fi_prof_nvlink_rx_bytes_n
FROM gpu_samples_1h_v2
WHERE bucket >= (SELECT cutover FROM rollup_cutover WHERE rollup = 'gpu_samples_1h')
UNION ALL
SELECT bucket, gpu, node, samples, dcgm_fi_dev_gpu_util, dcgm_fi_dev_mem_copy_util, dcgm_fi_dev_enc_util,
    dcgm_fi_dev_dec_util, dcgm_fi_dev_fb_free, dcgm_fi_dev_fb_used, dcgm_fi_dev_fb_used_max,
    dcgm_fi_dev_fb_reserved, dcgm_fi_dev_power_usage, dcgm_fi_dev_power_usage_max,
    dcgm_fi_dev_total_energy_consumption, dcgm_fi_dev_gpu_temp, dcgm_fi_dev_gpu_temp_max,
    dcgm_fi_dev_memory_temp, dcgm_fi_dev_memory_temp_max, dcgm_fi_dev_sm_clock, dcgm_fi_dev_mem_clock,
    dcgm_fi_dev_clocks_event_reasons, dcgm_fi_dev_pcie_replay_counter, dcgm_fi_dev_xid_errors,
    dcgm_fi_dev_ecc_sbe_vol_total, dcgm_fi_dev_ecc_dbe_vol_total, dcgm_fi_dev_pstate,
    dcgm_fi_dev_power_mgmt_limit, dcgm_fi_prof_gr_engine_active, dcgm_fi_prof_sm_active,
    dcgm_fi_prof_sm_occupancy, dcgm_fi_prof_pipe_tensor_active, dcgm_fi_prof_dram_active,
    dcgm_fi_prof_pipe_fp64_active, dcgm_fi_prof_pipe_fp32_active, dcgm_fi_prof_pipe_fp16_active,
    dcgm_fi_prof_pcie_tx_bytes, dcgm_fi_prof_pcie_rx_bytes, dcgm_fi_prof_nvlink_tx_bytes,
    dcgm_fi_prof_nvlink_rx_bytes, NULL::bigint AS dcgm_fi_dev_gpu_util_n, NULL::bigint AS
    dcgm_fi_dev_mem_copy_util_n, NULL::bigint AS dcgm_fi_dev_enc_util_n, NULL::bigint AS
    dcgm_fi_dev_dec_util_n, NULL::bigint AS dcgm_fi_dev_fb_free_n, NULL::bigint AS
    dcgm_fi_dev_fb_used_n, NULL::bigint AS dcgm_fi_dev_fb_reserved_n, NULL::bigint AS
    dcgm_fi_dev_power_usage_n, NULL::bigint AS dcgm_fi_dev_gpu_temp_n, NULL::bigint AS
    dcgm_fi_dev_memory_temp_n, NULL::bigint AS dcgm_fi_dev_sm_clock_n, NULL::bigint AS
    dcgm_fi_dev_mem_clock_n, NULL::bigint AS dcgm_fi_dev_pstate_n, NULL::bigint AS
    dcgm_fi_dev_power_mgmt_limit_n, NULL::bigint AS dcgm_fi_prof_gr_engine_active_n, NULL::bigint AS
    dcgm_fi_prof_sm_active_n, NULL::bigint AS dcgm_fi_prof_sm_occupancy_n, NULL::bigint AS
    dcgm_fi_prof_pipe_tensor_active_n, NULL::bigint AS dcgm_fi_prof_dram_active_n, NULL::bigint AS
    dcgm_fi_prof_pipe_fp64_active_n, NULL::bigint AS dcgm_fi_prof_pipe_fp32_active_n, NULL::bigint AS
    dcgm_fi_prof_pipe_fp16_active_n, NULL::bigint AS dcgm_fi_prof_pcie_tx_bytes_n, NULL::bigint AS
    dcgm_fi_prof_pcie_rx_bytes_n, NULL::bigint AS dcgm_fi_prof_nvlink_tx_bytes_n, NULL::bigint AS
    dcgm_fi_prof_nvlink_rx_bytes_n
FROM gpu_samples_1h_v1
WHERE bucket < (SELECT cutover FROM rollup_cutover WHERE rollup = 'gpu_samples_1h');

-- 1-minute buckets whose raw rows arrived too late for the refresh policies (written by
-- the collector for buckets older than 6 days; refreshed and deleted by Store.maintain()).
CREATE TABLE rollup_pending (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    bucket timestamptz NOT NULL
);
