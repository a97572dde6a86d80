-- Core schema: tenants, API keys, emails, idempotency reservations,
-- request logs, rate-limit windows and node registrations.
-- Times are Unix milliseconds (BIGINT); JSON documents are TEXT.

CREATE TABLE nodes (
    id         BIGSERIAL PRIMARY KEY,
    started_at BIGINT NOT NULL
);

CREATE TABLE tenants (
    id                    BIGINT PRIMARY KEY,
    name                  TEXT NOT NULL UNIQUE,
    rate_limit_per_minute BIGINT NOT NULL DEFAULT 120,
    created_at            BIGINT NOT NULL
);

CREATE TABLE api_keys (
    id          BIGINT PRIMARY KEY,
    tenant_id   BIGINT NOT NULL REFERENCES tenants(id),
    name        TEXT NOT NULL,
    key_hash    TEXT NOT NULL UNIQUE,
    key_prefix  TEXT NOT NULL,
    permission  TEXT NOT NULL CHECK (permission IN ('sending_access', 'full_access')),
    created_at  BIGINT NOT NULL,
    revoked_at  BIGINT
);

-- status: sending | sent | failed | unknown | canceled
-- (later: scheduled, suppressed, delivered, bounced).
-- lease_until bounds how long a `sending` row may stay unresolved before the
-- sweeper marks it `unknown`; the scheduler will reuse it for its leases.
CREATE TABLE emails (
    id              BIGINT PRIMARY KEY,
    tenant_id       BIGINT NOT NULL REFERENCES tenants(id),
    api_key_id      BIGINT NOT NULL REFERENCES api_keys(id),
    status          TEXT NOT NULL,
    revision        BIGINT NOT NULL,
    from_addr       TEXT NOT NULL,
    to_addrs        TEXT NOT NULL,
    subject         TEXT NOT NULL,
    payload         TEXT NOT NULL,
    message_id      TEXT NOT NULL,
    scheduled_at    BIGINT,
    lease_until     BIGINT,
    handoff_detail  TEXT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX emails_status_lease ON emails (status, lease_until);
CREATE INDEX emails_tenant ON emails (tenant_id, id);

-- state: in_flight | completed | unknown
CREATE TABLE idempotency_keys (
    tenant_id     BIGINT NOT NULL,
    scope         TEXT NOT NULL,
    idem_key      TEXT NOT NULL,
    body_hash     TEXT NOT NULL,
    state         TEXT NOT NULL,
    email_ids     TEXT NOT NULL,
    outcome       TEXT,
    lease_until   BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    completed_at  BIGINT,
    PRIMARY KEY (tenant_id, scope, idem_key)
);

CREATE TABLE request_logs (
    id           BIGINT PRIMARY KEY,
    tenant_id    BIGINT,
    api_key_id   BIGINT,
    method       TEXT NOT NULL,
    path         TEXT NOT NULL,
    status       BIGINT NOT NULL,
    duration_ms  BIGINT,
    user_agent   TEXT,
    created_at   BIGINT NOT NULL
);
CREATE INDEX request_logs_tenant ON request_logs (tenant_id, id);

CREATE TABLE rate_windows (
    tenant_id     BIGINT NOT NULL,
    window_start  BIGINT NOT NULL,
    count         BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, window_start)
);
