-- Analytics: per (tenant, sending domain, UTC day, status) counts of email
-- events, kept by triggers in the same transaction as every write of an
-- email (whichever statement or unit writes it). `from_domain` is the
-- sending domain (lower-case IDNA ASCII). `shard` (email id mod 16) spreads
-- concurrent writers over 16 rows so they do not queue on one row's lock;
-- reads sum the shards. Events: `accepted` and `scheduled` when stored;
-- `sent`, `failed`, `unknown`, `suppressed`, `canceled` when an email
-- moves to that status, on the day it moves.
ALTER TABLE emails ADD COLUMN from_domain TEXT NOT NULL DEFAULT '';

CREATE TABLE email_day_counts (
    tenant_id  BIGINT NOT NULL,
    domain     TEXT NOT NULL,
    day        BIGINT NOT NULL,
    status     TEXT NOT NULL,
    shard      BIGINT NOT NULL,
    count      BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, domain, day, status, shard)
);

-- Statement-level triggers with transition tables: one upsert per
-- (day, status, shard) a statement touched, so a unit that stores a batch,
-- and a bulk insert, cost one aggregate statement, not one per row.
CREATE FUNCTION emails_counted_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO email_day_counts (tenant_id, domain, day, status, shard, count)
    SELECT e.tenant_id, e.from_domain, e.created_at / 86400000, s.status, e.id % 16, count(*)
    FROM inserted e
    CROSS JOIN LATERAL (VALUES ('accepted'), (CASE WHEN e.status <> 'sending' THEN e.status END)) AS s(status)
    WHERE s.status IS NOT NULL
    GROUP BY 1, 2, 3, 4, 5
    ON CONFLICT (tenant_id, domain, day, status, shard)
    DO UPDATE SET count = email_day_counts.count + excluded.count;
    RETURN NULL;
END;
$$;

CREATE FUNCTION emails_counted_on_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO email_day_counts (tenant_id, domain, day, status, shard, count)
    SELECT n.tenant_id, n.from_domain, n.updated_at / 86400000, n.status, n.id % 16, count(*)
    FROM updated n JOIN previous o ON o.id = n.id
    WHERE n.status <> o.status AND n.status NOT IN ('sending', 'scheduled')
    GROUP BY 1, 2, 3, 4, 5
    ON CONFLICT (tenant_id, domain, day, status, shard)
    DO UPDATE SET count = email_day_counts.count + excluded.count;
    RETURN NULL;
END;
$$;

CREATE TRIGGER emails_counted_on_insert AFTER INSERT ON emails
REFERENCING NEW TABLE AS inserted
FOR EACH STATEMENT EXECUTE FUNCTION emails_counted_on_insert();

CREATE TRIGGER emails_counted_on_update AFTER UPDATE ON emails
REFERENCING OLD TABLE AS previous NEW TABLE AS updated
FOR EACH STATEMENT EXECUTE FUNCTION emails_counted_on_update();
