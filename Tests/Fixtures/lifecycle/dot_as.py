"""A real OAuth2 authorization server for Parley's refresh-token lifecycle: django-oauth-toolkit's own
token, revocation and protected-resource views on Django (PyPI django and django-oauth-toolkit, pinned
by `scripts/peer-python.sh dot-as`), configured as a deployment that guards against refresh-token
replay: refresh tokens rotate on every use (`ROTATE_REFRESH_TOKEN`), there is no grace period for the
previous one (`REFRESH_TOKEN_GRACE_PERIOD_SECONDS: 0`), and presenting a refresh token that was
already rotated away revokes its whole token family, later refresh tokens and their access tokens
included (`REFRESH_TOKEN_REUSE_PROTECTION`); a refresh also revokes the access token issued with
the refresh token it rotates away. One confidential client, allowed the password grant (and
so refresh_token), authenticating with client_secret_basic or client_secret_post; its secret is
stored hashed, as DOT does by default. A single-file Django project: sqlite in a temporary
directory, made at start and removed at exit, migrated by Django's own `migrate`.

    dot_as.py --port P --client-id ID --client-secret S --user NAME:PASSWORD [--user …] [--access-seconds N]

(`--access-seconds` is DOT's ACCESS_TOKEN_EXPIRE_SECONDS, default 3600.) Serves on 127.0.0.1:P:
- POST /o/token/         — DOT's token endpoint (password and refresh_token grants);
- POST /o/revoke_token/  — DOT's RFC 7009 revocation endpoint (the rest of `oauth2_provider.urls`
                           is mounted under /o/ too);
- ANY  /api/…            — a resource protected by DOT's `protected_resource()`: a live access token
                           answers 200 {"sub": <username>, "server": "django-oauth-toolkit"}; a
                           missing, expired or revoked one 401 with
                           `WWW-Authenticate: Bearer error="invalid_token"…`;
- POST /gateway/lose-refresh-answers?count=N&how=504|cut
                         — the gateway in front of DOT loses the answers of the next N refresh_token
                           grants that DOT carried out (rotating the refresh token): `504` answers a
                           Gateway Timeout page, as a proxy does when the server behind it was slow;
                           `cut` sends DOT's 200 head and half its body, then drops the connection;
- GET  /stats            — {"refreshGrants", "passwordGrants"}: calls of /o/token/ by grant_type;
                           "answersLost": answers lost by the gateway;
                           "reuseDetected": refresh_token grants answered 400 invalid_grant for a
                           refresh token the database holds as revoked (a replay: rotated away,
                           revoked with its family, or revoked at /o/revoke_token/);
                           "revokedRefreshTokens": RefreshToken rows now revoked (rotated away
                           ones included).
Prints "dot-as ready" once it listens; logs requests to stderr.
"""

import argparse
import atexit
import hashlib
import json
import secrets
import shutil
import signal
import sys
import tempfile
import threading

import django
from django.conf import settings

args = None
counts = {"refreshGrants": 0, "passwordGrants": 0, "reuseDetected": 0, "answersLost": 0}
lose = {"count": 0, "how": "504"}
lock = threading.Lock()
urlpatterns = []  # filled in by main() once Django is set up; this module is the ROOT_URLCONF


def count_token_calls(get_response):
    """Middleware: counts /o/token/ calls by grant_type, and the replays of a revoked refresh token."""
    from oauth2_provider.models import get_refresh_token_model

    def middleware(request):
        if request.path != "/o/token/" or request.method != "POST":
            return get_response(request)
        grant_type = request.POST.get("grant_type")
        response = get_response(request)
        replayed = False
        if grant_type == "refresh_token" and response.status_code == 400:
            try:
                invalid_grant = json.loads(response.content).get("error") == "invalid_grant"
            except ValueError:
                invalid_grant = False
            presented = request.POST.get("refresh_token")
            if invalid_grant and presented:
                # looked up after DOT answered, as DOT looks it up (by checksum, a live row first), so
                # a request that lost a race with a concurrent rotation of the same token counts too
                checksum = hashlib.sha256(presented.encode()).hexdigest()
                rows = get_refresh_token_model().objects.filter(token_checksum=checksum)
                replayed = rows.exists() and not rows.filter(revoked__isnull=True).exists()
        with lock:
            if grant_type == "refresh_token":
                counts["refreshGrants"] += 1
                if replayed:
                    counts["reuseDetected"] += 1
            elif grant_type == "password":
                counts["passwordGrants"] += 1
            lost = grant_type == "refresh_token" and response.status_code == 200 and lose["count"] > 0
            if lost:
                lose["count"] -= 1
                counts["answersLost"] += 1
        return lost_answer(response) if lost else response

    return middleware


