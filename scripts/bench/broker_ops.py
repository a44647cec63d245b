#!/usr/bin/env python3
"""Broker operations per vCPU of Parley's CPU: how many of its own operations Parley completes per
second of the CPU time it spends, for four operations, each with its own target:

1. token refreshes brokered (target >= 500/s): a proxied call whose registration's token has
   expired, so that Parley refreshes it (refresh_token grant) before it forwards the call;
2. client-credentials tokens obtained (target >= 500/s): a proxied call whose destination's shared
   client-credentials token has expired, so that Parley obtains a new one (client_credentials grant);
3. registrations created (target >= 500/s): `POST /v1/registrations` answered 201;
4. hosted Basic-form sign-ins completed (target >= 100/s): a person's browser opens the flow URL
   (the confirmation page), presses its button (the credentials form), posts the user's name and
   password (Parley tries them upstream and seals them into the registration), and reads the done
   page: `completed`.

The figure is operations / Parley's CPU seconds in that phase: utime+stime of the `parley` process
(/proc/<pid>/stat, every thread), read before and after each phase. The authorization server and
the upstream (a simulator of this script's own, so that its counters are this run's) and
PostgreSQL run beside it on the same machine; their CPU is not counted (shown beside, for
context). Keycloak's published sizing is printed beside each as a reference: 1 vCPU per 120
client-credentials grants/s, per 120 refresh-token requests/s, per 15 password logins/s.

One Parley instance, rate limits off (PARLEY_RATE_LIMIT_*, the pages' and flows' included),
refresh ahead of need off (PARLEY_REFRESH_AHEAD_SECONDS=0: only calls refresh), with destinations:
- `pw`: OAuth2 password grant against the simulator (its tokens carry a refresh token), API
  `/oauth-api/…`. OPS_REFRESHES registrations, each with one proxied call that obtains its token
  (not measured). Then every token's expiry is set in the past and every instance told to drop its
  cached copies (`pg_notify('parley_cache', 't:*')`). Measured: one registration's call repeated
  until the simulator counts its refresh (the notification has then taken effect), then one
  proxied call for every other registration, OPS_CONCURRENCY at a time. Each must answer 200, and the
  simulator must count exactly one refresh_token grant per registration.
- `cc-0` … `cc-<M-1>`: OAuth2 client credentials. Such a token belongs to its destination, shared
  by all its registrations, so each operation needs a destination of its own: M = OPS_CC_TOKENS
  destinations, one registration each, one call each that obtains the first token (not
  measured). Then the tokens expire as above; measured: the same probe, then one call for every
  other destination, OPS_CONCURRENCY at a time; exactly one client_credentials grant per destination.
- `reg`: `basic: {}`. Measured: OPS_REGISTRATIONS registrations with the user's credentials
  (sealed), OPS_CONCURRENCY keep-alive clients at a time; every answer 201 (Keycloak publishes no
  figure for this one).
- `form`: `basic: {form: true}` against the simulator's Basic-protected `/api/data`. OPS_SIGNINS
  registrations without credentials, each with one proxied call that answers `401
  interaction_required` with a `basic` flow (not measured). Measured: OPS_SIGNIN_CONCURRENCY "browsers" at a time
  (plain HTTP, no browser), each sign-in GET flow URL (confirmation page, its `parley_confirm`
  cookie), POST /flows/{id}/confirm (the credentials form), POST /flows/{id}/credentials
  (alice/wonderland; 303 to the done page), GET /flows/{id}/done (`completed`). Checked after:
  `GET /v1/flows/{id}` says `completed` and one proxied call answers 200, for every registration.

Environment: BIN DATABASE_URL PSQL SIM_PORT KEYS TMP (see common.sh; SIM_PORT is not used: the
script starts a simulator of its own); knobs OPS_REFRESHES (2000), OPS_CC_TOKENS (1000),
OPS_REGISTRATIONS (5000), OPS_SIGNINS (500), OPS_CONCURRENCY (32), OPS_SIGNIN_CONCURRENCY (16).
Exits 0 when it ran, whatever the verdicts; 1 when something could not run.
"""

