-- What Resend's SDKs read: suppressions with their origin and one entry per
-- mailbox whatever its case; domain events in the shape of GET /domains/{id}.

-- Suppressions as Resend's SDKs read them, and one entry per mailbox
-- whatever the case of its address.
--
-- `origin`: `manual` (added through the API), `bounce` or `complaint`
-- (added by a feedback report); `source_id`: the email the bounce or
-- complaint was about (NULL for manual entries and for entries older than
-- this migration).
ALTER TABLE suppressions ADD COLUMN origin TEXT NOT NULL DEFAULT 'manual';
ALTER TABLE suppressions ADD COLUMN source_id BIGINT;
-- Entries the feedback ingest added before this migration say so in their
-- reason (`bounced: ... for email N`, `complained: ... report about email N`).
UPDATE suppressions SET origin = 'bounce' WHERE reason LIKE 'bounced: % for email %';
UPDATE suppressions SET origin = 'complaint' WHERE reason LIKE 'complained: % report about email %';

-- `email_key`: the address with every ASCII letter in lower case, local
-- part included. Matching (add, look-up, removal, the screening of
-- recipients at every handoff) goes by it, so a suppressed mailbox is never
-- mailed again through a case variant of its address; `email` keeps the
-- address as first suppressed, for display. Entries that differ only in
-- case become one: the oldest stays.
ALTER TABLE suppressions ADD COLUMN email_key TEXT;
UPDATE suppressions SET email_key = lower(email);
DELETE FROM suppressions WHERE EXISTS (
    SELECT 1 FROM suppressions older
    WHERE older.tenant_id = suppressions.tenant_id
      AND older.email_key = suppressions.email_key
      AND older.id < suppressions.id
);
CREATE UNIQUE INDEX suppressions_tenant_key ON suppressions (tenant_id, email_key);

-- `domain.updated` carries the domain as `GET /domains/{id}` answers it:
-- `records` holds the kinds Resend's SDKs parse (SPF, DKIM) and the DMARC
-- recommendation is `dmarc`, beside `capabilities`. (Scalar subqueries lose
-- SQLite's JSON subtype, hence the outer `json(...)`.)
DROP TRIGGER domains_webhook_on_status;
CREATE TRIGGER domains_webhook_on_status AFTER UPDATE OF status ON domains
WHEN NEW.status <> OLD.status
BEGIN
    INSERT INTO webhook_events (webhook_id, tenant_id, event_type, data, created_at, status, next_attempt_at)
    SELECT w.id, NEW.tenant_id, 'domain.updated',
        json_object('object', 'domain', 'id', CAST(NEW.id AS TEXT), 'name', NEW.name,
            'status', NEW.status, 'region', 'us-east-1', 'custom_return_path', NEW.return_path,
            'records', json((SELECT json_group_array(json(r.value)) FROM json_each(NEW.records) r
                             WHERE json_extract(r.value, '$.record') <> 'DMARC')),
            'dmarc', json((SELECT r.value FROM json_each(NEW.records) r
                           WHERE json_extract(r.value, '$.record') = 'DMARC' LIMIT 1)),
            'capabilities', json_object('sending', 'enabled', 'receiving', 'disabled'),
            'created_at', strftime('%Y-%m-%dT%H:%M:%fZ', NEW.created_at / 1000.0, 'unixepoch')),
        CAST(unixepoch('subsec') * 1000 AS INTEGER), 'pending', 0
    FROM webhooks w
    WHERE w.tenant_id = NEW.tenant_id AND w.status = 'enabled' AND w.events LIKE '%,domain.updated,%';
END;
