"""A real RFC 7523 authorization server for Parley's `jwt_bearer` grant: Authlib's own
`AuthorizationServer` and `JWTBearerGrant` (PyPI authlib, pinned by `scripts/peer-python.sh authlib-as`),
configured as a deployment trusts a client that signs its own assertions: the client is found
by the assertion's `iss` (Parley's issuer), its keys are fetched from its published JWK Set
(Parley's /.well-known/jwks.json), the audience must be this server's token endpoint (Authlib
refuses anything else), and the `sub` must be one of this server's users.

    authlib_as.py --port P --token-url URL --client-issuer ISS --client-jwks URL --user SUB [--user SUB…]

Serves on 127.0.0.1:P:
- POST /token     — Authlib's token endpoint with the jwt-bearer grant only;
- ANY  /api/…     — a protected resource: `Authorization: Bearer <token>` from /token answers
                    200 {"sub", "client", "grant": "jwt_bearer", "server": "authlib"}; otherwise
                    401 with `WWW-Authenticate: Bearer error="invalid_token"`.
Prints "authlib-as ready" once it listens.
"""

import argparse
import json
import os
import secrets
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

os.environ.setdefault("AUTHLIB_INSECURE_TRANSPORT", "1")  # plain http on loopback, in a test

from authlib.oauth2.rfc6749 import AuthorizationServer, ClientMixin, OAuth2Payload, OAuth2Request  # noqa: E402
from authlib.oauth2.rfc6750 import BearerTokenGenerator  # noqa: E402
from authlib.oauth2.rfc7523 import JWTBearerGrant  # noqa: E402
from joserfc.jwk import KeySet  # noqa: E402

args = None
tokens = {}  # access token -> {"sub", "client"}
lock = threading.Lock()


class Client(ClientMixin):
    def __init__(self, issuer):
        self.issuer = issuer

    def get_client_id(self):
        return self.issuer

    def get_default_redirect_uri(self):
        return None

    def get_allowed_scope(self, scope):
        return scope or ""

    def check_redirect_uri(self, redirect_uri):
        return False

    def check_client_secret(self, client_secret):
        return False

    def check_endpoint_auth_method(self, method, endpoint):
        return True

    def check_response_type(self, response_type):
        return False

    def check_grant_type(self, grant_type):
        return grant_type == JWTBearerGrant.GRANT_TYPE


class Grant(JWTBearerGrant):
    def resolve_issuer_client(self, issuer):
        return Client(issuer) if issuer == args.client_issuer else None

    def resolve_client_public_key(self, client):
        with urllib.request.urlopen(args.client_jwks, timeout=10) as answer:
            return KeySet.import_key_set(json.loads(answer.read()))

    def get_audiences(self):
        return [args.token_url]

    def authenticate_user(self, subject):
        return {"sub": subject} if subject in args.user else None

    def has_granted_permission(self, client, user):
        return True


class Payload(OAuth2Payload):
    def __init__(self, form):
        self._form = form

    @property
    def data(self):
        return self._form

    @property
    def datalist(self):
        values = {}
        for name, value in self._form.items():
            values.setdefault(name, []).append(value)
        return values


class Request(OAuth2Request):
    def __init__(self, method, uri, headers, form):
        super().__init__(method=method, uri=uri, headers=headers)
        self._form = form
        self.payload = Payload(form)

    @property
    def args(self):
        return {}

    @property
    def form(self):
        return self._form


class Server(AuthorizationServer):
    def query_client(self, client_id):
        return None

    def save_token(self, token, request):
        with lock:
            tokens[token["access_token"]] = {"sub": request.user["sub"], "client": request.client.issuer}

    def send_signal(self, name, *a, **k):
        pass

    def create_oauth2_request(self, request):
        return request

    def handle_response(self, status, body, headers):
        return status, body, headers


server = Server()
server.register_grant(Grant)
server.register_token_generator("default", BearerTokenGenerator(lambda **_: secrets.token_urlsafe(32)))


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def answer(self, status, body, headers=()):
        data = json.dumps(body).encode() if not isinstance(body, (bytes, str)) else (body.encode() if isinstance(body, str) else body)
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if not any(name.lower() == "content-type" for name, _ in headers):
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        if self.path.split("?")[0] != "/token":
            return self.resource()
        length = int(self.headers.get("Content-Length") or 0)
        form = dict(parse_qsl(self.rfile.read(length).decode(), keep_blank_values=True))
        request = Request("POST", args.token_url, dict(self.headers), form)
        status, body, headers = server.create_token_response(request)
        self.answer(status, body, list(headers))

    def do_GET(self):
        self.resource()

    def resource(self):
        authorization = self.headers.get("Authorization") or ""
        token = authorization[7:] if authorization.lower().startswith("bearer ") else None
        with lock:
            holder = tokens.get(token) if token else None
        if holder is None:
            return self.answer(401, {"error": "invalid_token"}, [("WWW-Authenticate", 'Bearer error="invalid_token"')])
        self.answer(200, {"sub": holder["sub"], "client": holder["client"], "grant": "jwt_bearer", "server": "authlib"})


def main():
    global args
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token-url", required=True)
    parser.add_argument("--client-issuer", required=True)
    parser.add_argument("--client-jwks", required=True)
    parser.add_argument("--user", action="append", required=True)
    args = parser.parse_args()
    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print("authlib-as ready", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
