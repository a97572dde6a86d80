-- Scheduled sending. A `scheduled` email waits for `scheduled_at`; the
-- scheduler claims due ones (status `sending`, a lease, and `claim`: the id
-- of the claiming pass, by which that pass reads back what it took).
-- `batch_id` names the batch an email was accepted in when the batch was
-- answered 202.
ALTER TABLE emails ADD COLUMN claim BIGINT;
ALTER TABLE emails ADD COLUMN batch_id BIGINT;
CREATE INDEX emails_due ON emails (scheduled_at) WHERE status = 'scheduled';
CREATE INDEX emails_claim ON emails (claim) WHERE claim IS NOT NULL;
