-- Feedback mail: delivery status notifications (RFC 3464) and complaint
-- reports (RFC 5965) received for sent emails.
--
-- `service_secrets`: keys the service makes once and every node shares
-- (`verp`: the HMAC key of the return-path tokens). Never answered or logged.
CREATE TABLE service_secrets (
    name        TEXT PRIMARY KEY,
    value       TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);

-- Every report received, applied or not. `outcome`: `applied` (its events
-- were recorded) or `quarantined` (`reason` says why; `raw_base64` keeps the
-- message as received, base64 so 8-bit bytes survive). `digest` (SHA-256 of
-- the message) makes a report received twice one report.
CREATE TABLE feedback_reports (
    id           BIGINT PRIMARY KEY,
    received_at  BIGINT NOT NULL,
    source       TEXT NOT NULL,
    peer         TEXT,
    envelope_to  TEXT,
    digest       TEXT NOT NULL UNIQUE,
    size         BIGINT NOT NULL,
    outcome      TEXT NOT NULL,
    reason       TEXT,
    tenant_id    BIGINT,
    email_id     BIGINT,
    raw_base64   TEXT
);
CREATE INDEX feedback_reports_outcome ON feedback_reports (outcome, id);

-- What a report said about one recipient of an email: `delivered`,
-- `delivery_delayed`, `bounced` or `complained` (Resend's event names).
CREATE TABLE email_events (
    id           BIGINT PRIMARY KEY,
    tenant_id    BIGINT NOT NULL,
    email_id     BIGINT NOT NULL REFERENCES emails(id),
    report_id    BIGINT NOT NULL REFERENCES feedback_reports(id),
    recipient    TEXT NOT NULL,
    type         TEXT NOT NULL,
    status_code  TEXT,
    diagnostic   TEXT,
    created_at   BIGINT NOT NULL
);
CREATE INDEX email_events_email ON email_events (email_id, id);

-- Analytics count each event on the day it is received, under its type, for
-- the email's sending domain (as the triggers of 0005 count statuses).
CREATE FUNCTION email_events_counted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO email_day_counts (tenant_id, domain, day, status, shard, count)
    SELECT e.tenant_id, e.from_domain, n.created_at / 86400000, n.type, e.id % 16, count(*)
    FROM inserted n JOIN emails e ON e.id = n.email_id
    GROUP BY 1, 2, 3, 4, 5
    ON CONFLICT (tenant_id, domain, day, status, shard)
    DO UPDATE SET count = email_day_counts.count + excluded.count;
    RETURN NULL;
END;
$$;

CREATE TRIGGER email_events_counted AFTER INSERT ON email_events
REFERENCING NEW TABLE AS inserted
FOR EACH STATEMENT EXECUTE FUNCTION email_events_counted();
