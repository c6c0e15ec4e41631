-- Per-service GPU usage, for service history and cost (collector/api/usage.py fills these
-- tables; collector/api/history.py reads them). Same on both storage profiles: they are
-- built from the 1-minute rollups, which both profiles expose under the same names.
--
-- Why tables of their own: a service's history joins each pod's process rollup row with
-- its GPU's rollup row of the same minute; for a service on hundreds of GPUs that is a
-- million-row join per day. service_pod_usage_1m keeps the join's result, one row per
-- pod and minute; service_usage_1m sums it per service and minute (the steps of a
-- history), service_pod_usage_1h per pod and hour (the per-pod totals of long ranges).
--
-- Per row: gpu_minutes = (pod, GPU, minute) holdings; gpu_seconds = 60 s x the share of
-- the GPU's samples that listed the pod, summed; *_weighted = sum of gpu_seconds x the
-- GPU's minute average, *_weight = the gpu_seconds where that average was known (so
-- averages can be rebuilt over any range); memory_mib = the pods' process memory summed
-- over GPUs and minutes; energy_j = sum of gpu_seconds x the GPU's average power.

CREATE TABLE service_pod_usage_1m (
    bucket timestamptz NOT NULL,
    namespace text,
    service text NOT NULL,
    pod text,
    gpu_minutes integer NOT NULL,
    gpu_seconds double precision NOT NULL,
    sm_active_weighted double precision NOT NULL DEFAULT 0,
    sm_active_weight double precision NOT NULL DEFAULT 0,
    tensor_active_weighted double precision NOT NULL DEFAULT 0,
    tensor_active_weight double precision NOT NULL DEFAULT 0,
    memory_mib double precision,
    energy_j double precision NOT NULL DEFAULT 0
);
CREATE INDEX service_pod_usage_1m_service ON service_pod_usage_1m (service, bucket);
CREATE INDEX service_pod_usage_1m_bucket ON service_pod_usage_1m (bucket);

CREATE TABLE service_usage_1m (
    bucket timestamptz NOT NULL,
    namespace text,
    service text NOT NULL,
    gpu_minutes integer NOT NULL,
    gpu_seconds double precision NOT NULL,
    sm_active_weighted double precision NOT NULL DEFAULT 0,
    sm_active_weight double precision NOT NULL DEFAULT 0,
    tensor_active_weighted double precision NOT NULL DEFAULT 0,
    tensor_active_weight double precision NOT NULL DEFAULT 0,
    memory_mib double precision,
    energy_j double precision NOT NULL DEFAULT 0
);
CREATE INDEX service_usage_1m_service ON service_usage_1m (service, bucket);
CREATE INDEX service_usage_1m_bucket ON service_usage_1m (bucket);

CREATE TABLE service_pod_usage_1h (
    bucket timestamptz NOT NULL,
    namespace text,
    service text NOT NULL,
    pod text,
    gpu_minutes integer NOT NULL,
    gpu_seconds double precision NOT NULL,
    sm_active_weighted double precision NOT NULL DEFAULT 0,
    sm_active_weight double precision NOT NULL DEFAULT 0,
    tensor_active_weighted double precision NOT NULL DEFAULT 0,
    tensor_active_weight double precision NOT NULL DEFAULT 0,
    memory_mib double precision,
    energy_j double precision NOT NULL DEFAULT 0
);
CREATE INDEX service_pod_usage_1h_service ON service_pod_usage_1h (service, bucket);
CREATE INDEX service_pod_usage_1h_bucket ON service_pod_usage_1h (bucket);
