-- Request ids (issue 29): the request that accepted an email, kept with
-- it (NULL for rows written before), and copied by the email triggers
-- onto each webhook event they write, so the log lines of a scheduled
-- handoff and of a webhook delivery carry the request id of the request
-- that caused them. Events of other sources (domain checks, feedback
-- reports) have none.
ALTER TABLE emails ADD COLUMN request_id BIGINT;
ALTER TABLE webhook_events ADD COLUMN request_id BIGINT;

DROP TRIGGER emails_webhook_on_insert;
DROP TRIGGER emails_webhook_on_status;

CREATE TRIGGER emails_webhook_on_insert AFTER INSERT ON emails
WHEN NEW.status = 'scheduled'
BEGIN
    INSERT INTO webhook_events (webhook_id, tenant_id, event_type, data, created_at, status, next_attempt_at, request_id)
    SELECT w.id, NEW.tenant_id, 'email.scheduled',
        json_object('email_id', CAST(NEW.id AS TEXT), 'message_id', NEW.message_id,
            'from', NEW.from_addr,
            'to', CASE json_type(NEW.to_addrs) WHEN 'array' THEN json(NEW.to_addrs) ELSE json_array(json_extract(NEW.to_addrs, '$')) END,
            'subject', NEW.subject,
            'created_at', strftime('%Y-%m-%dT%H:%M:%fZ', NEW.created_at / 1000.0, 'unixepoch'),
            'scheduled_at', strftime('%Y-%m-%dT%H:%M:%fZ', NEW.scheduled_at / 1000.0, 'unixepoch')),
        NEW.updated_at, 'pending', NEW.updated_at, NEW.request_id
    FROM webhooks w
    WHERE w.tenant_id = NEW.tenant_id AND w.status = 'enabled' AND w.events LIKE '%,email.scheduled,%';
END;

CREATE TRIGGER emails_webhook_on_status AFTER UPDATE OF status ON emails
WHEN NEW.status <> OLD.status AND NEW.status IN ('sent', 'failed', 'suppressed', 'canceled')
BEGIN
    INSERT INTO webhook_events (webhook_id, tenant_id, event_type, data, created_at, status, next_attempt_at, request_id)
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
        NEW.updated_at, 'pending', NEW.updated_at, NEW.request_id
    FROM webhooks w
    WHERE w.tenant_id = NEW.tenant_id AND w.status = 'enabled' AND w.events LIKE '%,email.' || NEW.status || ',%';
END;
