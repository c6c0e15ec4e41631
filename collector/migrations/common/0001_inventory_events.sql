-- Shared by both profiles: the GPU inventory and the event log.
--
-- gpu_inventory: one row per GPU or MIG instance ever seen, upserted by every write
-- batch (first_seen only moves earlier, last_seen only later; the descriptive columns
-- follow the newest sample). events: XIDs, ECC errors, throttling starts and ends...,
-- small and kept without a retention limit. A NULL code (an event without a number)
-- is one key value, hence COALESCE in the unique index that makes redelivery a no-op.

CREATE TABLE gpu_inventory (
    gpu text PRIMARY KEY,
    node text NOT NULL,
    model text,
    driver_version text,
    pci_bus_id text,
    mig_profile text,
    parent_gpu text,
    first_seen timestamptz NOT NULL,
    last_seen timestamptz NOT NULL
);
CREATE INDEX gpu_inventory_node ON gpu_inventory (node);

CREATE TABLE events (
    ts timestamptz NOT NULL,
    node text NOT NULL,
    gpu text NOT NULL,
    kind text NOT NULL,
    code integer,
    detail text NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX events_key ON events (gpu, ts, kind, (COALESCE(code, -1)));
CREATE INDEX events_ts ON events (ts);
CREATE INDEX events_node_ts ON events (node, ts);
