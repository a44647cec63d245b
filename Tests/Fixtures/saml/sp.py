#!/usr/bin/python3
"""A small SAML2 service provider (pysaml2 + wsgiref) for Parley's live tests.

Run with Debian's /usr/bin/python3 (python3-pysaml2 lives in its dist-packages):

    /usr/bin/python3 sp.py --port N --workdir DIR --entity-id ID [--mode proxyfix [--cookie-domain]]

DIR must hold sp.key, sp.crt and idp-metadata.xml (start.sh writes them).

Two modes, for the two ways real SPs live behind a reverse proxy such as Parley:

default   the app reads the forwarded headers itself, for URLs only:
              external base = {X-Forwarded-Proto}://{X-Forwarded-Host}{X-Forwarded-Prefix}
          and without X-Forwarded-Host its own address, http://127.0.0.1:{port}.
          PYSP_SESSION gets Path=/ whatever the proxy's prefix.
proxyfix  the app is wrapped in Werkzeug's ProxyFix(x_for=1, x_proto=1, x_host=1,
          x_prefix=1), which moves X-Forwarded-* into the WSGI environ; the app reads
          only the environ (PEP 3333: wsgi.url_scheme, HTTP_HOST, SCRIPT_NAME), as a
          framework mounted below a prefix does, and scopes PYSP_SESSION to the
          application root it is mounted at: Path={SCRIPT_NAME or /}, e.g.
          Path=/web/{destination} behind Parley; with --cookie-domain also
          Domain={HTTP_HOST without port}.

Routes (relative to the external base):
    /SAMLAuthLauncher  no session -> 302 to the IdP (signed AuthnRequest, HTTP-Redirect)
                       session, no finishEndpointParam -> 302 ?finishEndpointParam=done
                       session + finishEndpointParam -> 200 "signed in"
    POST /saml/acs     HTTP-POST binding; signed Response and Assertion required;
                       sets PYSP_SESSION (scoped as the mode says) and 302 to RelayState
    /api/data          session -> 200 {"user": ..., "via": "pysaml2"}; else the challenge
    /metadata          this SP's metadata for the current external base
"""

import argparse
import html
import json
import logging
import secrets
import sys
import threading
import time
from http.cookies import SimpleCookie
from socketserver import ThreadingMixIn
from urllib.parse import parse_qs, urlsplit
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from saml2 import BINDING_HTTP_POST, BINDING_HTTP_REDIRECT
from saml2.client import Saml2Client
from saml2.config import SPConfig
from saml2.metadata import create_metadata_string
from saml2.saml import NAMEID_FORMAT_UNSPECIFIED
from saml2.xmldsig import DIGEST_SHA256, SIG_RSA_SHA256

COOKIE = "PYSP_SESSION"
LOG = logging.getLogger("pysp")


def host_without_port(host):
    """'host:port' -> 'host', '[v6]:port' -> '[v6]'; a host without a port stays as it is."""
    if host.startswith("[") and "]" in host:
        return host[:host.index("]") + 1]
    name, colon, port = host.rpartition(":")
    return name if colon and port.isdigit() else host


