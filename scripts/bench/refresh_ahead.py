#!/usr/bin/env python3
"""Refresh ahead of need: 10,000 registrations whose tokens expire within the same minute are
refreshed in the background, at the configured rate, one token-endpoint call each, and no call
waits for a refresh; the proxied p99 while that happens is compared with a quiet stretch before.

A simulator of its own and one Parley instance with destination `ahead` (OAuth2 password grant
against that simulator, whose tokens carry a refresh token), PARLEY_REFRESH_AHEAD_SECONDS=120
and a look every second that starts at most AHEAD_PER_LOOK (default 400) refreshes. Then:
1. seeding: AHEAD_REGISTRATIONS (10,000) registrations, each with one proxied call that obtains
   its token (password grant);
2. the tokens' expiry (a plain column; the tokens stay sealed) is set to 150-210 s from now, so
   all of them expire within the same minute, and every instance is told to drop its cached copy:
   they become due for a background refresh 30-90 s from now;
3. a probe sends AHEAD_PROBE_RPS (100) proxied GETs a second, each for a random registration,
   from then until every token has been refreshed; its latencies are split into the quiet
   stretch (before the first background refresh) and the refresh stretch;
3. counted at the end: refresh_token grants at the simulator (target: one per registration),
   Parley's `parley_token_refreshes_total{when="ahead"}` and `{when="request"}` (target 0: no
   call waited for a refresh), the refresh rate achieved against the configured one.

Environment: BIN DATABASE_URL PSQL SIM_PORT KEYS TMP (see common.sh); knobs AHEAD_REGISTRATIONS,
AHEAD_PER_LOOK, AHEAD_PROBE_RPS, AHEAD_TOKEN_DELAY_MS (0: the token endpoint's answers from step 2
on wait this long, a slow authorization server). Exits 0 when it ran, whatever the verdict;
1 when something could not run.
"""

import asyncio
import json
import os
import random
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (USER, Client, Env, die, each, password_destination, percentile, register_and_call,  # noqa: E402
                      request, run_main, say, start_instances, start_simulator, verdict)

PATH = "/v1/proxy/oauth-api/data"


async def seed(port, count, workers=32):
    """Registers `count` registrations, each with one proxied call; their client tokens."""
    async def one(client, _):
        return await register_and_call(client, "ahead", [PATH], credentials=USER)

    return await each(port, range(count), workers, one)


async def probe(port, tokens, rps, stop):
    """Proxied GETs at `rps` for random registrations until `stop()`; [(start time, seconds, status)]."""
    results = []
    clients = [Client(port) for _ in range(16)]
    free = asyncio.Queue()
    for client in clients:
        free.put_nowait(client)

    async def one():
        client = await free.get()
        started = time.monotonic()
        try:
            status = (await client.call("GET", PATH, token=random.choice(tokens))).status
        except (OSError, asyncio.IncompleteReadError, ValueError):
            client.close()
            status = None
        results.append((started, time.monotonic() - started, status))
        free.put_nowait(client)

    pending = set()
    interval = 1.0 / rps
    next_at = time.monotonic()
    while not stop():
        pending.add(asyncio.ensure_future(one()))
        pending = {t for t in pending if not t.done()}
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    await asyncio.gather(*pending)
    return results


def refresh_grants(port):
    status, body = request(port, "GET", "/sim/stats")
    if status != 200:
        die(f"GET /sim/stats answered {status}")
    return json.loads(body)["oauth"]["tokenCallsByGrant"].get("refresh_token", 0)


def parley_refreshes(port):
    """parley_token_refreshes_total by `when` (ok outcomes and others together)."""
    _, body = request(port, "GET", "/metrics")
    counts = {"ahead": 0, "request": 0}
    for line in body.decode().splitlines():
        if line.startswith("parley_token_refreshes_total{"):
            when = re.search(r'when="(\w+)"', line)
            if when:
                counts[when.group(1)] = counts.get(when.group(1), 0) + int(float(line.rsplit(" ", 1)[1]))
    return counts


def main():
    env = Env()
    n = int(os.environ.get("AHEAD_REGISTRATIONS", "10000"))
    per_look = int(os.environ.get("AHEAD_PER_LOOK", "400"))
    rps = int(os.environ.get("AHEAD_PROBE_RPS", "100"))
    token_delay_ms = int(os.environ.get("AHEAD_TOKEN_DELAY_MS", "0"))
    lead = 120
    # A simulator of its own, so that its counters are this run's.
    simulator, sim_port = start_simulator(env, "refresh-ahead")
    try:
        run(env, sim_port, n, lead, per_look, rps, token_delay_ms)
    finally:
        simulator.terminate()
        simulator.wait(timeout=10)


