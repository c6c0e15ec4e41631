-- Messages that could not be dead-lettered to Kafka (the DLQ topic refused them, or the
-- broker was away), so that nothing the collector set aside is lost and its partition
-- still moves on. Written by collector/deadletter.py; one row per source message
-- (topic, partition, offset), so a re-read after a restart adds nothing. value holds at
-- most the first MiB of the message (size says how large it was, sha256 names it).
CREATE TABLE IF NOT EXISTS dead_letters (
    topic         text        NOT NULL,
    partition     integer     NOT NULL,
    "offset"      bigint      NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT now(),
    reason        text        NOT NULL,
    why_not_kafka text        NOT NULL,
    size          bigint      NOT NULL,
    sha256        text        NOT NULL,
    key           bytea,
    headers       jsonb       NOT NULL DEFAULT '[]',
    value         bytea,
    PRIMARY KEY (topic, partition, "offset")
);
CREATE INDEX IF NOT EXISTS dead_letters_recorded_at ON dead_letters (recorded_at);