class App:
    def __init__(self, port, workdir, entity_id, proxyfix=False, cookie_domain=False):
        self.port = port
        self.workdir = workdir.rstrip("/")
        self.entity_id = entity_id
        # proxyfix: behind Werkzeug's ProxyFix, the environ already says how the browser
        # addressed the app, and the session cookie is scoped to where it is mounted.
        self.proxyfix = proxyfix
        self.cookie_domain = cookie_domain
        self.own_base = "http://127.0.0.1:%d" % port
        self.lock = threading.Lock()
        # One pysaml2 client per external base, so the ACS URL in its config
        # (used for the AuthnRequest and for the Response's Destination check)
        # always matches the address the browser sees.
        self.clients = {}
        # Outstanding AuthnRequest IDs per external base: a Response is only
        # accepted at the base whose request it answers.
        self.outstanding = {}
        self.sessions = {}  # cookie value -> {"user": ..., "attributes": ...}
        self.idp_entity_id = None

    # ---- helpers -------------------------------------------------------

    def external_base(self, environ):
        if self.proxyfix:
            return self.environ_base(environ)
        host = environ.get("HTTP_X_FORWARDED_HOST")
        if not host:
            return self.own_base
        proto = environ.get("HTTP_X_FORWARDED_PROTO") or "http"
        prefix = environ.get("HTTP_X_FORWARDED_PREFIX") or ""
        first = lambda v: v.split(",")[0].strip()
        prefix = first(prefix).rstrip("/")
        if prefix and not prefix.startswith("/"):
            prefix = "/" + prefix
        return "%s://%s%s" % (first(proto), first(host), prefix)

    @staticmethod
    def environ_base(environ):
        """The application root's URL from the environ alone (PEP 3333's URL reconstruction),
        as ProxyFix leaves it: {wsgi.url_scheme}://{HTTP_HOST}{SCRIPT_NAME}."""
        host = environ.get("HTTP_HOST") or "%s:%s" % (environ["SERVER_NAME"], environ["SERVER_PORT"])
        return "%s://%s%s" % (environ["wsgi.url_scheme"], host, environ.get("SCRIPT_NAME", "").rstrip("/"))

    def session_cookie(self, environ, token):
        """The Set-Cookie value of a new session: Path=/ in the default mode; in proxyfix
        mode Path={SCRIPT_NAME or /} and, with --cookie-domain, Domain={host without port}."""
        if not self.proxyfix:
            return "%s=%s; Path=/; HttpOnly" % (COOKIE, token)
        parts = ["%s=%s" % (COOKIE, token), "Path=%s" % (environ.get("SCRIPT_NAME") or "/")]
        if self.cookie_domain:
            host = environ.get("HTTP_HOST") or environ["SERVER_NAME"]
            parts.append("Domain=%s" % host_without_port(host))
        return "; ".join(parts + ["HttpOnly"])

    def config_for(self, base):
        conf = SPConfig()
        conf.load({
            "entityid": self.entity_id,
            "name": "Parley test SP (pysaml2)",
            "xmlsec_binary": "/usr/bin/xmlsec1",
            "crypto_backend": "xmlsec1",
            "key_file": self.workdir + "/sp.key",
            "cert_file": self.workdir + "/sp.crt",
            "metadata": {"local": [self.workdir + "/idp-metadata.xml"]},
            "allow_unknown_attributes": True,
            "accepted_time_diff": 120,
            "service": {
                "sp": {
                    "endpoints": {
                        "assertion_consumer_service": [(base + "/saml/acs", BINDING_HTTP_POST)],
                    },
                    "authn_requests_signed": True,
                    "want_response_signed": True,
                    "want_assertions_signed": True,
                    "allow_unsolicited": False,
                    "signing_algorithm": SIG_RSA_SHA256,
                    "digest_algorithm": DIGEST_SHA256,
                    "name_id_format": [NAMEID_FORMAT_UNSPECIFIED],
                },
            },
        })
        return conf

    def client_for(self, base):
        with self.lock:
            client = self.clients.get(base)
            if client is None:
                client = Saml2Client(config=self.config_for(base))
                self.clients[base] = client
                self.outstanding[base] = {}
                idps = list(client.metadata.identity_providers())
                if len(idps) != 1:
                    raise RuntimeError("expected exactly one IdP in idp-metadata.xml, found %r" % idps)
                self.idp_entity_id = idps[0]
                LOG.info("new pysaml2 client for external base %s (ACS %s/saml/acs)", base, base)
            return client

    def session(self, environ):
        raw = environ.get("HTTP_COOKIE")
        if not raw:
            return None
        try:
            jar = SimpleCookie(raw)
        except Exception:
            return None
        morsel = jar.get(COOKIE)
        return self.sessions.get(morsel.value) if morsel else None

    @staticmethod
    def respond(start_response, status, body=b"", ctype="text/plain; charset=utf-8", headers=()):
        if isinstance(body, str):
            body = body.encode("utf-8")
        hdrs = [("Content-Type", ctype), ("Content-Length", str(len(body))),
                ("Cache-Control", "no-store")] + list(headers)
        start_response(status, hdrs)
        return [body]

    def redirect(self, start_response, location, headers=()):
        return self.respond(start_response, "302 Found", "", headers=[("Location", location)] + list(headers))

    def challenge(self, environ, start_response, base):
        """302 to the IdP's SSO URL with a signed AuthnRequest (HTTP-Redirect)."""
        client = self.client_for(base)
        relay_state = base + "/SAMLAuthLauncher"
        reqid, info = client.prepare_for_authenticate(
            entityid=self.idp_entity_id,
            relay_state=relay_state,
            binding=BINDING_HTTP_REDIRECT,
            sign=True,
            sigalg=SIG_RSA_SHA256,
            digest_alg=DIGEST_SHA256,
            assertion_consumer_service_url=base + "/saml/acs",
        )
        with self.lock:
            pending = self.outstanding[base]
            pending[reqid] = relay_state
            while len(pending) > 1000:
                pending.pop(next(iter(pending)))
        location = dict(info["headers"])["Location"]
        LOG.info("challenge: AuthnRequest %s, ACS %s/saml/acs, RelayState %s", reqid, base, relay_state)
        return self.redirect(start_response, location)

    # ---- routes --------------------------------------------------------

    def __call__(self, environ, start_response):
        try:
            return self.route(environ, start_response)
        except Exception as e:  # keep serving; show the error
            LOG.exception("unhandled error")
            return self.respond(start_response, "500 Internal Server Error", "error: %s\n" % e)

    def route(self, environ, start_response):
        path = environ.get("PATH_INFO") or "/"
        method = environ["REQUEST_METHOD"]
        base = self.external_base(environ)
        query = parse_qs(environ.get("QUERY_STRING", ""))
        sess = self.session(environ)

        if path == "/SAMLAuthLauncher" and method in ("GET", "HEAD", "POST"):
            if sess is None:
                return self.challenge(environ, start_response, base)
            if "finishEndpointParam" not in query:
                return self.redirect(start_response, base + "/SAMLAuthLauncher?finishEndpointParam=done")
            body = ("<!DOCTYPE html>\n<html><head><title>signed in</title></head>"
                    "<body><h1 id=\"status\">signed in</h1><p>as <span id=\"user\">%s</span> via pysaml2</p>"
                    "</body></html>\n" % html.escape(sess["user"]))
            return self.respond(start_response, "200 OK", body, "text/html; charset=utf-8")

        if path == "/saml/acs":
            if method != "POST":
                return self.respond(start_response, "405 Method Not Allowed", "POST only\n",
                                    headers=[("Allow", "POST")])
            return self.acs(environ, start_response, base)

        if path == "/api/data" and method in ("GET", "HEAD"):
            if sess is None:
                return self.challenge(environ, start_response, base)
            body = json.dumps({"user": sess["user"], "via": "pysaml2"})
            return self.respond(start_response, "200 OK", body, "application/json")

        if path == "/metadata" and method in ("GET", "HEAD"):
            conf = self.client_for(base).config
            xml = create_metadata_string(None, config=conf, valid=24)
            return self.respond(start_response, "200 OK", xml, "application/samlmetadata+xml")

        if path == "/":
            return self.respond(start_response, "200 OK", "pysaml2 test SP; external base %s\n" % base)

        return self.respond(start_response, "404 Not Found", "not found\n")

    def acs(self, environ, start_response, base):
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        form = parse_qs(environ["wsgi.input"].read(length).decode("utf-8", "replace"))
        saml_response = (form.get("SAMLResponse") or [None])[0]
        relay_state = (form.get("RelayState") or [""])[0]
        if not saml_response:
            return self.respond(start_response, "400 Bad Request", "missing SAMLResponse\n")
        client = self.client_for(base)
        with self.lock:
            outstanding = dict(self.outstanding[base])
        try:
            resp = client.parse_authn_request_response(saml_response, BINDING_HTTP_POST, outstanding=outstanding)
        except Exception as e:
            LOG.warning("ACS %s/saml/acs rejected the response: %s: %s", base, type(e).__name__, e)
            return self.respond(start_response, "403 Forbidden",
                                "SAML response rejected: %s: %s\n" % (type(e).__name__, e))
        if resp is None:
            return self.respond(start_response, "403 Forbidden", "SAML response rejected\n")
        with self.lock:
            self.outstanding[base].pop(resp.in_response_to, None)
        ava = resp.get_identity() or {}
        uid = (ava.get("uid") or [None])[0]
        name_id = resp.name_id.text if resp.name_id is not None else None
        user = uid or name_id or "unknown"
        token = secrets.token_urlsafe(32)
        with self.lock:
            self.sessions[token] = {"user": user, "name_id": name_id, "attributes": ava, "at": time.time()}
        LOG.info("ACS %s/saml/acs: signed-in user %s (NameID %s, InResponseTo %s)",
                 base, user, name_id, resp.in_response_to)
        target = relay_state if relay_state.startswith(base + "/") else base + "/SAMLAuthLauncher"
        cookie = self.session_cookie(environ, token)
        return self.redirect(start_response, target, headers=[("Set-Cookie", cookie)])


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (self.log_date_time_string(), fmt % args))
        sys.stderr.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--entity-id", required=True)
    ap.add_argument("--mode", choices=("default", "proxyfix"), default="default",
                    help="proxyfix: behind Werkzeug's ProxyFix, cookie scoped to SCRIPT_NAME")
    ap.add_argument("--cookie-domain", action="store_true",
                    help="proxyfix mode: the session cookie also gets Domain={host without port}")
    args = ap.parse_args()
    if args.cookie_domain and args.mode != "proxyfix":
        ap.error("--cookie-domain needs --mode proxyfix")
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("saml2").setLevel(logging.WARNING)
    app = App(args.port, args.workdir, args.entity_id,
              proxyfix=args.mode == "proxyfix", cookie_domain=args.cookie_domain)
    app.client_for(app.own_base)  # load keys and IdP metadata now: fail fast
    wsgi = app
    if app.proxyfix:
        from werkzeug.middleware.proxy_fix import ProxyFix
        wsgi = ProxyFix(app, x_for=1, x_proto=1, x_host=1, x_prefix=1)
    httpd = make_server("127.0.0.1", args.port, wsgi,
                        server_class=ThreadingWSGIServer, handler_class=QuietHandler)
    LOG.info("pysaml2 SP listening on http://127.0.0.1:%d (entity %s, IdP %s, mode %s%s)",
             args.port, args.entity_id, app.idp_entity_id, args.mode,
             ", cookie domain" if args.cookie_domain else "")
    httpd.serve_forever()


if __name__ == "__main__":
    main()
