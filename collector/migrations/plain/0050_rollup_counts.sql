-- Rollups, plain PostgreSQL profile: per averaged gauge, how many samples of the bucket
-- had it (<col>_n, collector/store/schema.py), so that coarser steps weight each bucket's
-- average by that count, not by all of its samples (a minute in which a metric was missing
-- from some samples would otherwise count as much as one in which it never was). Rows
-- rolled up before this migration have no counts (NULL); they are weighted by their sample
-- count where they have a value, as before. Store.maintain() fills the counts from now on.

ALTER TABLE gpu_samples_1m
    ADD COLUMN dcgm_fi_dev_gpu_util_n bigint,
    ADD COLUMN dcgm_fi_dev_mem_copy_util_n bigint,
    ADD COLUMN dcgm_fi_dev_enc_util_n bigint,
    ADD COLUMN dcgm_fi_dev_dec_util_n bigint,
    ADD COLUMN dcgm_fi_dev_fb_free_n bigint,
    ADD COLUMN dcgm_fi_dev_fb_used_n bigint,
    ADD COLUMN dcgm_fi_dev_fb_reserved_n bigint,
    ADD COLUMN dcgm_fi_dev_power_usage_n bigint,
    ADD COLUMN dcgm_fi_dev_gpu_temp_n bigint,
    ADD COLUMN dcgm_fi_dev_memory_temp_n bigint,
    ADD COLUMN dcgm_fi_dev_sm_clock_n bigint,
    ADD COLUMN dcgm_fi_dev_mem_clock_n bigint,
    ADD COLUMN dcgm_fi_dev_pstate_n bigint,
    ADD COLUMN dcgm_fi_dev_power_mgmt_limit_n bigint,
    ADD COLUMN dcgm_fi_prof_gr_engine_active_n bigint,
    ADD COLUMN dcgm_fi_prof_sm_active_n bigint,
    ADD COLUMN dcgm_fi_prof_sm_occupancy_n bigint,
    ADD COLUMN dcgm_fi_prof_pipe_tensor_active_n bigint,
    ADD COLUMN dcgm_fi_prof_dram_active_n bigint,
    ADD COLUMN dcgm_fi_prof_pipe_fp64_active_n bigint,
    ADD COLUMN dcgm_fi_prof_pipe_fp32_active_n bigint,
    ADD COLUMN dcgm_fi_prof_pipe_fp16_active_n bigint,
    ADD COLUMN dcgm_fi_prof_pcie_tx_bytes_n bigint,
    ADD COLUMN dcgm_fi_prof_pcie_rx_bytes_n bigint,
    ADD COLUMN dcgm_fi_prof_nvlink_tx_bytes_n bigint,
    ADD COLUMN dcgm_fi_prof_nvlink_rx_bytes_n bigint;

ALTER TABLE gpu_samples_1h
    ADD COLUMN dcgm_fi_dev_gpu_util_n bigint,
    ADD COLUMN dcgm_fi_dev_mem_copy_util_n bigint,
    ADD COLUMN dcgm_fi_dev_enc_util_n bigint,
    ADD COLUMN dcgm_fi_dev_dec_util_n bigint,
    ADD COLUMN dcgm_fi_dev_fb_free_n bigint,
    ADD COLUMN dcgm_fi_dev_fb_used_n bigint,
    ADD COLUMN dcgm_fi_dev_fb_reserved_n bigint,
    ADD COLUMN dcgm_fi_dev_power_usage_n bigint,
    ADD COLUMN dcgm_fi_dev_gpu_temp_n bigint,
    ADD COLUMN dcgm_fi_dev_memory_temp_n bigint,
    ADD COLUMN dcgm_fi_dev_sm_clock_n bigint,
    ADD COLUMN dcgm_fi_dev_mem_clock_n bigint,
    ADD COLUMN dcgm_fi_dev_pstate_n bigint,
    ADD COLUMN dcgm_fi_dev_power_mgmt_limit_n bigint,
    ADD COLUMN dcgm_fi_prof_gr_engine_active_n bigint,
    ADD COLUMN dcgm_fi_prof_sm_active_n bigint,
    ADD COLUMN dcgm_fi_prof_sm_occupancy_n bigint,
    ADD COLUMN dcgm_fi_prof_pipe_tensor_active_n bigint,
    ADD COLUMN dcgm_fi_prof_dram_active_n bigint,
    ADD COLUMN dcgm_fi_prof_pipe_fp64_active_n bigint,
    ADD COLUMN dcgm_fi_prof_pipe_fp32_active_n bigint,
    ADD COLUMN dcgm_fi_prof_pipe_fp16_active_n bigint,
    ADD COLUMN dcgm_fi_prof_pcie_tx_bytes_n bigint,
    ADD COLUMN dcgm_fi_prof_pcie_rx_bytes_n bigint,
    ADD COLUMN dcgm_fi_prof_nvlink_tx_bytes_n bigint,
    ADD COLUMN dcgm_fi_prof_nvlink_rx_bytes_n bigint;