import asyncio
import html
import http.client
import json
import os
import re
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (CLK_TCK, Env, _tail, cpu_seconds, die, each, exchange, expect,  # noqa: E402
                      register_and_call, request, run_main, say, start_instances, start_simulator, USER, verdict)

OAUTH_PATH = "/v1/proxy/oauth-api/data"
BASIC_PATH = "/v1/proxy/api/data"
# Keycloak's published sizing (per vCPU): the reference printed beside each figure.
KEYCLOAK = {"refresh": 120, "client_credentials": 120, "password_login": 15}


# ---------------------------------------------------------------- CPU accounting

def postmaster_pid(env):
    """The database's postmaster: the parent of its checkpointer (a process that lives as long)."""
    checkpointer = env.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'").strip()
    try:
        with open(f"/proc/{checkpointer}/stat") as f:
            comm, _, rest = f.read().partition(" (")[2].rpartition(")")
        if comm != "postgres":
            return None
        return int(rest.split()[1])
    except (OSError, IndexError, ValueError):
        return None  # a database on another machine: not shown


def postgres_cpu(postmaster):
    """{pid: CPU seconds} of the postmaster and its children (backends, workers), from /proc."""
    if postmaster is None:
        return {}
    pids = {postmaster}
    parent = str(postmaster)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[1] == parent:
                        pids.add(int(entry))
            except (OSError, IndexError):
                pass
    return {pid: cpu_seconds(pid) for pid in pids}


class Meter:
    """CPU seconds of Parley, the simulator and PostgreSQL, and wall time, over one phase. For
    PostgreSQL (context only): the processes alive at both ends, plus those that started between."""

    def __init__(self, postmaster, parley_pid, sim_pid):
        self.postmaster, self.parley_pid, self.sim_pid = postmaster, parley_pid, sim_pid

    def __enter__(self):
        self.pg_start = postgres_cpu(self.postmaster)
        self.start = (time.monotonic(), cpu_seconds(self.parley_pid), cpu_seconds(self.sim_pid))
        return self

    def __exit__(self, *exc):
        end = (time.monotonic(), cpu_seconds(self.parley_pid), cpu_seconds(self.sim_pid))
        self.wall, self.parley, self.sim = (b - a for a, b in zip(self.start, end))
        pg_end = postgres_cpu(self.postmaster)
        self.postgres = sum(t - self.pg_start.get(pid, 0.0) for pid, t in pg_end.items() if t > 0)
        return False

    def beside(self):
        postgres = f", PostgreSQL {self.postgres:.2f} s" if self.postmaster else ""
        return (f"Parley {self.parley:.2f} s CPU over {self.wall:.2f} s wall ({self.parley / self.wall:.2f} cores busy); "
                f"beside it, not counted: simulator {self.sim:.2f} s{postgres}")


def result(name, ops, meter, target, keycloak=None, keycloak_name=None):
    rate = ops / meter.parley if meter.parley > 0 else float("inf")
    reference = ""
    if keycloak:
        reference = f"; x{rate / keycloak:.1f} of Keycloak's {keycloak}/s per vCPU for {keycloak_name}"
    say(f"RESULT broker operations per vCPU of Parley's CPU: {name} {rate:.0f}/s (target >= {target}: "
        f"{verdict(rate >= target)}; {ops} in {meter.parley:.2f} s of Parley CPU, {meter.wall:.2f} s wall{reference})")


def local_target(url):
    """`http://host:port/path?query` → `/path?query` (Parley's own URLs: PARLEY_PUBLIC_URL is its listen address)."""
    parts = urllib.parse.urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def grants(sim_port, grant):
    status, body = request(sim_port, "GET", "/sim/stats")
    if status != 200:
        die(f"GET /sim/stats answered {status}")
    return json.loads(body)["oauth"]["tokenCallsByGrant"].get(grant, 0)


# ---------------------------------------------------------------- main

