// Resend's Node SDK, unchanged, against mail-service: webhooks. The
// deliveries go to a receiver in this process and are checked with the
// SDK's own `webhooks.verify` (the Standard Webhooks library). Run by
// mail-service/tests/sdk.rs, whose server may call loopback over http.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { Resend } from 'resend';

const resend = new Resend(process.env.RESEND_API_KEY);

function receiver() {
  const received = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk) => (body += chunk));
    req.on('end', () => {
      received.push({ headers: req.headers, body });
      res.writeHead(200);
      res.end('ok');
    });
  });
  return { received, server };
}

async function until(condition, what) {
  const deadline = Date.now() + 15000;
  while (!condition()) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('webhooks: create, a verified delivery, its events and attempts, replay, update, rotate, remove', async () => {
  const { received, server } = receiver();
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  try {
    const endpoint = `http://127.0.0.1:${server.address().port}/hook`;
    const created = await resend.webhooks.create({ endpoint, events: ['email.sent'] });
    assert.equal(created.error, null);
    assert.equal(created.data.object, 'webhook');
    assert.match(created.data.signing_secret, /^whsec_/);
    const id = created.data.id;
    const secret = created.data.signing_secret;

    const got = await resend.webhooks.get(id);
    assert.equal(got.error, null);
    assert.equal(got.data.status, 'enabled');
    assert.equal(got.data.endpoint, endpoint);
    assert.deepEqual(got.data.events, ['email.sent']);
    assert.equal(JSON.stringify(got.data).includes(secret.slice(6)), false);
    const listed = await resend.webhooks.list();
    assert.equal(listed.error, null);
    assert.ok(listed.data.data.some((w) => w.id === id));

    const sent = await resend.emails.send({
      from: 'Acme <billing@acme.test>',
      to: 'ada@example.test',
      subject: 'Hello',
      text: 'It works',
    });
    assert.equal(sent.error, null);
    await until(() => received.length >= 1, 'the delivery');
    const delivery = received[0];
    const headers = {
      id: delivery.headers['webhook-id'],
      timestamp: delivery.headers['webhook-timestamp'],
      signature: delivery.headers['webhook-signature'],
    };
    const event = resend.webhooks.verify({ payload: delivery.body, headers, webhookSecret: secret });
    assert.equal(event.type, 'email.sent');
    assert.equal(event.data.email_id, sent.data.id);
    assert.deepEqual(event.data.to, ['ada@example.test']);
    // The svix-* aliases carry the same values.
    assert.equal(delivery.headers['svix-id'], headers.id);
    assert.equal(delivery.headers['svix-signature'], headers.signature);
    assert.throws(() =>
      resend.webhooks.verify({
        payload: delivery.body.replace('Hello', 'Hullo'),
        headers,
        webhookSecret: secret,
      }),
    );

    const events = await resend.webhooks.events.list({ webhookId: id });
    assert.equal(events.error, null);
    assert.equal(events.data.data.length, 1);
    const eventId = events.data.data[0].id;
    assert.equal(events.data.data[0].status, 'success');
    assert.equal(`msg_${eventId}`, headers.id);
    const one = await resend.webhooks.events.get({ webhookId: id, eventId });
    assert.equal(one.error, null);
    assert.equal(one.data.object, 'webhook_event');
    assert.deepEqual(one.data.payload, JSON.parse(delivery.body));
    const attempts = await resend.webhooks.events.attempts.list({ webhookId: id, eventId });
    assert.equal(attempts.error, null);
    assert.equal(attempts.data.data[0].http_status_code, 200);

    const replayed = await resend.webhooks.events.replay({ webhookId: id, eventId });
    assert.equal(replayed.error, null);
    assert.deepEqual(replayed.data, { object: 'webhook_event', id: eventId });
    await until(() => received.length >= 2, 'the replay');
    assert.equal(received[1].headers['webhook-id'], headers.id);

    const rotated = await resend.webhooks.rotateSigningSecret(id);
    assert.equal(rotated.error, null);
    assert.match(rotated.data.signing_secret, /^whsec_/);
    assert.notEqual(rotated.data.signing_secret, secret);

    const updated = await resend.webhooks.update(id, { status: 'disabled', events: ['email.failed'] });
    assert.equal(updated.error, null);
    assert.deepEqual(updated.data, { object: 'webhook', id });
    const after = await resend.webhooks.get(id);
    assert.equal(after.data.status, 'disabled');
    assert.deepEqual(after.data.events, ['email.failed']);

    const removed = await resend.webhooks.remove(id);
    assert.equal(removed.error, null);
    assert.deepEqual(removed.data, { object: 'webhook', id, deleted: true });
    const gone = await resend.webhooks.get(id);
    assert.equal(gone.error.name, 'not_found');
  } finally {
    server.close();
  }
});
