#!/usr/bin/env python3
"""What a registration costs once it exists: the first call of a cold one, the database work of a
warm call, and the memory of an active one.

One Parley instance with destination `costs` (OAuth2 password grant against a simulator of this
script's own; its tokens carry a refresh token), PARLEY_MANAGER_IDLE_SECONDS=3600 so that nothing
goes idle during the run:
1. seeding (not measured): COSTS_REGISTRATIONS (100,000) registrations with the user's credentials,
   COSTS_CONCURRENCY (64) at a time, each with two proxied calls: `/cookies/set?n=1` (one cookie
   in its jar, stored in PostgreSQL) and `/oauth-api/data` (its token, obtained with the password
   and stored in PostgreSQL);
2. Parley is restarted, so that nothing of any registration is cached (its conversation manager,
   client token, OAuth2 token, cookie jar), and the statement counters are reset
   (pg_stat_statements, loaded by the bench's PostgreSQL);
3. cold and warm: COSTS_SAMPLE (2,000) registrations, one connection, one request at a time: the
   first call of each (cold: the manager is built and the token and cookies come from PostgreSQL),
   then, for the same registrations, a second call each (warm). Latencies (p50, p99) of both, the
   cold p50 over the warm p50 (target: at most 1 ms more), and the statements PostgreSQL ran in
   each phase (pg_stat_statements: calls of every statement but this script's own), per call
   (target for a warm call: 0; a statement that runs fewer than once per hundred calls is the
   instance's periodic work, listed, not a cost of the calls);
4. memory: Parley's resident memory (VmRSS), then one proxied call for every other registration
   (COSTS_CONCURRENCY at a time) so that all of them are active, and its resident memory again:
   the growth over the registrations activated is the memory of an active registration (target:
   at most 1 KiB). Keycloak's sizing guide gives about 5 KB per active session.

Environment: BIN DATABASE_URL PSQL SIM_PORT KEYS TMP (see common.sh; SIM_PORT is not used);
knobs COSTS_REGISTRATIONS, COSTS_SAMPLE, COSTS_CONCURRENCY. Exits 0 when it ran, whatever the
verdicts; 1 when something could not run (pg_stat_statements missing included).
"""

import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (USER, Client, Env, die, each, expect, password_destination, percentile,  # noqa: E402
                      register_and_call, run_main, say, start_instances, start_simulator, stop_instances, verdict)

API = "/v1/proxy/oauth-api/data"
COOKIE = "/v1/proxy/cookies/set?n=1"


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    die(f"no VmRSS for pid {pid}")


def statements(env):
    """{query: calls} of every statement PostgreSQL has counted, this script's own left out."""
    out = env.sql("SELECT calls, regexp_replace(query, '\\s+', ' ', 'g') FROM pg_stat_statements "
                  "WHERE query NOT ILIKE '%pg_stat_statements%' AND query NOT ILIKE '%pg_notify%'")
    counted = {}
    for line in out.splitlines():
        calls, _, query = line.partition("|")
        if calls.strip().isdigit():
            counted[query.strip()] = counted.get(query.strip(), 0) + int(calls)
    return counted


def delta(after, before):
    return {q: n - before.get(q, 0) for q, n in after.items() if n - before.get(q, 0) > 0}


def per_call(counted, calls):
    """(statements per call that scale with the calls, periodic statements listed)."""
    scaling = sum(n for n in counted.values() if n * 100 >= calls)
    periodic = {q: n for q, n in counted.items() if n * 100 < calls}
    return scaling / calls, periodic


def short(query, width=90):
    return query if len(query) <= width else query[: width - 1] + "…"


async def seed(port, count, concurrency):
    async def one(client, _):
        # One cookie in its jar, then its token: both stored in PostgreSQL.
        return await register_and_call(client, "costs", [COOKIE, API], credentials=USER)
    return await each(port, range(count), concurrency, one)


async def timed_calls(port, tokens):
    """One call per token, one at a time on one connection: the latencies in ms."""
    client = Client(port)
    latencies = []
    try:
        for token in tokens:
            started = time.perf_counter()
            expect(await client.call("GET", API, token=token), 200, "a proxied call")
            latencies.append((time.perf_counter() - started) * 1000)
    finally:
        client.close()
    return sorted(latencies)


async def activate(port, tokens, concurrency):
    async def one(client, token):
        expect(await client.call("GET", API, token=token), 200, "a proxied call")
    await each(port, tokens, concurrency, one)


