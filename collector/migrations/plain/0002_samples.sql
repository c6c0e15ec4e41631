-- Raw samples, plain PostgreSQL profile.
--
-- One column per catalog metric (collector/store/schema.py states them; a test
-- compares this table with the catalog), NULL where a GPU did not report the metric,
-- and extra (jsonb) for metric keys the catalog does not know. The unique keys make
-- redelivered samples a no-op (INSERT ... ON CONFLICT DO NOTHING); they include ts,
-- as a unique constraint on a partitioned table must.
--
-- Both tables are partitioned by day (UTC). The collector creates partitions ahead
-- (Store.open and Store.maintain) and drops those older than the raw retention; the
-- DEFAULT partition takes any timestamp outside them, so no write ever fails for want
-- of a partition. BRIN indexes on ts serve the rollups' time-range scans cheaply.

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
) PARTITION BY RANGE (ts);
CREATE TABLE gpu_samples_default PARTITION OF gpu_samples DEFAULT;
CREATE INDEX gpu_samples_ts ON gpu_samples USING brin (ts);

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
) PARTITION BY RANGE (ts);
CREATE TABLE process_samples_default PARTITION OF process_samples DEFAULT;
CREATE INDEX process_samples_ts ON process_samples USING brin (ts);

-- 1-minute buckets that received samples since the last Store.maintain(), which
-- re-aggregates exactly those (late data included) and deletes the rows it saw. Each
-- write batch appends its buckets; there is no unique key on purpose, so writers never
-- wait on each other or on a running maintenance for a shared bucket row.
CREATE TABLE rollup_pending (
    bucket timestamptz NOT NULL
);
