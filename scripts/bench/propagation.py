#!/usr/bin/env python3
"""Revocation propagation across 2 instances: how long after a deregistration on instance A
instance B still accepts the client token (p50/p99/max over 100 rounds; target p99 < 100 ms).

The method of InvalidationLiveTests.aDeregistrationOnOneInstanceIsRefusedByTheOtherAtOnce
(docs/benchmarks-history.md, "Revocation propagation between instances"), with the release build:
two instances on one database, destination `sim` (Basic, the simulator's /api/data) and
registrations with the simulator's user. Each round: register on A; two proxied calls on
B (so B has the client token and the cookie jar in its caches); `DELETE
/v1/registrations/me` on A; from the moment A's 204 is read, B is asked again as fast as
possible (one request at a time on a kept-alive connection) until it first answers `401
invalid_client_token`, at most 5 s. The figure is the time until that 401 has been read.

Environment: BIN DATABASE_URL PSQL SIM_PORT KEYS TMP (see common.sh); knob
PROPAGATION_ROUNDS (100). Exits 0 when it ran, whatever the verdict; 1 when something could
not run (an answer other than the expected ones).
"""

import http.client
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Env, die, exchange, register, run_main, say, start_instances, verdict  # noqa: E402

PATH = "/v1/proxy/api/data"
LIMIT_S = 5.0


def main():
    env = Env()
    rounds = int(os.environ.get("PROPAGATION_ROUNDS", "100"))
    destinations = f"""destinations:
  - name: sim
    url: http://127.0.0.1:{env.sim_port}
    basic: {{}}
"""
    a, b = start_instances(env, ["a", "b"], destinations, os.path.join(env.tmp, "propagation"))
    to_a = http.client.HTTPConnection("127.0.0.1", a.port, timeout=10)
    to_b = http.client.HTTPConnection("127.0.0.1", b.port, timeout=10)
    credentials = {"credentials": {"username": "alice", "password": "wonderland"}}

    delays, polls, never = [], [], 0
    for r in range(rounds):
        token = register(a.port, "sim", credentials)
        for _ in range(2):
            status, body = exchange(to_b, "GET", PATH, token)
            if status != 200:
                die(f"round {r}: proxied call on B answered {status}: {body[:300]!r}")
        status, body = exchange(to_a, "DELETE", "/v1/registrations/me", token)
        if status != 204:
            die(f"round {r}: DELETE /v1/registrations/me on A answered {status}: {body[:300]!r}")
        started = time.perf_counter()
        tries = 0
        while True:
            status, body = exchange(to_b, "GET", PATH, token)
            tries += 1
            elapsed = time.perf_counter() - started
            if status == 401:
                code = json.loads(body).get("code") if body else None
                if code != "invalid_client_token":
                    die(f"round {r}: B answered 401 with code {code!r}, not invalid_client_token")
                break
            if status != 200:
                die(f"round {r}: B answered {status} while the token was still accepted: {body[:300]!r}")
            if elapsed >= LIMIT_S:
                never += 1
                break
        delays.append(elapsed * 1000)
        polls.append(tries)
    to_a.close()
    to_b.close()

    delays.sort()
    n = len(delays)
    # The same ranks as the live test: p50 = sorted[n/2], p99 = sorted[n·99/100 − 1].
    p50, p99, top = delays[n // 2], delays[max(n * 99 // 100 - 1, 0)], delays[-1]
    at_once = sum(1 for t in polls if t == 1)
    say(f"revocation propagation: {rounds} rounds of register on A, 2 proxied calls on B, DELETE on A, "
        f"poll B until 401 (at most {LIMIT_S:.0f} s); release build, keep-alive connections")
    say(f"  B refused the token on its first request after A's 204 in {at_once} of {rounds} rounds; "
        f"most requests B still accepted in one round: {max(polls) - 1}")
    say(f"  delay ms: min {delays[0]:.2f}, p50 {p50:.2f}, p90 {delays[max(n * 90 // 100 - 1, 0)]:.2f}, "
        f"p99 {p99:.2f}, max {top:.2f}")
    if never:
        say(f"  in {never} round(s) B still accepted the token after {LIMIT_S:.0f} s (counted as {LIMIT_S:.0f} s)")
    say(f"RESULT revocation propagation A→B p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {top:.1f} ms "
        f"over {rounds} deregistrations (target p99 < 100 ms: {verdict(p99 < 100 and not never)})")


if __name__ == "__main__":
    run_main(main)
