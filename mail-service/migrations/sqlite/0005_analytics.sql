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

CREATE TRIGGER emails_counted_on_insert AFTER INSERT ON emails
BEGIN
    INSERT INTO email_day_counts (tenant_id, domain, day, status, shard, count)
    VALUES (NEW.tenant_id, NEW.from_domain, NEW.created_at / 86400000, 'accepted', NEW.id % 16, 1)
    ON CONFLICT (tenant_id, domain, day, status, shard) DO UPDATE SET count = count + 1;
    INSERT INTO email_day_counts (tenant_id, domain, day, status, shard, count)
    SELECT NEW.tenant_id, NEW.from_domain, NEW.created_at / 86400000, NEW.status, NEW.id % 16, 1
    WHERE NEW.status <> 'sending'
    ON CONFLICT (tenant_id, domain, day, status, shard) DO UPDATE SET count = count + 1;
END;

CREATE TRIGGER emails_counted_on_status AFTER UPDATE OF status ON emails
WHEN NEW.status <> OLD.status AND NEW.status <> 'sending' AND NEW.status <> 'scheduled'
BEGIN
    INSERT INTO email_day_counts (tenant_id, domain, day, status, shard, count)
    VALUES (NEW.tenant_id, NEW.from_domain, NEW.updated_at / 86400000, NEW.status, NEW.id % 16, 1)
    ON CONFLICT (tenant_id, domain, day, status, shard) DO UPDATE SET count = count + 1;
END;
