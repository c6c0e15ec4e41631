-- Service usage counts the seconds a GPU was held, from raw samples (issue 11).
--
-- Until now a pod-minute's GPU-seconds were 60 s times the share of the GPU's samples in
-- that minute that listed the pod, so a GPU sampled for 2 s of a minute (a short run, a
-- start, an outage) was billed the whole minute; memory was the average of the pod's
-- processes instead of their sum. collector/api/usage.py now reads raw samples: each GPU
-- sample stands for the time until that GPU's next sample (at most 30 s; the last one
-- before a longer silence for the time since the one before it), and a pod's memory on a
-- GPU is the sum of its processes' memory in that sample.
--
-- New columns, per row: running_seconds = seconds in which the pod (service) held at
-- least one GPU (per minute: its longest-held GPU; summed over minutes in the hourly
-- table); memory_mib_seconds = the pod's memory on all its GPUs x the seconds held.
-- gpu_minutes (pod, GPU, minute holdings) and memory_mib (= memory_mib_seconds / 60,
-- MiB-minutes) stay filled for queries written against them (the Grafana dashboards).
-- Rows written before this migration get approximations (their minute's average
-- holding); the rollup recomputes the last hours from raw samples on its next rounds.
--
-- service_usage_minutes remembers, per minute computed, the number of GPU samples the
-- 1-minute rollup held then; a minute whose count has changed since (late data from an
-- agent's spool) is computed again.

ALTER TABLE service_pod_usage_1m ADD COLUMN running_seconds double precision NOT NULL DEFAULT 0,
    ADD COLUMN memory_mib_seconds double precision;
ALTER TABLE service_usage_1m ADD COLUMN running_seconds double precision NOT NULL DEFAULT 0,
    ADD COLUMN memory_mib_seconds double precision;
ALTER TABLE service_pod_usage_1h ADD COLUMN running_seconds double precision NOT NULL DEFAULT 0,
    ADD COLUMN memory_mib_seconds double precision;

UPDATE service_pod_usage_1m SET running_seconds = COALESCE(gpu_seconds / NULLIF(gpu_minutes, 0), 0),
    memory_mib_seconds = memory_mib * gpu_seconds / NULLIF(gpu_minutes, 0);
UPDATE service_usage_1m SET running_seconds = COALESCE(gpu_seconds / NULLIF(gpu_minutes, 0), 0),
    memory_mib_seconds = memory_mib * gpu_seconds / NULLIF(gpu_minutes, 0);
UPDATE service_pod_usage_1h SET running_seconds = LEAST(3600, COALESCE(60 * gpu_seconds / NULLIF(gpu_minutes, 0), 0)),
    memory_mib_seconds = memory_mib * gpu_seconds / NULLIF(gpu_minutes, 0);

CREATE TABLE service_usage_minutes (
    bucket timestamptz PRIMARY KEY,
    gpu_samples bigint NOT NULL
);
