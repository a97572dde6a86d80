-- Suppressions: addresses a tenant's mail is never handed to. `email` is the
-- normalised address (local part as given, domain in lower-case ASCII after
-- IDNA), so one address is one row per tenant.
CREATE TABLE suppressions (
    id          BIGINT PRIMARY KEY,
    tenant_id   BIGINT NOT NULL REFERENCES tenants(id),
    email       TEXT NOT NULL,
    reason      TEXT,
    created_at  BIGINT NOT NULL,
    UNIQUE (tenant_id, email)
);
CREATE INDEX suppressions_tenant ON suppressions (tenant_id, id);

-- The recipients removed from an email at its handoff because they were
-- suppressed (a JSON list of normalised addresses); NULL when none were.
-- An email whose every recipient was suppressed has status `suppressed`.
ALTER TABLE emails ADD COLUMN suppressed_recipients TEXT;
