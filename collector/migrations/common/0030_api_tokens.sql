-- REST API bearer tokens (collector/api/tokens.py).
--
-- Only the SHA-256 of a token is kept: the token itself is shown once, when it is
-- created, and a database dump does not let anyone call the API. ``prefix`` (the first
-- characters after ``gw_``) lets people tell tokens apart in listings. ``namespaces``
-- NULL means the whole fleet; an array limits the token to those Kubernetes namespaces.
-- A revoked token stays listed (revoked_at set) so its use can still be audited.

CREATE TABLE api_tokens (
    id bigserial PRIMARY KEY,
    name text NOT NULL DEFAULT '',
    prefix text NOT NULL,
    token_sha256 bytea NOT NULL UNIQUE,
    role text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    namespaces text[],
    created_at timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at timestamptz
);

