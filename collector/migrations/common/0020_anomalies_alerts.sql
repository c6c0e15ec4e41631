-- Anomalies the detectors found, the alerts raised from them, silences, and the outbox of
-- notifications still to send. The REST API reads anomalies, alerts and silences (and
-- writes silences); the collector's detection service writes the rest.
CREATE TABLE IF NOT EXISTS anomalies (
    id          bigserial   PRIMARY KEY,
    fingerprint text        NOT NULL,            -- kind + node + GPU: one series of anomalies
    kind        text        NOT NULL,
    severity    text        NOT NULL,
    gpu         text,
    node        text,
    namespace   text,
    pod         text,
    service     text,
    metric      text,
    start_ts    timestamptz NOT NULL,            -- sample time at which the detector fired
    end_ts      timestamptz NULL,                -- null while open
    summary     text        NOT NULL,
    causes      jsonb       NOT NULL DEFAULT '[]',
    UNIQUE (fingerprint, start_ts)
);
CREATE INDEX IF NOT EXISTS anomalies_open ON anomalies (start_ts) WHERE end_ts IS NULL;
CREATE INDEX IF NOT EXISTS anomalies_start ON anomalies (start_ts DESC);

CREATE TABLE IF NOT EXISTS alerts (
    id          bigserial   PRIMARY KEY,
    rule        text        NOT NULL,
    fingerprint text        NOT NULL,            -- the alert's: rule + anomaly series
    status      text        NOT NULL CHECK (status IN ('firing', 'resolved')),
    severity    text        NOT NULL,
    namespace   text,
    service     text,
    gpu         text,
    node        text,
    summary     text        NOT NULL,
    labels      jsonb       NOT NULL DEFAULT '{}',
    starts_at   timestamptz NOT NULL,
    ends_at     timestamptz,
    anomaly_id  bigint,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    silenced    boolean     NOT NULL DEFAULT false,
    UNIQUE (rule, fingerprint, starts_at)
);
CREATE INDEX IF NOT EXISTS alerts_status ON alerts (status, starts_at DESC);

CREATE TABLE IF NOT EXISTS silences (
    id          bigserial   PRIMARY KEY,
    matchers    jsonb       NOT NULL,            -- object label -> value; all must match
    starts_at   timestamptz NOT NULL DEFAULT now(),
    ends_at     timestamptz NOT NULL,
    created_by  text,
    comment     text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS silences_active ON silences (ends_at);

-- Notifications to send, written in the same transaction as the alert change that caused
-- them, so a collector restart loses none; a unique key makes enqueueing idempotent and
-- FOR UPDATE SKIP LOCKED lets several replicas send without sending one twice. Secrets
-- (webhook URLs, routing keys) are never stored: only the channel's name.
CREATE TABLE IF NOT EXISTS alert_outbox (
    id              bigserial   PRIMARY KEY,
    idem_key        text        NOT NULL UNIQUE,
    channel         text        NOT NULL,
    payload         jsonb       NOT NULL,
    status          text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz
);
CREATE INDEX IF NOT EXISTS alert_outbox_pending ON alert_outbox (next_attempt_at) WHERE status = 'pending';