def main():
    env = Env()
    knobs = {name: int(os.environ.get(name, default)) for name, default in (
        ("OPS_REFRESHES", "2000"), ("OPS_CC_TOKENS", "1000"), ("OPS_REGISTRATIONS", "5000"), ("OPS_SIGNINS", "500"),
        ("OPS_CONCURRENCY", "32"), ("OPS_SIGNIN_CONCURRENCY", "16"))}
    for name, value in knobs.items():
        if value < 1:
            die(f"{name} must be at least 1")
    simulator, sim_port = start_simulator(env, "broker-ops")
    try:
        run(env, simulator, sim_port, knobs)
    finally:
        simulator.terminate()
        simulator.wait(timeout=10)


def run(env, simulator, sim_port, knobs):
    sim = f"http://127.0.0.1:{sim_port}"
    oauth2 = f"""tokenEndpoint: {sim}/oauth/token
      clientId: parley-confidential
      clientSecret: s3cret
      clientAuthentication: client_secret_basic
      scopes: [read]"""
    m = knobs["OPS_CC_TOKENS"]
    destinations = f"""destinations:
  - name: pw
    url: {sim}
    oauth2:
      grant: password
      {oauth2}
  - name: reg
    url: {sim}
    basic: {{}}
  - name: form
    url: {sim}
    basic: {{form: true}}
""" + "".join(f"""  - name: cc-{i}
    url: {sim}
    oauth2:
      grant: client_credentials
      {oauth2}
""" for i in range(m))
    # Every limit off, the pages' and flows' too; only calls refresh (no refresh ahead of need).
    for limit in ("PROXY", "REGISTRATIONS", "TOKEN_CALLS", "FAILED_LOGINS", "WEB", "FLOWS", "PAGES",
                  "FAILED_CLIENT_TOKENS"):
        os.environ[f"PARLEY_RATE_LIMIT_{limit}"] = "off"
    os.environ["PARLEY_REFRESH_AHEAD_SECONDS"] = "0"
    started = time.monotonic()
    (instance,) = start_instances(env, ["ops"], destinations, os.path.join(env.tmp, "broker-ops"))
    say(f"broker operations: one Parley instance ({m + 3} destinations) ready in {time.monotonic() - started:.1f} s; "
        f"its CPU only is counted (/proc/{instance.process.pid}/stat, {CLK_TCK} ticks/s); simulator and PostgreSQL beside it")

    postmaster = postmaster_pid(env)

    def meter():
        return Meter(postmaster, instance.process.pid, simulator.pid)

    refreshes(env, instance, sim_port, knobs, meter)
    client_credentials(env, instance, sim_port, knobs, meter)
    registrations(instance, knobs, meter)
    sign_ins(instance, knobs, meter)
    if not instance.alive():
        die(f"Parley exited with {instance.process.returncode}: {_tail(instance.log)}")


def expire_tokens(env, where, count):
    """Sets the expiry of the tokens `where` says in the past (the rows stay sealed) and tells every
    instance to drop its cached tokens; checks that `count` tokens are now expired."""
    # One transaction that takes the table first: Parley's own writes to tokens (the batched
    # last-sent times) wait for it instead of deadlocking with it row by row.
    env.sql("LOCK TABLE tokens IN SHARE ROW EXCLUSIVE MODE; "
            f"UPDATE tokens SET expires_at = now() - interval '1 minute' WHERE {where}")
    expired = int(env.sql(f"SELECT count(*) FROM tokens WHERE {where} AND expires_at < now()"))
    if expired != count:
        die(f"{expired} tokens expired where {count} were expected ({where})")
    env.sql("SELECT pg_notify('parley_cache', 't:*')")