def lost_answer(response):
    """What the client of a gateway sees when DOT's answer is lost behind it."""
    from django.http import HttpResponse, StreamingHttpResponse

    if lose["how"] == "504":
        return HttpResponse(b"<html><body><h1>504 Gateway Time-out</h1></body></html>", status=504, content_type="text/html")
    body = response.content

    def half_then_break():
        yield body[: len(body) // 2]
        raise ConnectionAbortedError("the gateway lost the rest of the answer")

    cut = StreamingHttpResponse(half_then_break(), status=200, content_type="application/json")
    cut["Content-Length"] = str(len(body))
    return cut


def lose_refresh_answers(request):
    from django.http import HttpResponse

    how = request.GET.get("how", "504")
    if request.method != "POST" or how not in ("504", "cut"):
        return HttpResponse(status=400)
    with lock:
        lose["count"] = int(request.GET.get("count", "1"))
        lose["how"] = how
    return HttpResponse(status=204)


def resource(request, rest=""):
    from django.http import JsonResponse

    return JsonResponse({"sub": request.resource_owner.get_username(), "server": "django-oauth-toolkit"})


def protected(view):
    """DOT's `protected_resource()` in its RFC 6750 form: 401 with a Bearer challenge (by default
    DOT answers a bare 403), without the RFC 9728 `resource_metadata` parameter (an empty URL
    leaves it out). Where DOT's challenge has no error code (a request without any token) it gets
    `error="invalid_token"`, as the other peers answer."""
    from oauth2_provider.decorators import protected_resource

    guarded = protected_resource(advertise_metadata=True, resource_metadata_url="")(view)

    def answer(request, *a, **k):
        response = guarded(request, *a, **k)
        if response.status_code in (401, 403) and 'error="invalid_token"' not in response.get("WWW-Authenticate", ""):
            response.status_code = 401
            response["WWW-Authenticate"] = 'Bearer error="invalid_token"'
        return response

    return answer


def stats(request):
    from django.http import JsonResponse
    from oauth2_provider.models import get_refresh_token_model

    with lock:
        body = dict(counts)
    body["revokedRefreshTokens"] = get_refresh_token_model().objects.filter(revoked__isnull=False).count()
    return JsonResponse(body)


def main():
    global args, urlpatterns
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--client-secret", required=True)
    parser.add_argument("--user", action="append", required=True, help="NAME:PASSWORD")
    parser.add_argument("--access-seconds", type=int, default=3600)
    args = parser.parse_args()

    directory = tempfile.mkdtemp(prefix="dot-as-")
    atexit.register(shutil.rmtree, directory, True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # so that atexit runs

    settings.configure(
        DEBUG=False,
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS=["127.0.0.1", "localhost"],
        ROOT_URLCONF=__name__,
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "oauth2_provider"],
        MIDDLEWARE=[f"{__name__}.count_token_calls"],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": f"{directory}/db.sqlite3",
                # one writer at a time, waiting for the lock rather than failing, for the threaded server
                "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE"},
            }
        },
        USE_TZ=True,
        OAUTH2_PROVIDER={
            "ACCESS_TOKEN_EXPIRE_SECONDS": args.access_seconds,
            "ROTATE_REFRESH_TOKEN": True,
            "REFRESH_TOKEN_REUSE_PROTECTION": True,
            "REFRESH_TOKEN_GRACE_PERIOD_SECONDS": 0,
        },
    )
    django.setup()

    from django.contrib.auth.models import User
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.management import call_command
    from django.core.servers.basehttp import run
    from django.urls import include, path, re_path
    from oauth2_provider.models import get_application_model

    call_command("migrate", verbosity=0)
    for user in args.user:
        name, _, password = user.partition(":")
        User.objects.create_user(username=name, password=password)
    Application = get_application_model()
    Application.objects.create(
        name="parley",
        client_id=args.client_id,
        client_secret=args.client_secret,  # plain; DOT hashes it on save (hash_client_secret=True)
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_PASSWORD,
    )

    urlpatterns = [
        path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
        re_path(r"^api/(?P<rest>.*)$", protected(resource)),
        path("stats", stats),
        path("gateway/lose-refresh-answers", lose_refresh_answers),
    ]
    try:
        run(
            "127.0.0.1",
            args.port,
            WSGIHandler(),
            threading=True,
            on_bind=lambda port: print("dot-as ready", flush=True),
        )
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