def run(env, sim_port, n, lead, per_look, rps, token_delay_ms):
    destinations = "destinations:\n" + password_destination("ahead", sim_port)
    os.environ.update({
        "PARLEY_REFRESH_AHEAD_SECONDS": str(lead), "PARLEY_REFRESH_AHEAD_INTERVAL_SECONDS": "1",
        "PARLEY_REFRESH_AHEAD_PER_DESTINATION": str(per_look), "PARLEY_REFRESH_AHEAD_PER_SERVER": str(per_look),
    })
    (instance,) = start_instances(env, ["ahead"], destinations, os.path.join(env.tmp, "refresh-ahead"))
    started = time.monotonic()
    tokens = asyncio.run(seed(instance.port, n))
    seeding = time.monotonic() - started
    # Every token expires within the same minute, 150-210 s from now; past half its life, it is due
    # once it expires within the lead (120 s): 30-90 s from now.
    # One transaction that takes the table first: Parley's own writes to tokens (the batched
    # last-sent times) wait for it instead of deadlocking with it row by row.
    env.sql("LOCK TABLE tokens IN SHARE ROW EXCLUSIVE MODE; "
            "UPDATE tokens SET updated_at = now() - interval '1000 seconds', "
            "expires_at = now() + interval '150 seconds' + random() * interval '60 seconds' WHERE destination = 'ahead'")
    env.sql("SELECT pg_notify('parley_cache', 't:*')")
    if token_delay_ms:
        # A slow authorization server: each token-endpoint answer from now on waits this long.
        status, _ = request(sim_port, "POST", f"/sim/oauth/token-delay?ms={token_delay_ms}")
        if status != 204:
            die(f"POST /sim/oauth/token-delay answered {status}")
    seeded = time.monotonic()
    due_after = 90
    say(f"refresh ahead: {n} registrations of destination 'ahead' (password grant) seeded in {seeding:.1f} s; "
        f"then every token set to expire 150-210 s later (one minute); refresh ahead: lead {lead} s, "
        f"a look every 1 s (+ up to 0.2 s) starting at most {per_look}, paced (8 at once at first)")
    base = refresh_grants(sim_port)
    before = parley_refreshes(instance.port)
    marks = {}

    def stop():
        now = time.monotonic()
        done = refresh_grants(sim_port) - base if now - marks.get("polled", 0) > 0.5 else marks.get("done", 0)
        if now - marks.get("polled", 0) > 0.5:
            marks["polled"] = now
            marks["done"] = done
            if done > 0 and "first" not in marks:
                marks["first"] = now
            if done >= n and "last" not in marks:
                marks["last"] = now
        return "last" in marks or now - seeded > due_after + 240

    results = asyncio.run(probe(instance.port, tokens, rps, stop))
    calls = refresh_grants(sim_port) - base
    # The simulator counts a grant when it answers; Parley when it has stored the result: wait
    # (10 s at most) for the refreshes still being stored.
    settle = time.monotonic() + 10
    after = parley_refreshes(instance.port)
    while sum(after[w] - before[w] for w in ("ahead", "request")) < calls and time.monotonic() < settle:
        time.sleep(0.1)
        after = parley_refreshes(instance.port)
    ahead = after["ahead"] - before["ahead"]
    waited = after["request"] - before["request"]
    first, last = marks.get("first"), marks.get("last")
    if first is None:
        die(f"no background refresh within {due_after + 240:.0f} s of seeding")
    quiet = sorted(d * 1000 for t, d, s in results if t < first - 1 and s == 200)
    during = sorted(d * 1000 for t, d, s in results if first <= t <= (last or time.monotonic()) and s == 200)
    failed = sum(1 for _, _, s in results if s != 200)
    if len(quiet) < 100 or len(during) < 100:
        die(f"too few probe answers to compare (quiet {len(quiet)}, during {len(during)})")
    span = (last or time.monotonic()) - first
    rate = calls / span if span > 0 else float("nan")
    q99, d99 = percentile(quiet, 0.99), percentile(during, 0.99)
    q50, d50 = percentile(quiet, 0.5), percentile(during, 0.5)
    say(f"  background refreshes: {calls} refresh_token grants at the token endpoint over {span:.1f} s "
        f"({rate:.0f}/s; configured: up to {per_look} per look every 1-1.2 s); Parley counted {ahead} ahead, "
        f"{waited} a call waited for")
    say(f"  probe ({rps} proxied GETs/s, random registrations): quiet {len(quiet)} answers p50 {q50:.2f} ms p99 {q99:.2f} ms; "
        f"while refreshing {len(during)} answers p50 {d50:.2f} ms p99 {d99:.2f} ms; not 200: {failed}")
    ok_calls = calls == n
    ok_waited = waited == 0 and failed == 0
    say(f"RESULT refresh ahead: {n} registrations expiring within one minute, token endpoint calls = {calls} "
        f"(target {n}, one each: {verdict(ok_calls)}) at {rate:.0f}/s; proxied p99 while refreshing {d99:.2f} ms vs quiet "
        f"{q99:.2f} ms (ratio {d99 / q99:.2f}); calls that waited for a refresh = {waited}, failed = {failed} "
        f"(target 0: {verdict(ok_waited)})")


if __name__ == "__main__":
    run_main(main)
