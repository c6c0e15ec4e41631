-- Where each partition's consumer must re-read from: the oldest last-keyframe offset among
-- the GPUs of that partition. Frames are deltas, so a fresh decoder needs a keyframe; the
-- consumer seeks here on assignment and idempotent writes absorb what is read twice.
CREATE TABLE IF NOT EXISTS ingest_positions (
    topic         text        NOT NULL,
    partition     integer     NOT NULL,
    resume_offset bigint      NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition)
);
