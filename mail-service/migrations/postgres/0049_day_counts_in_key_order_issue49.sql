-- Counter rows in one order (issue 49). The triggers of 0005 and 0018
-- upserted a statement's `email_day_counts` rows in the order their
-- aggregate happened to produce; two statements sharing rows could take them
-- in opposite orders and deadlock (SQLSTATE 40P01, "while inserting index
-- tuple in relation email_day_counts"). Every trigger now upserts in key
-- order (tenant_id, domain, day, status, shard), so statements that share
-- counter rows queue on the first one instead of waiting for each other.
-- A unit of several statements can still meet another in two places; the
-- store retries a unit that a deadlock rolled back.
CREATE OR REPLACE FUNCTION emails_counted_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO email_day_counts (tenant_id, domain, day, status, shard, count)
    SELECT e.tenant_id, e.from_domain, e.created_at / 86400000, s.status, e.id % 16, count(*)
    FROM inserted e
    CROSS JOIN LATERAL (VALUES ('accepted'), (CASE WHEN e.status <> 'sending' THEN e.status END)) AS s(status)
    WHERE s.status IS NOT NULL
    GROUP BY 1, 2, 3, 4, 5
    ORDER BY 1, 2, 3, 4, 5
    ON CONFLICT (tenant_id, domain, day, status, shard)
    DO UPDATE SET count = email_day_counts.count + excluded.count;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION emails_counted_on_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO email_day_counts (tenant_id, domain, day, status, shard, count)
    SELECT n.tenant_id, n.from_domain, n.updated_at / 86400000, n.status, n.id % 16, count(*)
    FROM updated n JOIN previous o ON o.id = n.id
    WHERE n.status <> o.status AND n.status NOT IN ('sending', 'scheduled')
    GROUP BY 1, 2, 3, 4, 5
    ORDER BY 1, 2, 3, 4, 5
    ON CONFLICT (tenant_id, domain, day, status, shard)
    DO UPDATE SET count = email_day_counts.count + excluded.count;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION email_events_counted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO email_day_counts (tenant_id, domain, day, status, shard, count)
    SELECT e.tenant_id, e.from_domain, n.created_at / 86400000, n.type, e.id % 16, count(*)
    FROM inserted n JOIN emails e ON e.id = n.email_id
    GROUP BY 1, 2, 3, 4, 5
    ORDER BY 1, 2, 3, 4, 5
    ON CONFLICT (tenant_id, domain, day, status, shard)
    DO UPDATE SET count = email_day_counts.count + excluded.count;
    RETURN NULL;
END;
$$;
