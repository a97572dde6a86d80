"""Resend's Python SDK (`resend` 2.52.0), unchanged, against mail-service.

Run by mail-service/tests/sdk_python.rs with RESEND_API_URL pointing at a
`mail-service serve` process and RESEND_API_KEY a full-access key of the
tenant `acme` (whose domain acme.test is verified). Every endpoint the SDK
shares with the service is called through the SDK; webhook deliveries go to
a receiver in this process and are checked with the SDK's own
`Webhooks.verify`. Prints one line per passing story; any failure raises
(exit status 1).
"""

import http.server
import json
import threading
import time
from datetime import datetime, timedelta, timezone

import resend
from resend.exceptions import ResendError

FROM = "Acme <billing@acme.test>"


def until(condition, what, seconds=15):
    deadline = time.time() + seconds
    while not condition():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def refused(call, status, error_type):
    """Runs `call`, which must fail with the service's error as the SDK raises it."""
    try:
        call()
    except ResendError as e:
        assert str(e.code) == str(status), (e.code, e.error_type, str(e))
        assert e.error_type == error_type, (e.code, e.error_type, str(e))
        return e
    raise AssertionError(f"expected {status} {error_type}")


def emails():
    sent = resend.Emails.send(
        {"from": FROM, "to": "ada@example.test", "subject": "Hello", "text": "It works"}
    )
    got = resend.Emails.get(sent["id"])
    assert got["id"] == sent["id"], got
    assert got["object"] == "email"
    assert got["to"] in (["ada@example.test"], "ada@example.test"), got["to"]
    assert got["last_event"] == "sent", got

    once = {"idempotency_key": f"py-{time.time_ns()}"}
    body = {"from": FROM, "to": "ada@example.test", "subject": "Once", "text": "x"}
    first = resend.Emails.send(body, once)
    assert resend.Emails.send(body, once)["id"] == first["id"]

    e = refused(
        lambda: resend.Emails.send({"from": FROM, "to": "not-an-address", "subject": "x", "text": "x"}),
        422,
        "validation_error",
    )
    assert "to" in str(e), str(e)

    batch = resend.Batch.send(
        [
            {"from": FROM, "to": "ada@example.test", "subject": "1", "text": "x"},
            {"from": FROM, "to": "bob@example.test", "subject": "2", "text": "x"},
        ]
    )
    assert len(batch["data"]) == 2, batch

    listed = resend.Emails.list({"limit": 2})
    assert listed["object"] == "list" and len(listed["data"]) == 2, listed
    assert listed["has_more"] is True
    older = resend.Emails.list({"limit": 2, "after": listed["data"][-1]["id"]})
    assert older["data"][0]["id"] not in [e["id"] for e in listed["data"]]
    print("ok emails: send, get, idempotency, a refusal, batch, list")


class IfMatchClient(resend.RequestsClient):
    """The SDK's own HTTP client, adding the If-Match the service's PATCH
    /emails/{id} requires (the SDK has no option for it)."""

    if_match = None

    def request(self, method, url, headers, json=None, files=None, data=None):
        headers = dict(headers)
        if method.lower() == "patch" and self.if_match:
            headers["If-Match"] = self.if_match
        return super().request(method, url, headers, json=json, files=files, data=data)


def scheduling():
    at = (datetime.now(timezone.utc) + timedelta(minutes=10)).isoformat()
    later = (datetime.now(timezone.utc) + timedelta(minutes=20)).replace(microsecond=0)
    sent = resend.Emails.send(
        {"from": FROM, "to": "ada@example.test", "subject": "Later", "text": "x", "scheduled_at": at}
    )
    got = resend.Emails.get(sent["id"])
    assert got["last_event"] == "scheduled", got
    # Without If-Match (the SDK never sends it) the service answers 428,
    # naming the header and where its value comes from.
    e = refused(
        lambda: resend.Emails.update({"id": sent["id"], "scheduled_at": later.isoformat()}),
        428,
        "precondition_required",
    )
    assert e.message.startswith("If-Match: required"), e.message
    assert "ETag header of GET /emails/{id}" in e.message, e.message
    etag = got["http_headers"].get("etag") or got["http_headers"].get("ETag")
    client = IfMatchClient()
    client.if_match = etag
    default = resend.default_http_client
    resend.default_http_client = client
    try:
        # The SDK repeats the id in the body: accepted, as it names the path's email.
        moved = resend.Emails.update({"id": sent["id"], "scheduled_at": later.isoformat()})
    finally:
        resend.default_http_client = default
    assert moved["id"] == sent["id"], moved
    assert resend.Emails.get(sent["id"])["scheduled_at"].startswith(
        later.strftime("%Y-%m-%dT%H:%M:%S")
    )
    canceled = resend.Emails.cancel(sent["id"])
    assert canceled["id"] == sent["id"], canceled
    assert resend.Emails.get(sent["id"])["last_event"] == "canceled"
    print("ok emails: scheduled, update (If-Match through the SDK's HTTP client), cancel")


def metrics():
    m = resend.Emails.metrics()
    assert m["object"] == "metrics", m
    assert m["granularity"] == "daily"
    assert m["totals"]["sent"] >= 1, m
    by_day = resend.Emails.metrics({"dimensions": ["period"], "metrics": ["sent", "received"]})
    assert len(by_day["data"]) == 7, by_day
    assert sum(row["sent"] for row in by_day["data"]) == by_day["totals"]["sent"]
    refused(lambda: resend.Emails.metrics({"metrics": ["opened"]}), 422, "validation_error")
    print("ok emails.metrics")


