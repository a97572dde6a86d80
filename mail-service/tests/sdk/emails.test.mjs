// Resend's Node SDK, unchanged, against mail-service: emails.
// Run by mail-service/tests/sdk.rs, which starts the server and sets
// RESEND_BASE_URL (the SDK's own variable) and RESEND_API_KEY.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Resend } from 'resend';

const resend = new Resend(process.env.RESEND_API_KEY);
const email = (subject) => ({
  from: 'Acme <billing@acme.test>',
  to: ['ada@example.test'],
  subject,
  html: '<p>Thanks!</p>',
  text: 'Thanks!',
  tags: [{ name: 'category', value: 'invoice' }],
});

test('emails.send answers the id and emails.get reads it back', async () => {
  const { data, error } = await resend.emails.send(email('Invoice 1'));
  assert.equal(error, null);
  assert.match(data.id, /^[1-9][0-9]{0,18}$/);
  const got = await resend.emails.get(data.id);
  assert.equal(got.error, null);
  assert.equal(got.data.object, 'email');
  assert.equal(got.data.id, data.id);
  assert.equal(got.data.subject, 'Invoice 1');
  assert.equal(got.data.last_event, 'sent');
  assert.match(got.headers.etag, /^"[0-9]+"$/);
});

test('an idempotency key given through the SDK sends once', async () => {
  const key = `sdk-${Date.now()}`;
  const first = await resend.emails.send(email('Once'), { idempotencyKey: key });
  const again = await resend.emails.send(email('Once'), { idempotencyKey: key });
  assert.equal(first.error, null);
  assert.deepEqual(again.data, first.data);
});

test('a refused email comes back as the SDK error', async () => {
  const { data, error } = await resend.emails.send({ ...email('x'), to: 'not an address' });
  assert.equal(data, null);
  assert.equal(error.statusCode, 422);
  assert.equal(error.name, 'validation_error');
  assert.match(error.message, /^to: /);
});

test('batch.send answers one id per email', async () => {
  const { data, error } = await resend.batch.send([email('Batch 1'), email('Batch 2')]);
  assert.equal(error, null);
  assert.equal(data.data.length, 2);
  for (const { id } of data.data) {
    const got = await resend.emails.get(id);
    assert.equal(got.data.last_event, 'sent');
  }
});

test('batch.send in permissive mode reports the refused items', async () => {
  const { data, error } = await resend.batch.send(
    [email('Good'), { ...email('Bad'), from: 'nobody' }],
    { batchValidation: 'permissive' },
  );
  assert.equal(error, null);
  assert.equal(data.data.length, 1);
  assert.equal(data.errors.length, 1);
  assert.equal(data.errors[0].index, 1);
});

const inSeconds = (s) => new Date(Date.now() + s * 1000).toISOString();

test('a scheduled email waits, then the server hands it off', async () => {
  const { data, error } = await resend.emails.send({ ...email('Later'), scheduledAt: inSeconds(1.5) });
  assert.equal(error, null);
  const waiting = await resend.emails.get(data.id);
  assert.equal(waiting.data.last_event, 'scheduled');
  const deadline = Date.now() + 20_000;
  let got = waiting;
  // `queued` while its handoff runs (status `sending`).
  while (['scheduled', 'queued'].includes(got.data.last_event) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    got = await resend.emails.get(data.id);
  }
  assert.equal(got.data.last_event, 'sent');
});

test('emails.update reschedules with the ETag as If-Match, and needs it', async () => {
  const { data } = await resend.emails.send({ ...email('Move me'), scheduledAt: inSeconds(3600) });
  const later = inSeconds(7200);
  const bare = await resend.emails.update({ id: data.id, scheduledAt: later });
  assert.equal(bare.error.statusCode, 428);
  assert.equal(bare.error.name, 'precondition_required');
  // The refusal names the header and where its value comes from.
  assert.match(bare.error.message, /^If-Match: required/);
  assert.match(bare.error.message, /ETag header of GET \/emails\/\{id\}/);
  const read = await resend.emails.get(data.id);
  const moved = await resend.emails.update(
    { id: data.id, scheduledAt: later },
    { headers: { 'If-Match': read.headers.etag } },
  );
  assert.equal(moved.error, null);
  assert.equal(moved.data.object, 'email');
  assert.equal(moved.data.id, data.id);
  assert.notEqual(moved.headers.etag, read.headers.etag);
  const stale = await resend.emails.update(
    { id: data.id, scheduledAt: later },
    { headers: { 'If-Match': read.headers.etag } },
  );
  assert.equal(stale.error.statusCode, 409);
  assert.equal(stale.error.name, 'stale_revision');
  const again = await resend.emails.get(data.id);
  assert.equal(Date.parse(again.data.scheduled_at), Date.parse(later));
});

test('emails.cancel stops a scheduled email', async () => {
  const { data } = await resend.emails.send({ ...email('Never'), scheduledAt: inSeconds(3600) });
  const canceled = await resend.emails.cancel(data.id);
  assert.equal(canceled.error, null);
  assert.deepEqual(canceled.data, { object: 'email', id: data.id });
  const got = await resend.emails.get(data.id);
  assert.equal(got.data.last_event, 'canceled');
  const twice = await resend.emails.cancel(data.id);
  assert.equal(twice.error.statusCode, 409);
  assert.equal(twice.error.name, 'invalid_state');
});

test('batch.send with a scheduled item is accepted for the scheduler', async () => {
  const { data, error } = await resend.batch.send([
    { ...email('Batch later'), scheduledAt: inSeconds(3600) },
    email('Batch now'),
  ]);
  assert.equal(error, null);
  assert.equal(data.status, 'processing');
  assert.equal(data.data.length, 2);
  const first = await resend.emails.get(data.data[0].id);
  assert.equal(first.data.batch_id, data.id);
});

test('emails.list pages with limit and after', async () => {
  await resend.emails.send(email('Listed 1'));
  await resend.emails.send(email('Listed 2'));
  const { data, error } = await resend.emails.list({ limit: 1 });
  assert.equal(error, null);
  assert.equal(data.object, 'list');
  assert.equal(data.data.length, 1);
  assert.equal(data.has_more, true);
  assert.equal(data.data[0].subject, 'Listed 2');
  const next = await resend.emails.list({ limit: 1, after: data.data[0].id });
  assert.equal(next.data.data[0].subject, 'Listed 1');
});
