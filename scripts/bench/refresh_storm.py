#!/usr/bin/env python3
"""Refresh storm: 1,000 concurrent requests on one expired token, spread over 3 Parley
instances, must cause exactly 1 token-endpoint call; reports the time until all are answered.

Three instances on one database, destination `storm` (OAuth2 client credentials against the
simulator's authorization server; the token belongs to the destination, so every
registration shares it) whose API is the simulator's `/oauth-api/…` (Bearer, `401` without a
valid token). 8 registrations (Parley admits at most 256 proxied requests in flight per
registration and instance). Every registration makes one call on every instance, so a token
is stored and each instance has its client-token and token caches warm. Then the access
token is expired at the authorization server (`POST /sim/oauth/expire-access-tokens`): the
upstream answers `401` to it and Parley has to obtain a new one. The token endpoint is made
slow (`/sim/oauth/token-delay`, STORM_TOKEN_DELAY_MS, default 500) so that all the requests
pile up behind the one call. 1,000 connections are opened first (round-robin over the
instances, each request with the next registration), then all requests are written at once
(`Connection: close`); the token-endpoint calls are read from `/sim/stats` before and after.

Environment: BIN DATABASE_URL PSQL SIM_PORT KEYS TMP (see common.sh); knobs STORM_REQUESTS
(1000), STORM_INSTANCES (3), STORM_REGISTRATIONS (8), STORM_TOKEN_DELAY_MS (500).
Exits 0 when it ran, whatever the verdict; 1 when something could not run.
"""

import asyncio
import collections
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (Env, die, percentile, register, request, run_main, say, sim_post, sim_stats,  # noqa: E402
                      start_instances, verdict)

PATH = "/v1/proxy/oauth-api/data"


def token_calls(stats):
    return sum(stats["oauth"]["tokenCallsByGrant"].values())


def rejections(stats):
    return stats["oauth"]["resourceRejections"].get("oauth-api", 0)


async def storm(targets, timeout):
    """targets: [(port, token)]. Opens every connection, then writes every request.
    Returns (results, first_write, last_write): results[i] = (status, problem code or
    error, seconds from its write to the end of its answer, end time)."""
    conns = [None] * len(targets)

    async def connect(i, port):
        conns[i] = await asyncio.open_connection("127.0.0.1", port)

    batch = 100  # stays under the listen backlog
    for start in range(0, len(targets), batch):
        await asyncio.gather(*(connect(i, targets[i][0]) for i in range(start, min(start + batch, len(targets)))))

    payloads = [
        (f"GET {PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
         f"Connection: close\r\n\r\n").encode()
        for port, token in targets
    ]
    sent = [0.0] * len(targets)

    async def answer(i):
        reader, writer = conns[i]
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = None
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            body = await (reader.readexactly(length) if length is not None else reader.read())
            end = time.perf_counter()
            code = None
            if status != 200:
                try:
                    code = json.loads(body).get("code")
                except ValueError:
                    code = body[:60].decode(errors="replace")
            return status, code, end - sent[i], end
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, IndexError) as e:
            return None, type(e).__name__, time.perf_counter() - sent[i], time.perf_counter()
        finally:
            writer.close()

    first = time.perf_counter()
    for i, (_, writer) in enumerate(conns):
        sent[i] = time.perf_counter()
        writer.write(payloads[i])
    last = time.perf_counter()
    tasks = [asyncio.ensure_future(answer(i)) for i in range(len(targets))]
    done, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    results = [t.result() if t in done else (None, "no answer within %d s" % timeout, float(timeout), first + timeout)
               for t in tasks]
    return results, first, last


def main():
    env = Env()
    n = int(os.environ.get("STORM_REQUESTS", "1000"))
    n_instances = int(os.environ.get("STORM_INSTANCES", "3"))
    n_registrations = int(os.environ.get("STORM_REGISTRATIONS", "8"))
    delay_ms = int(os.environ.get("STORM_TOKEN_DELAY_MS", "500"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 1024), hard))

    sim = f"http://127.0.0.1:{env.sim_port}"
    destinations = f"""destinations:
  - name: storm
    url: {sim}
    oauth2:
      grant: client_credentials
      tokenEndpoint: {sim}/oauth/token
      clientId: parley-confidential
      clientSecret: s3cret
      clientAuthentication: client_secret_basic
      scopes: [read]
"""
    names = [chr(ord("a") + i) for i in range(n_instances)]
    instances = start_instances(env, names, destinations, os.path.join(env.tmp, "refresh-storm"))
    tokens = [register(instances[0].port, "storm") for _ in range(n_registrations)]

    before_warm = token_calls(sim_stats(env))
    for instance in instances:
        for token in tokens:
            status, body = request(instance.port, "GET", PATH, token=token)
            if status != 200:
                die(f"warm call on instance {instance.name} answered {status}: {body[:300]!r}")
    warm_calls = token_calls(sim_stats(env)) - before_warm
    say(f"refresh storm: {n_instances} instances, {n_registrations} registrations of destination 'storm' "
        f"(client credentials); warm-up: {n_registrations * n_instances} calls, {warm_calls} token endpoint call(s)")

    try:
        sim_post(env, "/sim/oauth/expire-access-tokens")
        sim_post(env, f"/sim/oauth/token-delay?ms={delay_ms}")
        before = sim_stats(env)
        targets = [(instances[i % n_instances].port, tokens[i % n_registrations]) for i in range(n)]
        results, first, last = asyncio.run(storm(targets, timeout=60))
        after = sim_stats(env)
    finally:
        sim_post(env, "/sim/oauth/token-delay?ms=0")

    calls = token_calls(after) - token_calls(before)
    upstream_401 = rejections(after) - rejections(before)
    statuses = collections.Counter(r[0] for r in results)
    problems = collections.Counter(f"{r[0]} {r[1]}" for r in results if r[0] != 200)
    ok = statuses.get(200, 0)
    latencies = sorted(r[2] * 1000 for r in results)
    all_ms = (max(r[3] for r in results) - first) * 1000
    p50, top = percentile(latencies, 0.5), latencies[-1]
    dead = [i.name for i in instances if not i.alive()]

    say(f"refresh storm: access token expired at the authorization server, token endpoint delayed {delay_ms} ms;")
    say(f"  {n} connections opened first ({n // n_instances}+ per instance), then all requests written "
        f"within {(last - first) * 1000:.1f} ms")
    say(f"  answers: {dict(sorted((str(k), v) for k, v in statuses.items()))}"
        + (f"; not 200: {dict(problems)}" if problems else ""))
    say(f"  token endpoint calls during the storm: {calls} (by grant: "
        f"{ {k: v - before['oauth']['tokenCallsByGrant'].get(k, 0) for k, v in after['oauth']['tokenCallsByGrant'].items()} })")
    say(f"  requests the upstream refused with 401 (sent with the expired token): {upstream_401}")
    say(f"  time from the first write until every answer was read: {all_ms:.0f} ms "
        f"(includes the {delay_ms} ms token delay); per request p50 {p50:.0f} ms, max {top:.0f} ms")
    if dead:
        say(f"  instances no longer running: {', '.join(dead)}")
    answered = (f"all {n} answered 200" if ok == n else f"only {ok} of {n} answered 200") + \
        f" in {all_ms:.0f} ms (p50 {p50:.0f} ms, max {top:.0f} ms; token endpoint delayed {delay_ms} ms)"
    say(f"RESULT refresh storm: token endpoint calls = {calls} (target 1: {verdict(calls == 1)}), {answered}")


if __name__ == "__main__":
    run_main(main)
