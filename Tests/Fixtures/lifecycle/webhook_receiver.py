"""A webhook consumer of Parley's deliveries that checks them as a real one would: every delivery is
verified by the Standard Webhooks reference library (PyPI standardwebhooks, pinned by
`scripts/peer-python.sh webhooks`), `Webhook(secret).verify(body, headers)` with the library's own
rules: the `webhook-id`, `webhook-timestamp` and `webhook-signature` headers (any case) must all be
there, the timestamp within the library's default tolerance of now (5 minutes either way), and one
of the space-separated `v1,<base64>` signatures the HMAC-SHA256 of `id.timestamp.body` under the
secret (a `whsec_` secret is the base64 after the prefix). More than one `--secret` stands for a
key rotation: a delivery signed under any of them is accepted.

    webhook_receiver.py --port P --secret whsec_… [--secret whsec_… …] [--fail-first N]

Serves on 127.0.0.1:P:
- POST (any path but /received) — a delivery: a bad or missing signature answers 400 and is recorded
                   with "verified": false; a verified one answers 500 while fewer than N verified
                   deliveries have been failed (`--fail-first N`, default 0: a receiver that is down
                   for the first N, to make the sender retry), and 204 after that;
- GET  /received — 200, the deliveries in arrival order: [{"verified", "answered" (the status sent),
                   "id", "timestamp", "signature" (the webhook-* headers as sent, or null),
                   "payload" (the body parsed as JSON, or null)}].
Prints "webhook-receiver ready" once it listens; logs requests to stderr.
"""

import argparse
import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook

args = None
webhooks = []  # one Webhook per --secret
received = []  # the records of /received, in arrival order
failed = 0  # verified deliveries answered 500 so far
lock = threading.Lock()


def verify(body, headers):
    """True if any configured secret verifies the delivery. The library raises
    WebhookVerificationError for a missing header, a stale timestamp or no matching signature, and
    other errors for malformed input (a signature without a comma, bad base64, a body that isn't
    UTF-8): all of them are a delivery that fails verification."""
    errors = []
    for webhook in webhooks:
        try:
            webhook.verify(body, headers, json_parse=False)
            return True
        except Exception as error:  # noqa: BLE001
            errors.append(f"{type(error).__name__}: {error}")
    print(f"webhook-receiver: not verified: {'; '.join(errors)}", file=sys.stderr, flush=True)
    return False


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format, *a):
        sys.stderr.write("webhook-receiver: %s %s\n" % (self.address_string(), format % a))
        sys.stderr.flush()

    def answer(self, status, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        if status != 204:  # RFC 9110: a 204 has no Content-Length
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        global failed
        if self.path.split("?")[0] == "/received":
            return self.answer(405, {"error": "method_not_allowed"})
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        # a plain dict, as a consumer would hand over its framework's headers; lower-cased names (the
        # library lower-cases them too), so the lookups below find them whatever case the sender used
        headers = {name.lower(): value for name, value in self.headers.items()}
        verified = verify(body, headers)
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
        with lock:
            if not verified:
                status = 400
            elif failed < args.fail_first:
                failed += 1
                status = 500
            else:
                status = 204
            received.append({
                "verified": verified,
                "answered": status,
                "id": headers.get("webhook-id"),
                "timestamp": headers.get("webhook-timestamp"),
                "signature": headers.get("webhook-signature"),
                "payload": payload,
            })
        if status == 204:
            self.answer(204)
        else:
            self.answer(status, {"error": "invalid_signature" if status == 400 else "failing_on_purpose"})

    def do_GET(self):
        if self.path.split("?")[0] != "/received":
            return self.answer(404, {"error": "not_found"})
        with lock:
            records = list(received)
        self.answer(200, records)


def main():
    global args
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--secret", action="append", required=True)
    parser.add_argument("--fail-first", type=int, default=0)
    args = parser.parse_args()
    webhooks.extend(Webhook(secret) for secret in args.secret)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    httpd.daemon_threads = True
    print("webhook-receiver ready", flush=True)
    try:
        httpd.serve_forever()
    except (KeyboardInterrupt, SystemExit):
        pass
    httpd.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
