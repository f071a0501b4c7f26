#!/usr/bin/python3
"""The shop's endpoint for oncehook-notifier, as a stand-in service.

Every POST is verified with the `standardwebhooks` library and
SHOP_WEBHOOK_SECRET (whsec_<base64>): a verified event is recorded and
answered 204, anything else is counted and answered 401 (the notifier then
retries it). `GET /events` lists what was received:

    {"verified": [{"webhook_id", "type", "order_ref", "event"}...],
     "refused": N}

`GET /readyz` answers 200; `/receiver readyz` exits 0 when it does (the
health check). Memory only: a restart forgets.
"""
import json
import os
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

PORT = 8090
MAX_BODY = 1_000_000

lock = threading.Lock()
verified = []
refused = 0


class Http(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, code, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(code)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = self.path.partition("?")[0]
        if path == "/readyz":
            return self.reply(200, "ok")
        if path == "/events":
            with lock:
                return self.reply(200, {"verified": list(verified), "refused": refused})
        return self.reply(404, {"error": "not found"})

    def do_POST(self):
        global refused
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return self.reply(413, {"error": "too large"})
        body = self.rfile.read(length)
        headers = {k: v for k, v in self.headers.items()}
        try:
            event = self.server.webhook.verify(body, headers)
        except (WebhookVerificationError, ValueError) as e:
            with lock:
                refused += 1
            print(f"receiver: refused {self.headers.get('webhook-id', '?')}: {e}", flush=True)
            return self.reply(401, {"error": str(e)})
        entry = {
            "webhook_id": self.headers.get("webhook-id", ""),
            "type": event.get("type"),
            "order_ref": (event.get("order") or {}).get("order_ref"),
            "event": event,
        }
        with lock:
            verified.append(entry)
        return self.reply(204)


def serve():
    secret = os.environ.get("SHOP_WEBHOOK_SECRET", "")
    if not secret:
        sys.exit("receiver: set SHOP_WEBHOOK_SECRET (whsec_<base64>, the endpoint's secret)")
    server = ThreadingHTTPServer(("0.0.0.0", PORT), Http)
    server.webhook = Webhook(secret)
    print(f"receiver: verifying order events on :{PORT}, listing them on GET /events", flush=True)
    server.serve_forever()


def readyz():
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/readyz", timeout=3) as r:
            return 0 if r.status == 200 else 1
    except Exception:
        return 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["readyz"]:
        sys.exit(readyz())
    serve()
