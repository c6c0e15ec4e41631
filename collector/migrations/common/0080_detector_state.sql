-- The detectors' state of each node (collector/detect/checkpoint.py), so a restart, an upgrade of
-- another replica or a rebalance keeps baselines and open anomalies: one row per node (the
-- agent keys its messages by node, so a node's GPUs move between replicas together), written
-- in the transaction that stores the anomalies it holds. shape names the state classes' fields;
-- a row of another shape is not loaded. last_ts is the newest record folded in.
CREATE TABLE IF NOT EXISTS detector_state (
    node     text        PRIMARY KEY,
    shape    text        NOT NULL,
    last_ts  timestamptz NOT NULL,
    state    bytea       NOT NULL,
    saved_at timestamptz NOT NULL DEFAULT now()
);
