-- Rollups, TimescaleDB profile: continuous aggregates with the plain profile's table
-- names and columns (time_bucket, as continuous aggregates require; its minute and
-- hour buckets equal date_bin's on the 2000-01-01 UTC origin). Real-time aggregation
-- is on (materialized_only = false), so the newest buckets are read from raw rows until
-- the refresh policy materializes them. The 1-hour rollup is built on the 1-minute one
-- (averages weighted by sample counts). Refresh windows reach 7 days (1h: 8 days) back
-- so late data from agents' spools is folded in; retention: 90 days (1m), 2 years (1h).
--
-- Per metric column: gauges hold the bucket's average, counters their largest (latest)
-- value, the clock-event bitmask every reason seen (bit_or), the last-XID gauge its
-- largest code; *_max columns hold the peak of a few gauges.

CREATE MATERIALIZED VIEW gpu_samples_1m
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
    avg(dcgm_fi_prof_nvlink_rx_bytes::double precision) AS dcgm_fi_prof_nvlink_rx_bytes
FROM gpu_samples
GROUP BY time_bucket(INTERVAL '1 minute', ts), gpu
WITH NO DATA;
SELECT add_continuous_aggregate_policy('gpu_samples_1m',
    start_offset => INTERVAL '7 days', end_offset => INTERVAL '1 minute',
    schedule_interval => INTERVAL '1 minute');
SELECT add_retention_policy('gpu_samples_1m', INTERVAL '90 days');

CREATE MATERIALIZED VIEW gpu_samples_1h
WITH (timescaledb.continuous, timescaledb.materialized_only = false) AS
SELECT
    time_bucket(INTERVAL '1 hour', bucket) AS bucket,
    gpu,
    max(node) AS node,
    sum(samples)::bigint AS samples,
    (sum(dcgm_fi_dev_gpu_util * samples) / NULLIF(sum(CASE WHEN dcgm_fi_dev_gpu_util IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_dev_gpu_util,
    (sum(dcgm_fi_dev_mem_copy_util * samples) / NULLIF(sum(CASE WHEN dcgm_fi_dev_mem_copy_util IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_dev_mem_copy_util,
    (sum(dcgm_fi_dev_enc_util * samples) / NULLIF(sum(CASE WHEN dcgm_fi_dev_enc_util IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_dev_enc_util,
    (sum(dcgm_fi_dev_dec_util * samples) / NULLIF(sum(CASE WHEN dcgm_fi_dev_dec_util IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_dev_dec_util,
    (sum(dcgm_fi_dev_fb_free * samples) / NULLIF(sum(CASE WHEN dcgm_fi_dev_fb_free IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_dev_fb_free,
    (sum(dcgm_fi_dev_fb_used * samples) / NULLIF(sum(CASE WHEN dcgm_fi_dev_fb_used IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_dev_fb_used,
    max(dcgm_fi_dev_fb_used_max) AS dcgm_fi_dev_fb_used_max,
    (sum(dcgm_fi_dev_fb_reserved * samples) / NULLIF(sum(CASE WHEN dcgm_fi_dev_fb_reserved IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_dev_fb_reserved,
    (sum(dcgm_fi_dev_power_usage * samples) / NULLIF(sum(CASE WHEN dcgm_fi_dev_power_usage IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_dev_power_usage,
    max(dcgm_fi_dev_power_usage_max) AS dcgm_fi_dev_power_usage_max,
    max(dcgm_fi_dev_total_energy_consumption) AS dcgm_fi_dev_total_energy_consumption,
    (sum(dcgm_fi_dev_gpu_temp * samples) / NULLIF(sum(CASE WHEN dcgm_fi_dev_gpu_temp IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_dev_gpu_temp,
    max(dcgm_fi_dev_gpu_temp_max) AS dcgm_fi_dev_gpu_temp_max,
    (sum(dcgm_fi_dev_memory_temp * samples) / NULLIF(sum(CASE WHEN dcgm_fi_dev_memory_temp IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_dev_memory_temp,
    max(dcgm_fi_dev_memory_temp_max) AS dcgm_fi_dev_memory_temp_max,
    (sum(dcgm_fi_dev_sm_clock * samples) / NULLIF(sum(CASE WHEN dcgm_fi_dev_sm_clock IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_dev_sm_clock,
    (sum(dcgm_fi_dev_mem_clock * samples) / NULLIF(sum(CASE WHEN dcgm_fi_dev_mem_clock IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_dev_mem_clock,
    bit_or(dcgm_fi_dev_clocks_event_reasons) AS dcgm_fi_dev_clocks_event_reasons,
    max(dcgm_fi_dev_pcie_replay_counter) AS dcgm_fi_dev_pcie_replay_counter,
    max(dcgm_fi_dev_xid_errors) AS dcgm_fi_dev_xid_errors,
    max(dcgm_fi_dev_ecc_sbe_vol_total) AS dcgm_fi_dev_ecc_sbe_vol_total,
    max(dcgm_fi_dev_ecc_dbe_vol_total) AS dcgm_fi_dev_ecc_dbe_vol_total,
    (sum(dcgm_fi_dev_pstate * samples) / NULLIF(sum(CASE WHEN dcgm_fi_dev_pstate IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_dev_pstate,
    (sum(dcgm_fi_dev_power_mgmt_limit * samples) / NULLIF(sum(CASE WHEN dcgm_fi_dev_power_mgmt_limit IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_dev_power_mgmt_limit,
    (sum(dcgm_fi_prof_gr_engine_active * samples) / NULLIF(sum(CASE WHEN dcgm_fi_prof_gr_engine_active IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_prof_gr_engine_active,
    (sum(dcgm_fi_prof_sm_active * samples) / NULLIF(sum(CASE WHEN dcgm_fi_prof_sm_active IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_prof_sm_active,
    (sum(dcgm_fi_prof_sm_occupancy * samples) / NULLIF(sum(CASE WHEN dcgm_fi_prof_sm_occupancy IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_prof_sm_occupancy,
    (sum(dcgm_fi_prof_pipe_tensor_active * samples) / NULLIF(sum(CASE WHEN dcgm_fi_prof_pipe_tensor_active IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_prof_pipe_tensor_active,
    (sum(dcgm_fi_prof_dram_active * samples) / NULLIF(sum(CASE WHEN dcgm_fi_prof_dram_active IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_prof_dram_active,
    (sum(dcgm_fi_prof_pipe_fp64_active * samples) / NULLIF(sum(CASE WHEN dcgm_fi_prof_pipe_fp64_active IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_prof_pipe_fp64_active,
    (sum(dcgm_fi_prof_pipe_fp32_active * samples) / NULLIF(sum(CASE WHEN dcgm_fi_prof_pipe_fp32_active IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_prof_pipe_fp32_active,
    (sum(dcgm_fi_prof_pipe_fp16_active * samples) / NULLIF(sum(CASE WHEN dcgm_fi_prof_pipe_fp16_active IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_prof_pipe_fp16_active,
    (sum(dcgm_fi_prof_pcie_tx_bytes * samples) / NULLIF(sum(CASE WHEN dcgm_fi_prof_pcie_tx_bytes IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_prof_pcie_tx_bytes,
    (sum(dcgm_fi_prof_pcie_rx_bytes * samples) / NULLIF(sum(CASE WHEN dcgm_fi_prof_pcie_rx_bytes IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_prof_pcie_rx_bytes,
    (sum(dcgm_fi_prof_nvlink_tx_bytes * samples) / NULLIF(sum(CASE WHEN dcgm_fi_prof_nvlink_tx_bytes IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_prof_nvlink_tx_bytes,
    (sum(dcgm_fi_prof_nvlink_rx_bytes * samples) / NULLIF(sum(CASE WHEN dcgm_fi_prof_nvlink_rx_bytes IS NOT NULL THEN samples END), 0))::double precision AS dcgm_fi_prof_nvlink_rx_bytes
FROM gpu_samples_1m
GROUP BY time_bucket(INTERVAL '1 hour', bucket), gpu
WITH NO DATA;
SELECT add_continuous_aggregate_policy('gpu_samples_1h',
    start_offset => INTERVAL '8 days', end_offset => INTERVAL '1 hour',
    schedule_interval => INTERVAL '30 minutes');
SELECT add_retention_policy('gpu_samples_1h', INTERVAL '2 years');

-- Per pod/service use of each GPU, for service history.
CREATE MATERIALIZED VIEW process_samples_1m
WITH (timescaledb.continuous, timescaledb.materialized_only = false) AS
SELECT
    time_bucket(INTERVAL '1 minute', ts) AS bucket,
    gpu,
    namespace,
    pod,
    service,
    count(*) AS samples,
    avg(sm_util) AS sm_util,
    avg(mem_util) AS mem_util,
    avg(used_memory_mib) AS used_memory_mib,
    max(used_memory_mib) AS used_memory_mib_max
FROM process_samples
GROUP BY time_bucket(INTERVAL '1 minute', ts), gpu, namespace, pod, service
WITH NO DATA;
SELECT add_continuous_aggregate_policy('process_samples_1m',
    start_offset => INTERVAL '7 days', end_offset => INTERVAL '1 minute',
    schedule_interval => INTERVAL '1 minute');
SELECT add_retention_policy('process_samples_1m', INTERVAL '90 days');
