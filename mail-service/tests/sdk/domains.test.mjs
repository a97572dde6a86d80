// Resend's Node SDK, unchanged, against mail-service: domains.
// Run by mail-service/tests/sdk.rs (its DNS server publishes nothing, so a
// new domain cannot be verified).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Resend } from 'resend';

const resend = new Resend(process.env.RESEND_API_KEY);

test('domains.create, get, list, verify and remove', async () => {
  const name = `sdk-${Date.now()}.example`;
  const created = await resend.domains.create({ name, customReturnPath: 'bounce' });
  assert.equal(created.error, null);
  assert.equal(created.data.name, name);
  assert.equal(created.data.status, 'not_started');
  assert.equal(created.data.region, 'us-east-1');
  const kinds = created.data.records.map((r) => `${r.record} ${r.type} ${r.name}`);
  assert.deepEqual(kinds, [
    'SPF MX bounce',
    'SPF TXT bounce',
    'DKIM TXT mailservice._domainkey',
  ]);
  // DMARC is recommended beside them, outside the kinds the SDKs parse.
  assert.equal(created.data.dmarc.record, 'DMARC');
  assert.equal(created.data.dmarc.name, '_dmarc');
  const id = created.data.id;

  const got = await resend.domains.get(id);
  assert.equal(got.error, null);
  assert.equal(got.data.object, 'domain');
  assert.equal(got.data.id, id);

  const listed = await resend.domains.list({ limit: 100 });
  assert.equal(listed.error, null);
  assert.equal(listed.data.object, 'list');
  assert.equal(typeof listed.data.has_more, 'boolean');
  assert.ok(listed.data.data.some((d) => d.id === id));

  const verified = await resend.domains.verify(id);
  assert.equal(verified.error, null);
  assert.deepEqual(verified.data, { object: 'domain', id });
  // The check runs in the background; its outcome shows on the domain.
  let after = await resend.domains.get(id);
  for (let i = 0; i < 100 && after.data.records.some((r) => r.status === 'not_started'); i++) {
    await new Promise((done) => setTimeout(done, 50));
    after = await resend.domains.get(id);
  }
  assert.equal(after.data.status, 'pending');
  assert.ok(after.data.records.filter((r) => r.required).every((r) => r.status === 'pending'));

  // Not verified: mail from it is refused with the SDK's error shape.
  const refused = await resend.emails.send({
    from: `Shop <hello@${name}>`,
    to: 'ada@example.test',
    subject: 'x',
    text: 'x',
  });
  assert.equal(refused.data, null);
  assert.equal(refused.error.statusCode, 403);
  assert.match(refused.error.message, /is not verified for this account/);

  const removed = await resend.domains.remove(id);
  assert.equal(removed.error, null);
  assert.deepEqual(removed.data, { object: 'domain', id, deleted: true });
  const gone = await resend.domains.get(id);
  assert.equal(gone.data, null);
  assert.equal(gone.error.statusCode, 404);
});

test('a logs list has the list shape the SDKs read', async () => {
  const response = await fetch(`${process.env.RESEND_BASE_URL}/logs?limit=2`, {
    headers: { Authorization: `Bearer ${process.env.RESEND_API_KEY}` },
  });
  const body = await response.json();
  assert.equal(body.object, 'list');
  assert.equal(typeof body.has_more, 'boolean');
  assert.ok('nextCursor' in body);
  assert.ok(body.data.every((e) => e.endpoint === e.path && e.response_status === e.status));
});
