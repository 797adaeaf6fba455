"""An SMTP sink for tests/reports.rs: aiosmtpd (PyPI) on 127.0.0.1 that
requires STARTTLS, and AUTH only after it. Each message is written to
OUT_DIR as <n>.eml, after a first line of facts about its session (TLS,
authenticated, envelope). Prints its port, then serves until its stdin
closes or LIFETIME seconds pass, whichever is first.

usage: smtp_sink.py CERT_PEM KEY_PEM OUT_DIR USER PASSWORD LIFETIME
"""
import os
import socket
import ssl
import sys
import threading

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

cert, key, out_dir, user, password, lifetime = sys.argv[1:7]
context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
context.load_cert_chain(cert, key)


class Handler:
    def __init__(self):
        self.n = 0

    async def handle_DATA(self, server, session, envelope):
        self.n += 1
        facts = "tls=%s auth=%s from=%s to=%s\n" % (
            session.ssl is not None,
            session.authenticated,
            envelope.mail_from,
            ",".join(envelope.rcpt_tos),
        )
        path = os.path.join(out_dir, "%d.eml" % self.n)
        with open(path + ".tmp", "wb") as f:
            f.write(facts.encode() + envelope.original_content)
        os.rename(path + ".tmp", path)
        return "250 OK"


def authenticate(server, session, envelope, mechanism, auth_data):
    ok = (
        isinstance(auth_data, LoginPassword)
        and auth_data.login == user.encode()
        and auth_data.password == password.encode()
    )
    return AuthResult(success=ok)


probe = socket.socket()
probe.bind(("127.0.0.1", 0))
port = probe.getsockname()[1]
probe.close()
controller = Controller(
    Handler(),
    hostname="127.0.0.1",
    port=port,
    tls_context=context,
    require_starttls=True,
    authenticator=authenticate,
    auth_require_tls=True,
)
controller.start()
print(port, flush=True)
waiter = threading.Thread(target=sys.stdin.read, daemon=True)
waiter.start()
waiter.join(float(lifetime))
controller.stop()
