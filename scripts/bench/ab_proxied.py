#!/usr/bin/env python3
"""Interleaved A/B of the proxied small GET between Parley binaries: what one change does alone.

AB_BINS names folders that each hold a `parley` binary (and `upstream-simulator`); for each of
AB_ROUNDS rounds (3), each binary in turn gets one instance with two destinations against this
script's simulator: `plain` (no auth block) and `costs` (OAuth2 password grant), one registration
each (seeded once, shared by every instance through the database). On each, after a 2 s warm-up,
`wrk -t2 -c32 -d6s` with the registration's client token on `/v1/proxy/echo/bench` (plain) and
`/v1/proxy/oauth-api/data` (costs): requests per second and Parley's own CPU per request
(`/proc/<pid>/stat`). Printed per round and as means; a change is believed when it wins round
by round, not only on the mean (two cores shared with wrk, the simulator and PostgreSQL).
AB_PROFILE=1 also records `perf record -g` of the last instance of each path into
$TMP/perf-plain.data and $TMP/perf-costs.data.

The machine's speed drifts between runs of a few seconds by more than most changes weigh. With
AB_FLOOR=1 each round also measures the Hummingbird + `CurlTransport` floor (`server-floor
hummingbird`, from the first folder that has one, on the simulator's `/echo/bench`) before the
binaries and after them, and each binary's CPU per request is also given as a ratio to the mean
of the two: the drift within a round mostly cancels out. A change of the transport moves the
floor too: compare the floors' own figures then, not the ratios.

Run through standalone.sh (it starts PostgreSQL and sets the environment), e.g.
  AB_BINS="/tmp/before /tmp/after" BIN=/tmp/before scripts/bench/standalone.sh ab_proxied.py
Exits 0 when it ran.
"""

import asyncio
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (USER, Client, Env, cpu_seconds, die, free_ports, password_destination, register_and_call,  # noqa: E402
                      run_main, say, start_instances, start_simulator, stop_instances, wait_for_port)

PATHS = {"plain": "/v1/proxy/echo/bench", "costs": "/v1/proxy/oauth-api/data"}


def wrk(port, token, path, seconds):
    authorization = ["-H", f"Authorization: Bearer {token}"] if token else []
    out = subprocess.run(["wrk", "-t2", "-c32", f"-d{seconds}s"] + authorization + [f"http://127.0.0.1:{port}{path}"],
                         capture_output=True, text=True).stdout
    rate, count = re.search(r"Requests/sec:\s+([\d.]+)", out), re.search(r"(\d+) requests in", out)
    if not rate or not count:
        die(f"wrk gave no figures for {path}: {out[-300:]}")
    return float(rate.group(1)), int(count.group(1))


async def seed(port):
    client = Client(port)
    try:
        return {"plain": await register_and_call(client, "plain", [PATHS["plain"]]),
                "costs": await register_and_call(client, "costs", [PATHS["costs"]], credentials=USER)}
    finally:
        client.close()


def floor_cpu(binary, sim_port):
    """The floor's CPU per request (µs) under the same load as the binaries': (requests/s, µs)."""
    (port,) = free_ports(1)
    floor = subprocess.Popen([binary, "hummingbird", str(port), f"http://127.0.0.1:{sim_port}/echo/bench"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, 10)
        wrk(port, None, "/floor", 2)
        before = cpu_seconds(floor.pid)
        rate, count = wrk(port, None, "/floor", 6)
        return rate, (cpu_seconds(floor.pid) - before) / count * 1e6
    finally:
        floor.terminate()
        floor.wait(timeout=10)


def main():
    env = Env()
    bins = os.environ.get("AB_BINS", "").split()
    if not bins:
        die("AB_BINS names no binary folders")
    rounds = int(os.environ.get("AB_ROUNDS", "3"))
    simulator, sim_port = start_simulator(env, "ab")
    destinations = f"destinations:\n  - name: plain\n    url: http://127.0.0.1:{sim_port}\n" + password_destination("costs", sim_port)
    results = {b: {name: [] for name in PATHS} for b in bins}
    floors = []  # per round: the mean of the floor's µs before and after the binaries
    floor_binary = next((os.path.join(b, "server-floor") for b in bins if os.access(os.path.join(b, "server-floor"), os.X_OK)), None)
    if os.environ.get("AB_FLOOR") and not floor_binary:
        die("AB_FLOOR=1, but no folder of AB_BINS has a server-floor binary")
    tokens = None
    try:
        for r in range(rounds):
            first = floor_cpu(floor_binary, sim_port) if os.environ.get("AB_FLOOR") else None
            for b in bins:
                env.bin = b
                (instance,) = start_instances(env, [f"ab-{r + 1}-{bins.index(b) + 1}"], destinations, os.path.join(env.tmp, "ab"))
                tokens = tokens or asyncio.run(seed(instance.port))
                for name, path in PATHS.items():
                    wrk(instance.port, tokens[name], path, 2)
                    before = cpu_seconds(instance.process.pid)
                    profile = None
                    if os.environ.get("AB_PROFILE"):
                        profile = subprocess.Popen(["perf", "record", "-F", "2000", "-g", "-o", os.path.join(env.tmp, f"perf-{name}.data"),
                                                    "-p", str(instance.process.pid), "--", "sleep", "5"],
                                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    rate, count = wrk(instance.port, tokens[name], path, 6)
                    if profile:
                        profile.wait()
                    cpu = (cpu_seconds(instance.process.pid) - before) / count * 1e6
                    results[b][name].append((rate, cpu))
                    say(f"round {r + 1} {b} {name}: {rate:.0f} requests/s, {cpu:.1f} µs of Parley's CPU per request")
                stop_instances()
            if first:
                last = floor_cpu(floor_binary, sim_port)
                floors.append((first[1] + last[1]) / 2)
                say(f"round {r + 1} floor: {first[0]:.0f} requests/s, {first[1]:.1f} µs before; {last[0]:.0f}, {last[1]:.1f} µs after")
    finally:
        simulator.terminate()
        simulator.wait(timeout=10)
    for b in bins:
        for name in PATHS:
            runs = results[b][name]
            ratios = (" ÷ the floor: " + " ".join(f"{x[1] / f:.3f}" for x, f in zip(runs, floors))
                      + f", mean {sum(x[1] / f for x, f in zip(runs, floors)) / len(runs):.3f}") if floors else ""
            say(f"{b} {name}: mean {sum(x[0] for x in runs) / len(runs):.0f} requests/s, "
                f"{sum(x[1] for x in runs) / len(runs):.1f} µs per request; rounds "
                + " ".join(f"{x[0]:.0f}/{x[1]:.1f}" for x in runs) + ratios)


if __name__ == "__main__":
    run_main(main)