def domains():
    name = f"py-{time.time_ns()}.example"
    created = resend.Domains.create({"name": name, "custom_return_path": "bounce"})
    assert created["name"] == name and created["status"] == "not_started", created
    kinds = [f"{r['record']} {r['type']}" for r in created["records"]]
    assert kinds == ["SPF MX", "SPF TXT", "DKIM TXT"], kinds
    assert created["dmarc"]["record"] == "DMARC"
    id = created["id"]
    assert resend.Domains.get(id)["id"] == id
    assert any(d["id"] == id for d in resend.Domains.list({"limit": 100})["data"])
    started = time.time()
    verified = resend.Domains.verify(id)
    assert time.time() - started < 1, "verify answers at once"
    assert verified["id"] == id, verified
    until(
        lambda: all(r["status"] != "not_started" for r in resend.Domains.get(id)["records"]),
        "the background check",
    )
    assert resend.Domains.get(id)["status"] == "pending"
    removed = resend.Domains.remove(id)
    assert removed["deleted"] is True, removed
    refused(lambda: resend.Domains.get(id), 404, "not_found")
    print("ok domains: create, get, list, verify (answered at once), remove")


def suppressions():
    added = resend.Suppressions.add({"email": "Gone@Example.test"})
    assert added["object"] == "suppression", added
    entry = resend.Suppressions.get("gone@example.test")
    assert entry["id"] == added["id"] and entry["email"] == "Gone@example.test", entry
    assert entry["origin"] == "manual" and entry["source_id"] is None, entry
    listed = resend.Suppressions.list({"limit": 10})
    assert any(s["id"] == added["id"] for s in listed["data"]), listed
    assert all("origin" in s for s in listed["data"])
    # A case variant of a suppressed address is not mailed.
    sent = resend.Emails.send({"from": FROM, "to": "GONE@example.test", "subject": "x", "text": "x"})
    assert resend.Emails.get(sent["id"])["last_event"] == "suppressed"
    removed = resend.Suppressions.remove("gone@EXAMPLE.test")
    assert removed["id"] == added["id"] and removed["deleted"] is True, removed

    batch = resend.Suppressions.Batch.add({"emails": ["a@x.test", "A@x.test", "b@x.test"]})
    assert len(batch["data"]) == 2, batch
    gone = resend.Suppressions.Batch.remove({"emails": ["a@X.test", "nobody@x.test"]})
    assert [s["id"] for s in gone["data"]] == [batch["data"][0]["id"]], gone
    gone = resend.Suppressions.Batch.remove({"ids": [batch["data"][1]["id"]]})
    assert gone["data"][0]["deleted"] is True
    print("ok suppressions: add, get, list, remove, batch add and remove, any case")


def logs():
    listed = resend.Logs.list({"limit": 5})
    assert listed["object"] == "list", listed
    assert all(entry["response_status"] != 0 for entry in listed["data"]), listed
    one = resend.Logs.get(listed["data"][0]["id"])
    assert one["id"] == listed["data"][0]["id"], one
    print("ok logs: list (finished requests only), get")


class Receiver(http.server.BaseHTTPRequestHandler):
    received = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        Receiver.received.append((dict(self.headers), body))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def webhooks():
    server = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}/hook"
        created = resend.Webhooks.create({"endpoint": endpoint, "events": ["email.sent"]})
        id, secret = created["id"], created["signing_secret"]
        assert secret.startswith("whsec_"), created
        got = resend.Webhooks.get(id)
        assert got["status"] == "enabled" and got["endpoint"] == endpoint, got
        assert secret[6:] not in json.dumps(got)
        assert any(w["id"] == id for w in resend.Webhooks.list()["data"])

        sent = resend.Emails.send({"from": FROM, "to": "ada@example.test", "subject": "Hook", "text": "x"})
        until(lambda: len(Receiver.received) >= 1, "the delivery")
        headers, body = Receiver.received[0]
        h = {k.lower(): v for k, v in headers.items()}
        signed = {"id": h["webhook-id"], "timestamp": h["webhook-timestamp"], "signature": h["webhook-signature"]}
        event = resend.Webhooks.verify({"payload": body, "headers": signed, "webhook_secret": secret})
        assert event["type"] == "email.sent" and event["data"]["email_id"] == sent["id"], event
        try:
            resend.Webhooks.verify(
                {"payload": body.replace("Hook", "Hack"), "headers": signed, "webhook_secret": secret}
            )
            raise AssertionError("a tampered payload verified")
        except ValueError:
            pass

        events = resend.Webhooks.list_events(id)
        event_id = events["data"][0]["id"]
        assert f"msg_{event_id}" == signed["id"], events
        one = resend.Webhooks.get_event(id, event_id)
        assert one["payload"] == json.loads(body), one
        attempts = resend.Webhooks.list_event_attempts(id, event_id)
        assert attempts["data"][0]["http_status_code"] == 200, attempts
        resend.Webhooks.replay_event(id, event_id)
        until(lambda: len(Receiver.received) >= 2, "the replay")

        rotated = resend.Webhooks.rotate_signing_secret(id)
        assert rotated["signing_secret"] != secret, rotated
        # The SDK repeats the id in the body as webhook_id: accepted.
        updated = resend.Webhooks.update({"webhook_id": id, "status": "disabled", "events": ["email.failed"]})
        assert updated["id"] == id, updated
        after = resend.Webhooks.get(id)
        assert after["status"] == "disabled" and after["events"] == ["email.failed"], after
        assert resend.Webhooks.remove(id)["deleted"] is True
    finally:
        server.shutdown()
    print("ok webhooks: create, get, list, a delivery checked with Webhooks.verify, events, attempts, replay, rotate, update, remove")


if __name__ == "__main__":
    assert resend.api_url.startswith("http://127.0.0.1"), resend.api_url
    for story in [emails, scheduling, metrics, domains, suppressions, logs, webhooks]:
        story()
    print("all Python SDK stories passed")
