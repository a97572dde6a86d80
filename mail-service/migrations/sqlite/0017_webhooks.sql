-- Webhooks (issue 17). A tenant's endpoints: the event types each takes
-- (`events`: ",email.sent,email.failed," with a comma before and after
-- every name, so one LIKE finds a subscription), its signing secret
-- (`whsec_...`; never answered after creation, never logged) and, for a
-- grace period after a rotation, the previous one, which signs beside it.
-- `status` is enabled | disabled; `disabled_reason` says why (the
-- endpoint answered 410, or failed for the whole retry schedule).
CREATE TABLE webhooks (
    id                    BIGINT PRIMARY KEY,
    tenant_id             BIGINT NOT NULL REFERENCES tenants(id),
    endpoint              TEXT NOT NULL,
    events                TEXT NOT NULL,
    secret                TEXT NOT NULL,
    previous_secret       TEXT,
    previous_secret_until BIGINT,
    status                TEXT NOT NULL,
    disabled_reason       TEXT,
    created_at            BIGINT NOT NULL,
    updated_at            BIGINT NOT NULL
);
CREATE INDEX webhooks_tenant ON webhooks (tenant_id, status);

-- The outbox: one row per (event, subscribed enabled webhook), written in
-- the same transaction as the state change that caused it. `id` is the
-- message id sent as `webhook-id: msg_<id>` on every attempt. `data` is
-- the event's JSON `data`; the body is {type, created_at, data}.
-- status: pending | delivered | failed. A pending row is due at
-- `next_attempt_at`; a dispatcher takes it by setting `claim` and moving
-- `next_attempt_at` to the end of its lease (one conditional update), so
-- a node that stops mid-attempt leaves a row that is due again later.
CREATE TABLE webhook_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id      BIGINT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    tenant_id       BIGINT NOT NULL,
    event_type      TEXT NOT NULL,
    data            TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    status          TEXT NOT NULL,
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT,
    claim           BIGINT,
    finished_at     BIGINT
);
CREATE INDEX webhook_events_due ON webhook_events (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_events_webhook ON webhook_events (webhook_id, id);
CREATE INDEX webhook_events_claim ON webhook_events (claim) WHERE claim IS NOT NULL;

-- Every delivery attempt: the HTTP status (NULL when none came), the class
-- of error (NULL on 2xx), the start of the answer's body (capped) and how
-- long it took. Never a secret or a signature.
CREATE TABLE webhook_attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id     BIGINT NOT NULL REFERENCES webhook_events(id) ON DELETE CASCADE,
    attempted_at BIGINT NOT NULL,
    status_code  BIGINT,
    error_class  TEXT,
    response     TEXT NOT NULL,
    duration_ms  BIGINT NOT NULL
);
CREATE INDEX webhook_attempts_event ON webhook_attempts (event_id, id);

-- Email events, written by triggers in the same transaction as the email's
-- write (whichever statement or unit writes it): `email.scheduled` when a
-- scheduled email is stored; `email.sent`, `email.failed`,
-- `email.suppressed`, `email.canceled` when an email moves to that status.
-- One row per enabled webhook of the tenant subscribed to the type; none
-- (one index probe) when the tenant has no webhook. `data` is Resend's
-- email event data.
CREATE TRIGGER emails_webhook_on_insert AFTER INSERT ON emails
WHEN NEW.status = 'scheduled'
BEGIN
    INSERT INTO webhook_events (webhook_id, tenant_id, event_type, data, created_at, status, next_attempt_at)
    SELECT w.id, NEW.tenant_id, 'email.scheduled',
        json_object('email_id', CAST(NEW.id AS TEXT), 'message_id', NEW.message_id,
            'from', NEW.from_addr,
            'to', CASE json_type(NEW.to_addrs) WHEN 'array' THEN json(NEW.to_addrs) ELSE json_array(json_extract(NEW.to_addrs, '$')) END,
            'subject', NEW.subject,
            'created_at', strftime('%Y-%m-%dT%H:%M:%fZ', NEW.created_at / 1000.0, 'unixepoch'),
            'scheduled_at', strftime('%Y-%m-%dT%H:%M:%fZ', NEW.scheduled_at / 1000.0, 'unixepoch')),
        NEW.updated_at, 'pending', NEW.updated_at
    FROM webhooks w
    WHERE w.tenant_id = NEW.tenant_id AND w.status = 'enabled' AND w.events LIKE '%,email.scheduled,%';
END;

CREATE TRIGGER emails_webhook_on_status AFTER UPDATE OF status ON emails
WHEN NEW.status <> OLD.status AND NEW.status IN ('sent', 'failed', 'suppressed', 'canceled')
BEGIN
    INSERT INTO webhook_events (webhook_id, tenant_id, event_type, data, created_at, status, next_attempt_at)
    SELECT w.id, NEW.tenant_id, 'email.' || NEW.status,
        json_patch(
            json_object('email_id', CAST(NEW.id AS TEXT), 'message_id', NEW.message_id,
                'from', NEW.from_addr,
                'to', CASE json_type(NEW.to_addrs) WHEN 'array' THEN json(NEW.to_addrs) ELSE json_array(json_extract(NEW.to_addrs, '$')) END,
                'subject', NEW.subject,
                'created_at', strftime('%Y-%m-%dT%H:%M:%fZ', NEW.created_at / 1000.0, 'unixepoch')),
            CASE NEW.status
                WHEN 'failed' THEN json_object('failed', json_object('reason', coalesce(NEW.handoff_detail, '')))
                WHEN 'suppressed' THEN json_object('suppressed', json_object('message', coalesce(NEW.handoff_detail, ''), 'type', 'suppression_list'))
                ELSE '{}' END),
        NEW.updated_at, 'pending', NEW.updated_at
    FROM webhooks w
    WHERE w.tenant_id = NEW.tenant_id AND w.status = 'enabled' AND w.events LIKE '%,email.' || NEW.status || ',%';
END;

-- `domain.updated` when a domain's status changes (Resend's domain event
-- data; `records` as stored).
CREATE TRIGGER domains_webhook_on_status AFTER UPDATE OF status ON domains
WHEN NEW.status <> OLD.status
BEGIN
    INSERT INTO webhook_events (webhook_id, tenant_id, event_type, data, created_at, status, next_attempt_at)
    SELECT w.id, NEW.tenant_id, 'domain.updated',
        json_object('id', CAST(NEW.id AS TEXT), 'name', NEW.name, 'status', NEW.status,
            'region', 'us-east-1',
            'created_at', strftime('%Y-%m-%dT%H:%M:%fZ', NEW.created_at / 1000.0, 'unixepoch'),
            'records', json(NEW.records)),
        CAST(unixepoch('subsec') * 1000 AS INTEGER), 'pending', 0
    FROM webhooks w
    WHERE w.tenant_id = NEW.tenant_id AND w.status = 'enabled' AND w.events LIKE '%,domain.updated,%';
END;
