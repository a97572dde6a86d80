-- Request ids (issue 29): the request that accepted an email, kept with
-- it (NULL for rows written before), and copied by the email triggers
-- onto each webhook event they write, so the log lines of a scheduled
-- handoff and of a webhook delivery carry the request id of the request
-- that caused them. Events of other sources (domain checks, feedback
-- reports) have none.
ALTER TABLE emails ADD COLUMN request_id BIGINT;
ALTER TABLE webhook_events ADD COLUMN request_id BIGINT;


CREATE OR REPLACE FUNCTION emails_webhook_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_events (webhook_id, tenant_id, event_type, data, created_at, status, next_attempt_at, request_id)
    SELECT w.id, e.tenant_id, 'email.scheduled',
        (webhook_email_data(e.id, e.message_id, e.from_addr, e.to_addrs, e.subject, e.created_at) || jsonb_build_object('scheduled_at',
            to_char(to_timestamp(e.scheduled_at / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))::text,
        e.updated_at, 'pending', e.updated_at, e.request_id
    FROM inserted e
    JOIN webhooks w ON w.tenant_id = e.tenant_id AND w.status = 'enabled' AND w.events LIKE '%,email.scheduled,%'
    WHERE e.status = 'scheduled';
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION emails_webhook_on_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_events (webhook_id, tenant_id, event_type, data, created_at, status, next_attempt_at, request_id)
    SELECT w.id, n.tenant_id, 'email.' || n.status,
        (webhook_email_data(n.id, n.message_id, n.from_addr, n.to_addrs, n.subject, n.created_at) || CASE n.status
            WHEN 'failed' THEN jsonb_build_object('failed', jsonb_build_object('reason', coalesce(n.handoff_detail, '')))
            WHEN 'suppressed' THEN jsonb_build_object('suppressed', jsonb_build_object('message', coalesce(n.handoff_detail, ''), 'type', 'suppression_list'))
            ELSE '{}'::jsonb END)::text,
        n.updated_at, 'pending', n.updated_at, n.request_id
    FROM updated n
    JOIN previous o ON o.id = n.id
    JOIN webhooks w ON w.tenant_id = n.tenant_id AND w.status = 'enabled' AND w.events LIKE '%,email.' || n.status || ',%'
    WHERE n.status <> o.status AND n.status IN ('sent', 'failed', 'suppressed', 'canceled');
    RETURN NULL;
END;
$$;
