// Resend's Node SDK, unchanged, against mail-service: suppressions, logs and
// email metrics. Run by mail-service/tests/sdk.rs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Resend } from 'resend';

const resend = new Resend(process.env.RESEND_API_KEY);

test('suppressions: add, get, list, remove, batch, any case of the address', async () => {
  const mailbox = `Gone-${Date.now()}@Example.test`;
  const added = await resend.suppressions.add({ email: mailbox });
  assert.equal(added.error, null);
  assert.equal(added.data.object, 'suppression');
  const id = added.data.id;

  const got = await resend.suppressions.get(mailbox.toLowerCase());
  assert.equal(got.error, null);
  assert.equal(got.data.id, id);
  assert.equal(got.data.origin, 'manual');
  assert.equal(got.data.source_id, null);
  const listed = await resend.suppressions.list({ limit: 100 });
  assert.equal(listed.error, null);
  assert.ok(listed.data.data.some((s) => s.id === id && s.origin === 'manual'));

  // A case variant is not mailed.
  const sent = await resend.emails.send({
    from: 'Acme <billing@acme.test>',
    to: mailbox.toUpperCase(),
    subject: 'x',
    text: 'x',
  });
  assert.equal(sent.error, null);
  const email = await resend.emails.get(sent.data.id);
  assert.equal(email.data.last_event, 'suppressed');

  const removed = await resend.suppressions.remove(mailbox.toUpperCase());
  assert.equal(removed.error, null);
  assert.equal(removed.data.id, id);
  assert.equal(removed.data.deleted, true);

  const batch = await resend.suppressions.batch.add({ emails: ['n1@x.test', 'N1@x.test', 'n2@x.test'] });
  assert.equal(batch.error, null);
  assert.equal(batch.data.data.length, 2);
  const gone = await resend.suppressions.batch.remove({ ids: batch.data.data.map((s) => s.id) });
  assert.equal(gone.error, null);
  assert.equal(gone.data.data.length, 2);
});

test('logs: list holds finished requests only, get reads one', async () => {
  const listed = await resend.logs.list({ limit: 5 });
  assert.equal(listed.error, null);
  assert.equal(listed.data.object, 'list');
  assert.ok(listed.data.data.length > 0);
  assert.ok(listed.data.data.every((e) => e.response_status >= 100));
  const one = await resend.logs.get(listed.data.data[0].id);
  assert.equal(one.error, null);
  assert.equal(one.data.id, listed.data.data[0].id);
});

test('emails.metrics reads the analytics counters', async () => {
  const all = await resend.emails.metrics();
  assert.equal(all.error, null);
  assert.equal(all.data.object, 'metrics');
  assert.equal(all.data.granularity, 'daily');
  assert.equal(typeof all.data.totals.sent, 'number');
  const byDay = await resend.emails.metrics({ dimensions: ['period'], metrics: ['sent'] });
  assert.equal(byDay.error, null);
  assert.equal(byDay.data.data.length, 7);
  assert.equal(
    byDay.data.data.reduce((n, row) => n + row.sent, 0),
    byDay.data.totals.sent,
  );
  const refused = await resend.emails.metrics({ metrics: ['opened'] });
  assert.equal(refused.data, null);
  assert.equal(refused.error.statusCode, 422);
});
