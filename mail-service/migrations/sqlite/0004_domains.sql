-- Sending domains. `records` is the JSON list of the DNS records the
-- customer publishes, each with its own status; `status` is the domain's
-- (Resend's vocabulary). `dkim_private_key` is the PKCS#8 DER (base64) of
-- the DKIM key: never answered, never logged. `verify_until` ends the
-- background re-verification a verify request starts; `checked_at` is the
-- last check (a node takes a check by moving it, so two nodes do not check
-- one domain at once).
CREATE TABLE domains (
    id                BIGINT PRIMARY KEY,
    tenant_id         BIGINT NOT NULL REFERENCES tenants(id),
    name              TEXT NOT NULL,
    return_path       TEXT NOT NULL,
    dkim_selector     TEXT NOT NULL,
    dkim_private_key  TEXT NOT NULL,
    status            TEXT NOT NULL,
    records           TEXT NOT NULL,
    verified_at       BIGINT,
    verify_until      BIGINT,
    checked_at        BIGINT,
    created_at        BIGINT NOT NULL,
    UNIQUE (tenant_id, name)
);
CREATE INDEX domains_tenant ON domains (tenant_id, id);
CREATE INDEX domains_verify_until ON domains (verify_until) WHERE verify_until IS NOT NULL;
