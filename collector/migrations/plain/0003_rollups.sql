-- Rollups, plain PostgreSQL profile: ordinary tables with the names and columns of
-- the TimescaleDB profile's continuous aggregates. Store.maintain() fills them from
-- the raw tables (collector/store/maintenance.py, date_bin on a UTC origin) and deletes
-- rows past their retention: 90 days for the 1-minute rollups, 2 years for 1-hour.
--
-- Per metric column: gauges hold the bucket's average, counters their largest (latest)
-- value, the clock-event bitmask every reason seen (bit_or), the last-XID gauge its
-- largest code; *_max columns hold the peak of a few gauges.

CREATE TABLE gpu_samples_1m (
    bucket timestamptz NOT NULL,
    gpu text NOT NULL,
    node text NOT NULL,
    samples bigint NOT NULL,
    dcgm_fi_dev_gpu_util double precision,
    dcgm_fi_dev_mem_copy_util double precision,
    dcgm_fi_dev_enc_util double precision,
    dcgm_fi_dev_dec_util double precision,
    dcgm_fi_dev_fb_free double precision,
    dcgm_fi_dev_fb_used double precision,
    dcgm_fi_dev_fb_used_max bigint,
    dcgm_fi_dev_fb_reserved double precision,
    dcgm_fi_dev_power_usage double precision,
    dcgm_fi_dev_power_usage_max double precision,
    dcgm_fi_dev_total_energy_consumption bigint,
    dcgm_fi_dev_gpu_temp double precision,
    dcgm_fi_dev_gpu_temp_max bigint,
    dcgm_fi_dev_memory_temp double precision,
    dcgm_fi_dev_memory_temp_max bigint,
    dcgm_fi_dev_sm_clock double precision,
    dcgm_fi_dev_mem_clock double precision,
    dcgm_fi_dev_clocks_event_reasons bigint,
    dcgm_fi_dev_pcie_replay_counter bigint,
    dcgm_fi_dev_xid_errors bigint,
    dcgm_fi_dev_ecc_sbe_vol_total bigint,
    dcgm_fi_dev_ecc_dbe_vol_total bigint,
    dcgm_fi_dev_pstate double precision,
    dcgm_fi_dev_power_mgmt_limit double precision,
    dcgm_fi_prof_gr_engine_active double precision,
    dcgm_fi_prof_sm_active double precision,
    dcgm_fi_prof_sm_occupancy double precision,
    dcgm_fi_prof_pipe_tensor_active double precision,
    dcgm_fi_prof_dram_active double precision,
    dcgm_fi_prof_pipe_fp64_active double precision,
    dcgm_fi_prof_pipe_fp32_active double precision,
    dcgm_fi_prof_pipe_fp16_active double precision,
    dcgm_fi_prof_pcie_tx_bytes double precision,
    dcgm_fi_prof_pcie_rx_bytes double precision,
    dcgm_fi_prof_nvlink_tx_bytes double precision,
    dcgm_fi_prof_nvlink_rx_bytes double precision,
    PRIMARY KEY (gpu, bucket)
);
CREATE INDEX gpu_samples_1m_bucket ON gpu_samples_1m (bucket);

CREATE TABLE gpu_samples_1h (
    bucket timestamptz NOT NULL,
    gpu text NOT NULL,
    node text NOT NULL,
    samples bigint NOT NULL,
    dcgm_fi_dev_gpu_util double precision,
    dcgm_fi_dev_mem_copy_util double precision,
    dcgm_fi_dev_enc_util double precision,
    dcgm_fi_dev_dec_util double precision,
    dcgm_fi_dev_fb_free double precision,
    dcgm_fi_dev_fb_used double precision,
    dcgm_fi_dev_fb_used_max bigint,
    dcgm_fi_dev_fb_reserved double precision,
    dcgm_fi_dev_power_usage double precision,
    dcgm_fi_dev_power_usage_max double precision,
    dcgm_fi_dev_total_energy_consumption bigint,
    dcgm_fi_dev_gpu_temp double precision,
    dcgm_fi_dev_gpu_temp_max bigint,
    dcgm_fi_dev_memory_temp double precision,
    dcgm_fi_dev_memory_temp_max bigint,
    dcgm_fi_dev_sm_clock double precision,
    dcgm_fi_dev_mem_clock double precision,
    dcgm_fi_dev_clocks_event_reasons bigint,
    dcgm_fi_dev_pcie_replay_counter bigint,
    dcgm_fi_dev_xid_errors bigint,
    dcgm_fi_dev_ecc_sbe_vol_total bigint,
    dcgm_fi_dev_ecc_dbe_vol_total bigint,
    dcgm_fi_dev_pstate double precision,
    dcgm_fi_dev_power_mgmt_limit double precision,
    dcgm_fi_prof_gr_engine_active double precision,
    dcgm_fi_prof_sm_active double precision,
    dcgm_fi_prof_sm_occupancy double precision,
    dcgm_fi_prof_pipe_tensor_active double precision,
    dcgm_fi_prof_dram_active double precision,
    dcgm_fi_prof_pipe_fp64_active double precision,
    dcgm_fi_prof_pipe_fp32_active double precision,
    dcgm_fi_prof_pipe_fp16_active double precision,
    dcgm_fi_prof_pcie_tx_bytes double precision,
    dcgm_fi_prof_pcie_rx_bytes double precision,
    dcgm_fi_prof_nvlink_tx_bytes double precision,
    dcgm_fi_prof_nvlink_rx_bytes double precision,
    PRIMARY KEY (gpu, bucket)
);
CREATE INDEX gpu_samples_1h_bucket ON gpu_samples_1h (bucket);

-- Per pod/service use of each GPU, for service history. namespace, pod and service
-- may be NULL (a process without Kubernetes identity), so this table has no unique
-- key: maintenance replaces whole buckets (DELETE, then INSERT ... SELECT).
CREATE TABLE process_samples_1m (
    bucket timestamptz NOT NULL,
    gpu text NOT NULL,
    namespace text,
    pod text,
    service text,
    samples bigint NOT NULL,
    sm_util double precision,
    mem_util double precision,
    used_memory_mib double precision,
    used_memory_mib_max double precision
);
CREATE INDEX process_samples_1m_bucket ON process_samples_1m (bucket);
CREATE INDEX process_samples_1m_service ON process_samples_1m (service, bucket);