def probe(port, token, sim_port, grant, base, limit_s=10.0):
    """Calls with `token` until the simulator counts one `grant` more than `base`: the notification
    has then reached Parley, and this call was the first of the phase's operations. Returns how
    many calls it took."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    deadline = time.monotonic() + limit_s
    calls = 0
    try:
        while True:
            status, body = exchange(conn, "GET", OAUTH_PATH, token)
            calls += 1
            if status != 200:
                die(f"the probe call answered {status}: {body[:300]!r}")
            done = grants(sim_port, grant) - base
            if done == 1:
                return calls
            if done > 1:
                die(f"the probe call caused {done} {grant} grants")
            if time.monotonic() > deadline:
                die(f"no {grant} grant within {limit_s:.0f} s of the cache notification ({calls} calls)")
    finally:
        conn.close()


def call_all(port, tokens, workers):
    """One proxied GET per token, `workers` at a time; dies unless every one answers 200."""
    async def one(client, token):
        return expect(await client.call("GET", OAUTH_PATH, token=token), 200, f"GET {OAUTH_PATH}").status
    return asyncio.run(each(port, tokens, workers, one))


def refreshes(env, instance, sim_port, knobs, meter):
    n, workers = knobs["OPS_REFRESHES"], knobs["OPS_CONCURRENCY"]

    async def seed(client, _):
        return await register_and_call(client, "pw", [OAUTH_PATH], credentials=USER)

    started = time.monotonic()
    before = grants(sim_port, "password")
    tokens = asyncio.run(each(instance.port, range(n), workers, seed))
    obtained = grants(sim_port, "password") - before
    if obtained != n:
        die(f"seeding {n} password-grant registrations made {obtained} password grants")
    seeding = time.monotonic() - started
    expire_tokens(env, "destination = 'pw'", n)

    base, base_password = grants(sim_port, "refresh_token"), grants(sim_port, "password")
    with meter() as m:
        probe_calls = probe(instance.port, tokens[0], sim_port, "refresh_token", base)
        call_all(instance.port, tokens[1:], workers)
    refreshed = grants(sim_port, "refresh_token") - base
    password = grants(sim_port, "password") - base_password
    if refreshed != n or password != 0:
        die(f"{n} calls on expired tokens made {refreshed} refresh_token grants (expected {n}) and {password} password grants (expected 0)")
    say(f"token refreshes: {n} registrations of 'pw' (password grant, scope read) seeded in {seeding:.1f} s, one token each; "
        f"every token expired in the database and the caches told; then one proxied call each ({workers} at a time; "
        f"the first repeated until refreshed: {probe_calls} call(s)), all 200, {refreshed} refresh_token grants; {m.beside()}")
    result("token refreshes", n, m, 500, KEYCLOAK["refresh"], "refresh-token requests")


def client_credentials(env, instance, sim_port, knobs, meter):
    m_count, workers = knobs["OPS_CC_TOKENS"], knobs["OPS_CONCURRENCY"]

    async def seed(client, i):
        return await register_and_call(client, f"cc-{i}", [OAUTH_PATH])

    started = time.monotonic()
    before = grants(sim_port, "client_credentials")
    tokens = asyncio.run(each(instance.port, range(m_count), workers, seed))
    obtained = grants(sim_port, "client_credentials") - before
    if obtained != m_count:
        die(f"seeding {m_count} client-credentials destinations made {obtained} client_credentials grants")
    seeding = time.monotonic() - started
    expire_tokens(env, "destination LIKE 'cc-%'", m_count)

    base = grants(sim_port, "client_credentials")
    with meter() as m:
        probe_calls = probe(instance.port, tokens[0], sim_port, "client_credentials", base)
        call_all(instance.port, tokens[1:], workers)
    got = grants(sim_port, "client_credentials") - base
    if got != m_count:
        die(f"{m_count} calls on expired shared tokens made {got} client_credentials grants (expected {m_count})")
    say(f"client-credentials tokens: {m_count} destinations cc-* (client credentials, a token shared per destination), "
        f"one registration and one call each seeded in {seeding:.1f} s; every token expired and the caches told; then one "
        f"proxied call per destination ({workers} at a time; the first repeated until it obtained: {probe_calls} call(s)), "
        f"all 200, {got} client_credentials grants; {m.beside()}")
    result("client-credentials tokens obtained", m_count, m, 500, KEYCLOAK["client_credentials"], "client-credentials grants")


def registrations(instance, knobs, meter):
    n, workers = knobs["OPS_REGISTRATIONS"], knobs["OPS_CONCURRENCY"]
    payload = {"destination": "reg", "credentials": USER, "deviceType": "bench", "userHint": "alice"}

    async def one(client, _):
        expect(await client.call("POST", "/v1/registrations", body=payload), 201, "POST /v1/registrations (reg)")

    with meter() as m:
        asyncio.run(each(instance.port, range(n), workers, one))
    say(f"registrations: {n} POST /v1/registrations for 'reg' (basic, with credentials, sealed), {workers} keep-alive "
        f"clients, all 201; {m.beside()}")
    result("registrations created", n, m, 500)


FIELD = re.compile(r'name="(k|token)" value="([^"]*)"')
ACTION = re.compile(r'<form method="post" action="([^"]*)"')


def fields(page):
    return {name: html.unescape(value) for name, value in FIELD.findall(page)}


def sign_ins(instance, knobs, meter):
    k, workers = knobs["OPS_SIGNINS"], knobs["OPS_SIGNIN_CONCURRENCY"]

    async def setup(client, _):
        r = expect(await client.call("POST", "/v1/registrations", body={"destination": "form", "deviceType": "bench"}),
                   201, "POST /v1/registrations (form)")
        token = r.json()["clientToken"]
        r = expect(await client.call("GET", BASIC_PATH, token=token), 401, "the first call (form)")
        problem = r.json()
        flow = problem.get("flow") or {}
        if problem.get("code") != "interaction_required" or flow.get("kind") != "basic" or not flow.get("url"):
            die(f"the first call (form) answered 401 without a basic flow: {r.body[:300]!r}")
        return token, flow["id"], local_target(flow["url"])

    started = time.monotonic()
    pending = asyncio.run(each(instance.port, range(k), workers, setup))
    setup_s = time.monotonic() - started

    async def sign_in(client, item):
        _, flow_id, target = item
        page = expect(await client.call("GET", target), 200, "the flow URL")
        form = fields(page.text)
        cookie = next((c.split(";", 1)[0] for c in page.all("set-cookie") if c.startswith("parley_confirm=")), None)
        if "data-parley-confirm" not in page.text or "k" not in form or "token" not in form or not cookie:
            die(f"the flow URL did not answer with a confirmation page: {page.body[:300]!r}")
        confirm = target.split("?", 1)[0] + "/confirm"
        page = expect(await client.call("POST", confirm, form={"k": form["k"], "token": form["token"]},
                                        headers=[("Cookie", cookie)]), 200, f"POST {confirm}")
        action = ACTION.search(page.text)
        form = fields(page.text)
        if not action or 'name="password"' not in page.text or "k" not in form:
            die(f"the confirmation did not lead to the credentials form: {page.body[:300]!r}")
        posted = expect(await client.call("POST", html.unescape(action.group(1)),
                                          form={"k": form["k"], **USER}), 303, "POST …/credentials")
        done = local_target(posted.header("location") or "")
        if done != f"/flows/{flow_id}/done":
            die(f"the credentials post sent the browser to {done!r}, not the done page")
        page = expect(await client.call("GET", done), 200, "the done page")
        if 'data-parley-flow-status="completed"' not in page.text:
            die(f"the done page does not say completed: {page.body[:300]!r}")

    with meter() as m:
        asyncio.run(each(instance.port, pending, workers, sign_in))

    async def check(client, item):
        token, flow_id, _ = item
        r = expect(await client.call("GET", f"/v1/flows/{flow_id}", token=token), 200, "GET /v1/flows/{id}")
        if r.json().get("status") != "completed":
            die(f"flow {flow_id} is {r.json().get('status')!r} after its sign-in")
        expect(await client.call("GET", BASIC_PATH, token=token), 200, "the call after the sign-in")

    asyncio.run(each(instance.port, pending, knobs["OPS_CONCURRENCY"], check))
    say(f"Basic-form sign-ins: {k} registrations of 'form' (basic form, no credentials), each with a 401 "
        f"interaction_required flow, set up in {setup_s:.1f} s; then {workers} browsers at a time: flow URL "
        f"(confirmation page), confirm (credentials form), credentials (checked upstream, sealed; 303), done page "
        f"(completed); after: every flow completed and a proxied call answers 200; {m.beside()}")
    result("Basic-form sign-ins completed", k, m, 100, KEYCLOAK["password_login"], "password logins")


if __name__ == "__main__":
    run_main(main)
