-- Raw samples, TimescaleDB profile: the same tables as the plain profile's, as
-- hypertables (6-hour chunks), compressed after 1 day (segmented by GPU) and dropped
-- after 14 days, all by TimescaleDB policies. collector/store/schema.py states the
-- columns; a test compares this table with the catalog.

CREATE EXTENSION IF NOT EXISTS timescaledb;

CREATE TABLE gpu_samples (
    ts timestamptz NOT NULL,
    gpu text NOT NULL,
    node text NOT NULL,
    dcgm_fi_dev_gpu_util bigint,
    dcgm_fi_dev_mem_copy_util bigint,
    dcgm_fi_dev_enc_util bigint,
    dcgm_fi_dev_dec_util bigint,
    dcgm_fi_dev_fb_free bigint,
    dcgm_fi_dev_fb_used bigint,
    dcgm_fi_dev_fb_reserved bigint,
    dcgm_fi_dev_power_usage double precision,
    dcgm_fi_dev_total_energy_consumption bigint,
    dcgm_fi_dev_gpu_temp bigint,
    dcgm_fi_dev_memory_temp bigint,
    dcgm_fi_dev_sm_clock bigint,
    dcgm_fi_dev_mem_clock bigint,
    dcgm_fi_dev_clocks_event_reasons bigint,
    dcgm_fi_dev_pcie_replay_counter bigint,
    dcgm_fi_dev_xid_errors bigint,
    dcgm_fi_dev_ecc_sbe_vol_total bigint,
    dcgm_fi_dev_ecc_dbe_vol_total bigint,
    dcgm_fi_dev_pstate bigint,
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
    extra jsonb,
    CONSTRAINT gpu_samples_key UNIQUE (gpu, ts)
);
SELECT create_hypertable('gpu_samples', by_range('ts', INTERVAL '6 hours'));
ALTER TABLE gpu_samples SET (
    timescaledb.compress,
    timescaledb.compress_segmentby = 'gpu',
    timescaledb.compress_orderby = 'ts DESC'
);
SELECT add_compression_policy('gpu_samples', INTERVAL '1 day');
SELECT add_retention_policy('gpu_samples', INTERVAL '14 days');

CREATE TABLE process_samples (
    ts timestamptz NOT NULL,
    gpu text NOT NULL,
    pid integer NOT NULL,
    name text,
    namespace text,
    pod text,
    container text,
    service text,
    used_memory_mib double precision,
    sm_util double precision,
    mem_util double precision,
    CONSTRAINT process_samples_key UNIQUE (gpu, ts, pid)
);
SELECT create_hypertable('process_samples', by_range('ts', INTERVAL '6 hours'));
ALTER TABLE process_samples SET (
    timescaledb.compress,
    timescaledb.compress_segmentby = 'gpu',
    timescaledb.compress_orderby = 'ts DESC, pid'
);
SELECT add_compression_policy('process_samples', INTERVAL '1 day');
SELECT add_retention_policy('process_samples', INTERVAL '14 days');
