-- CPU profiles taken when an anomaly opened (a throughput_drop on a GPU whose process is
-- Python): the collector records the request ('requested'), the agent's answer fills the row
-- in. One row per anomaly; status 'captured' when some process was sampled, else the reason it
-- was not (telemetry/profile.py's statuses); processes holds each process's pid, status,
-- reason, command and samples; stacks the merged folded stacks (frame;frame;... -> samples),
-- each under a root frame naming its process. Written by collector/store/profiles.py.
CREATE TABLE IF NOT EXISTS anomaly_profiles (
    anomaly_id   bigint      PRIMARY KEY REFERENCES anomalies (id) ON DELETE CASCADE,
    status       text        NOT NULL,
    reason       text        NOT NULL DEFAULT '',
    requested_at timestamptz NOT NULL DEFAULT now(),
    captured_at  timestamptz,
    samples      bigint      NOT NULL DEFAULT 0,
    processes    jsonb       NOT NULL DEFAULT '[]',
    stacks       jsonb       NOT NULL DEFAULT '[]'
);