def main():
    env = Env()
    n = int(os.environ.get("COSTS_REGISTRATIONS", "100000"))
    sample = min(n, int(os.environ.get("COSTS_SAMPLE", "2000")))
    concurrency = int(os.environ.get("COSTS_CONCURRENCY", "64"))
    try:
        env.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        env.sql("SELECT pg_stat_statements_reset()")
    except Exception as error:  # noqa: BLE001 - said as it is
        die(f"pg_stat_statements is not available (the bench's PostgreSQL preloads it): {error}")
    simulator, sim_port = start_simulator(env, "registration-costs")
    try:
        run(env, sim_port, n, sample, concurrency)
    finally:
        simulator.terminate()
        simulator.wait(timeout=10)


def run(env, sim_port, n, sample, concurrency):
    destinations = "destinations:\n" + password_destination("costs", sim_port)
    os.environ.update({"PARLEY_MANAGER_IDLE_SECONDS": "3600", "PARLEY_REFRESH_AHEAD_SECONDS": "0"})
    workdir = os.path.join(env.tmp, "registration-costs")
    (instance,) = start_instances(env, ["costs"], destinations, workdir)
    started = time.monotonic()
    tokens = asyncio.run(seed(instance.port, n, concurrency))
    say(f"registration costs: {n} registrations of 'costs' (password grant, one cookie each) seeded in "
        f"{time.monotonic() - started:.1f} s, each with its token and cookie stored")

    # 2. Nothing cached: a new process.
    stop_instances()
    (instance,) = start_instances(env, ["costs-restarted"], destinations, workdir)
    pid = instance.process.pid
    env.sql("SELECT pg_stat_statements_reset()")
    base = statements(env)

    # 3. Cold, then warm, for the same registrations.
    cold = asyncio.run(timed_calls(instance.port, tokens[:sample]))
    after_cold = statements(env)
    warm = asyncio.run(timed_calls(instance.port, tokens[:sample]))
    after_warm = statements(env)
    cold_per_call, cold_periodic = per_call(delta(after_cold, base), sample)
    warm_per_call, warm_periodic = per_call(delta(after_warm, after_cold), sample)
    cold_statements = sorted(delta(after_cold, base).items(), key=lambda qn: -qn[1])
    c50, c99, w50, w99 = percentile(cold, 0.5), percentile(cold, 0.99), percentile(warm, 0.5), percentile(warm, 0.99)
    say(f"  cold: {sample} first calls after a restart, one at a time: p50 {c50:.2f} ms, p99 {c99:.2f} ms; "
        f"{cold_per_call:.2f} statements per call:")
    for query, calls in cold_statements:
        say(f"    {calls / sample:5.2f} × {short(query)}")
    say(f"  warm: the same {sample} registrations again: p50 {w50:.2f} ms, p99 {w99:.2f} ms; "
        f"{warm_per_call:.4f} statements per call; periodic (fewer than one per hundred calls): "
        + (", ".join(f"{calls} × {short(q, 60)}" for q, calls in warm_periodic.items()) or "none"))

    # 4. Every registration active.
    rss_before = rss_kib(pid)
    started = time.monotonic()
    asyncio.run(activate(instance.port, tokens[sample:], concurrency))
    rss_after = rss_kib(pid)
    activated = n - sample
    per_registration = (rss_after - rss_before) * 1024 / activated if activated else float("nan")
    say(f"  memory: {activated} more registrations made active in {time.monotonic() - started:.1f} s "
        f"(one call each, {concurrency} at a time): RSS {rss_before / 1024:.1f} MiB → {rss_after / 1024:.1f} MiB "
        f"with {n} active")

    added = c50 - w50
    say(f"RESULT cold registration: first call p50 {c50:.2f} ms vs warm {w50:.2f} ms, +{added:.2f} ms "
        f"(target <= 1 ms: {verdict(added <= 1)}); {cold_per_call:.2f} PostgreSQL statements per cold first call")
    say(f"RESULT warm proxied call: {warm_per_call:.4f} PostgreSQL statements per call over {sample} calls "
        f"(pg_stat_statements; target 0: {verdict(warm_per_call == 0)})")
    say(f"RESULT memory per active registration: {per_registration:.0f} bytes with {n} active "
        f"(target <= 1024: {verdict(per_registration <= 1024)}); RSS {rss_after / 1024:.1f} MiB; "
        f"Keycloak's sizing: about 5 KB per active session")


if __name__ == "__main__":
    run_main(main)
