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
UPDATE suppressions SET email_key = lower(email COLLATE "C");
DELETE FROM suppressions WHERE EXISTS (
    SELECT 1 FROM suppressions older
    WHERE older.tenant_id = suppressions.tenant_id
      AND older.email_key = suppressions.email_key
      AND older.id < suppressions.id
);
CREATE UNIQUE INDEX suppressions_tenant_key ON suppressions (tenant_id, email_key);

-- `domain.updated` carries the domain as `GET /domains/{id}` answers it:
-- `records` holds the kinds Resend's SDKs parse (SPF, DKIM) and the DMARC
-- recommendation is `dmarc`, beside `capabilities`.
CREATE OR REPLACE FUNCTION domains_webhook_on_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_events (webhook_id, tenant_id, event_type, data, created_at, status, next_attempt_at)
    SELECT w.id, n.tenant_id, 'domain.updated',
        jsonb_build_object('object', 'domain', 'id', n.id::text, 'name', n.name, 'status', n.status,
            'region', 'us-east-1', 'custom_return_path', n.return_path,
            'records', COALESCE((SELECT jsonb_agg(r.value ORDER BY r.i)
                                 FROM jsonb_array_elements(n.records::jsonb) WITH ORDINALITY AS r(value, i)
                                 WHERE r.value->>'record' <> 'DMARC'), '[]'::jsonb),
            'dmarc', (SELECT r.value FROM jsonb_array_elements(n.records::jsonb) AS r(value)
                      WHERE r.value->>'record' = 'DMARC' LIMIT 1),
            'capabilities', jsonb_build_object('sending', 'enabled', 'receiving', 'disabled'),
            'created_at', to_char(to_timestamp(n.created_at / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))::text,
        (extract(epoch FROM clock_timestamp()) * 1000)::bigint, 'pending', 0
    FROM updated n
    JOIN previous o ON o.id = n.id
    JOIN webhooks w ON w.tenant_id = n.tenant_id AND w.status = 'enabled' AND w.events LIKE '%,domain.updated,%'
    WHERE n.status <> o.status;
    RETURN NULL;
END;
$$;
