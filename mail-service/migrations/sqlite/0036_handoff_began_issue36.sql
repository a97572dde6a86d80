-- Handoff marks (issue 36): the time a node began an email's handoff,
-- written (with the lease renewed) just before the transport is asked to
-- connect. A `sending` email whose lease ran out without this mark was
-- never offered to the relay: the sweeper settles it as not sent (a
-- scheduled one goes back to `scheduled`) instead of `unknown`.
ALTER TABLE emails ADD COLUMN handoff_began_at BIGINT;
-- Rows in flight when this runs were written by a version without the
-- mark: counted as begun, so they are settled as before (`unknown`).
UPDATE emails SET handoff_began_at = updated_at WHERE status = 'sending';
