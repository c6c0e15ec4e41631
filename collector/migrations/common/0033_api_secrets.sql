-- Keys the REST API keeps in the database, so that every collector replica uses the same
-- (issue 11). 'opaque_ids' turns anomaly, alert and silence row ids into opaque ids
-- (collector/api/ids.py): row ids are numbered across all namespaces, so showing them
-- to a namespace-scoped token would let it count other namespaces' rows from the gaps.
-- The first API replica to need a key inserts a random one (ON CONFLICT DO NOTHING);
-- nothing here is a credential: it only hides the numbering.
CREATE TABLE api_secrets (
    name text PRIMARY KEY,
    secret bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
