-- Secrets at rest: the master keys that seal the stored secrets (DKIM
-- private keys, webhook signing secrets, the return-path tag key). The keys
-- themselves are never stored in plain text: `master_keys` lists their ids
-- (a hash, not the key); `master_key_wraps` holds a key sealed under
-- another one, which a rotation writes so every node, whichever of the two
-- keys it was started with, reads both until the rotation is done. The
-- key with the highest `seq` seals new values.
CREATE TABLE master_keys (
    id          TEXT PRIMARY KEY,
    seq         BIGINT NOT NULL UNIQUE,
    created_at  BIGINT NOT NULL
);

CREATE TABLE master_key_wraps (
    key_id          TEXT NOT NULL REFERENCES master_keys (id),
    wrapping_key_id TEXT NOT NULL REFERENCES master_keys (id),
    wrapped         TEXT NOT NULL,
    PRIMARY KEY (key_id, wrapping_key_id)
);
