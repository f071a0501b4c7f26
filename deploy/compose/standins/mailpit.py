#!/usr/bin/python3
"""A mail catcher with the slice of Mailpit's interface oncehook uses.

`/mailpit` serves SMTP on :1025 and HTTP on :8025; `/mailpit readyz` exits 0
when the HTTP side answers /readyz (Mailpit's own health check command).
"""
import email
import email.policy
import email.utils
import json
import sys
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SMTP_PORT = 1025
HTTP_PORT = 8025
MAX_MESSAGES = 50_000  # like Mailpit's default max: oldest dropped first

messages = []
lock = threading.Lock()


def addresses(value):
    return [{"Name": n, "Address": a} for n, a in email.utils.getaddresses([value or ""]) if a]


class Handler:
    async def handle_DATA(self, server, session, envelope):
        msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
        sender = addresses(msg.get("From", ""))
        entry = {
            "ID": uuid.uuid4().hex,
            "MessageID": (msg.get("Message-ID") or "").strip().strip("<>"),
            "From": sender[0] if sender else {"Name": "", "Address": envelope.mail_from},
            "To": addresses(msg.get("To", "")) or [{"Name": "", "Address": a} for a in envelope.rcpt_tos],
            "Subject": str(msg.get("Subject", "")),
            "Created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "Size": len(envelope.content),
        }
        with lock:
            messages.append(entry)
            del messages[:-MAX_MESSAGES]
        return "250 OK"


class Http(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path, _, query = self.path.partition("?")
        if path in ("/readyz", "/livez"):
            return self.reply(200, "ok")
        if path == "/api/v1/messages":
            params = dict(p.partition("=")[::2] for p in query.split("&") if p)
            start = int(params.get("start", "0") or 0)
            limit = int(params.get("limit", "50") or 50)
            with lock:
                newest_first = list(reversed(messages))
            page = newest_first[start:start + limit]
            return self.reply(200, {"total": len(newest_first), "unread": len(newest_first),
                                    "count": len(page), "messages_count": len(newest_first),
                                    "start": start, "messages": page})
        return self.reply(404, {"error": "not found"})

    def do_DELETE(self):
        if self.path.partition("?")[0] == "/api/v1/messages":
            with lock:
                messages.clear()
            return self.reply(200, "ok")
        return self.reply(404, {"error": "not found"})


def serve():
    from aiosmtpd.controller import Controller

    smtp = Controller(Handler(), hostname="0.0.0.0", port=SMTP_PORT, data_size_limit=10_000_000)
    smtp.start()
    print(f"stand-in mailpit: SMTP on :{SMTP_PORT}, HTTP on :{HTTP_PORT}", flush=True)
    try:
        ThreadingHTTPServer(("0.0.0.0", HTTP_PORT), Http).serve_forever()
    finally:
        smtp.stop()


def readyz():
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{HTTP_PORT}/readyz", timeout=3) as r:
            return 0 if r.status == 200 else 1
    except Exception:
        return 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["readyz"]:
        sys.exit(readyz())
    serve()
