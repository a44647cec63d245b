#!/usr/bin/env python3
"""The soak's driver (standard library only); scripts/soak.sh sets everything up and runs it.

It starts three Parley instances (behind the HAProxy that soak.sh already runs from
deploy/haproxy/parley.cfg), signs in, measures the maximum throughput with a short ramp of
closed-loop clients, and then paces a realistic mix at SOAK_LOAD_PERCENT (70) % of that maximum
for SOAK_SECONDS. Meanwhile it kills one instance with SIGKILL every SOAK_KILL_INTERVAL seconds
(round robin) and restarts it, and restarts PostgreSQL once in the middle (pg_ctl restart -m
fast). At the end it checks that no token was lost and prints the figures; exit 1 when a
criterion fails, 2 when something could not run.

Environment (all set by soak.sh): PARLEY_BIN, SOAK_DIR, SOAK_SECONDS, DATABASE_URL, KEYS,
ADMIN_TOKEN, SIM_PORT, HAPROXY_PORT, HAPROXY_SOCKET, HAPROXY_LOG, CA_FILE, INSTANCE_PORTS
(three, comma-separated), PG_CTL (a command line ending in -D <data dir>), PG_LOG.
Knobs: SOAK_LOAD_PERCENT (70), SOAK_KILL_INTERVAL (min(300, SOAK_SECONDS / 2.5)),
SOAK_RAMP_STEP_SECONDS (5), SOAK_PG_GRACE_SECONDS (10), SOAK_MAX_RSS_GROWTH_MIB (none);
SOAK_SABOTAGE=revoke-refresh-tokens checks the soak itself (every refresh token is revoked at the
PostgreSQL restart, so "no token lost" must fail).
"""

import asyncio
import collections
import json
import os
import random
import re
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from benchlib import percentile  # noqa: E402


class SoakError(Exception):
    """Something could not run (not a failed criterion): exit 2."""


def say(*parts):
    print(*parts, flush=True)


def env(name, default=None):
    value = os.environ.get(name, default)
    if value is None:
        raise SoakError(f"missing environment: {name} (scripts/soak.sh sets it)")
    return value


# ---------------------------------------------------------------- a small HTTP/1.1 client

class Answer:
    __slots__ = ("status", "headers", "body")

    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def header(self, name):
        for n, v in self.headers:
            if n == name.lower():
                return v
        return None

    def all(self, name):
        return [v for n, v in self.headers if n == name.lower()]

    def json(self):
        try:
            value = json.loads(self.body)
            return value if isinstance(value, dict) else {}
        except ValueError:
            return {}


class StaleConnection(Exception):
    """A kept-alive connection closed before any byte of the answer: the request may be resent."""


class Connection:
    """One keep-alive connection (TLS when `tls` is a context)."""

    def __init__(self, port, tls=None, host="127.0.0.1"):
        self.port, self.tls, self.host = port, tls, host
        self.reader = self.writer = None
        self.used = 0

    async def close(self):
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except (OSError, ssl.SSLError):
                pass
        self.reader = self.writer = None

    async def request(self, method, target, headers=(), body=b"", timeout=90.0):
        return await asyncio.wait_for(self._request(method, target, headers, body), timeout)

    async def _request(self, method, target, headers, body):
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(
                self.host, self.port, ssl=self.tls, server_hostname=self.host if self.tls else None, limit=1 << 20)
            self.used = 0
        reused = self.used > 0
        self.used += 1
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        lines += [f"{n}: {v}" for n, v in headers]
        if body or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body)}")
        payload = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
        try:
            self.writer.write(payload)
            await self.writer.drain()
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError) as e:
            await self.close()
            if reused and (not isinstance(e, asyncio.IncompleteReadError) or not e.partial):
                raise StaleConnection(type(e).__name__) from e
            raise
        except BaseException:
            await self.close()
            raise
        try:
            status_line, *header_lines = head[:-4].decode("latin-1").split("\r\n")
            status = int(status_line.split(" ", 2)[1])
            parsed = []
            for line in header_lines:
                name, _, value = line.partition(":")
                parsed.append((name.strip().lower(), value.strip()))
            answer = Answer(status, parsed, b"")
            if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
                data = b""
            elif "chunked" in (answer.header("transfer-encoding") or "").lower():
                chunks = []
                while True:
                    size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
                    if size == 0:
                        while (await self.reader.readuntil(b"\r\n")) != b"\r\n":
                            pass
                        break
                    chunks.append(await self.reader.readexactly(size))
                    await self.reader.readexactly(2)
                data = b"".join(chunks)
            elif answer.header("content-length") is not None:
                data = await self.reader.readexactly(int(answer.header("content-length")))
            else:
                data = await self.reader.read()
                await self.close()
            answer.body = data
            if (answer.header("connection") or "").lower() == "close":
                await self.close()
            return answer
        except BaseException:
            await self.close()
            raise


# ---------------------------------------------------------------- the soak

MIB = 1024


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Incarnation:
    """One process of an instance slot: its pid and RSS when it started carrying load and at its end."""

    def __init__(self, process):
        self.process = process
        self.pid = process.pid
        self.rss_start = None
        self.rss_end = None
        self.ended_by = "end of the soak"


class Slot:
    def __init__(self, name, port):
        self.name, self.port = name, port
        self.lives = []

    @property
    def current(self):
        return self.lives[-1] if self.lives else None


class Record:
    __slots__ = ("kind", "registration", "start", "end", "status", "code", "error", "soak_id", "phase")

    def __init__(self, kind, registration, soak_id, phase):
        self.kind, self.registration, self.soak_id, self.phase = kind, registration, soak_id, phase
        self.start = self.end = 0.0
        self.status = None
        self.code = None
        self.error = None


class Soak:
    def __init__(self):
        self.bin = env("PARLEY_BIN")
        self.dir = env("SOAK_DIR")
        self.seconds = int(env("SOAK_SECONDS"))
        self.database_url = env("DATABASE_URL")
        self.keys = env("KEYS")
        self.admin_token = env("ADMIN_TOKEN")
        self.sim_port = int(env("SIM_PORT"))
        self.haproxy_port = int(env("HAPROXY_PORT"))
        self.haproxy_socket = env("HAPROXY_SOCKET")
        self.haproxy_log = env("HAPROXY_LOG")
        self.pg_ctl = shlex.split(env("PG_CTL"))
        self.pg_log = env("PG_LOG")
        self.load_percent = float(env("SOAK_LOAD_PERCENT", "70"))
        self.kill_interval = float(os.environ.get("SOAK_KILL_INTERVAL") or min(300.0, self.seconds / 2.5))
        self.ramp_step = float(env("SOAK_RAMP_STEP_SECONDS", "5"))
        self.pg_grace = float(env("SOAK_PG_GRACE_SECONDS", "10"))
        growth = os.environ.get("SOAK_MAX_RSS_GROWTH_MIB", "")
        self.max_growth_mib = float(growth) if growth else None
        self.tls = ssl.create_default_context(cafile=env("CA_FILE"))
        self.base = "/parley"
        self.public = f"https://127.0.0.1:{self.haproxy_port}{self.base}"
        ports = [int(p) for p in env("INSTANCE_PORTS").split(",")]
        if len(ports) != 3:
            raise SoakError("INSTANCE_PORTS must name three ports")
        self.slots = [Slot(f"parley{i + 1}", p) for i, p in enumerate(ports)]
        self.records = []
        self.kills = []          # (signalled, reaped, slot name, pid)
        self.restarts = []       # (time ready again, slot name, seconds down)
        self.pg_windows = []     # (start, back, end of grace)
        self.next_id = 0
        self.registrations = {}  # kind -> [(token, id)]
        self.signed_in = []      # (token, id) of authorization-code registrations with tokens
        self.token_lost_during = set()
        self.stale_resends = 0
        self.running_load = False

    # ------------------------------------------------------------ processes

    def instance_environment(self, port):
        child = dict(os.environ)
        child.update({
            "PARLEY_DATABASE_URL": self.database_url,
            "PARLEY_ENCRYPTION_KEYS": self.keys,
            "PARLEY_DESTINATIONS": os.path.join(self.dir, "destinations.yaml"),
            "PARLEY_ADMIN_TOKENS": self.admin_token,
            "PARLEY_PUBLIC_URL": self.public,
            "PARLEY_TRUSTED_PROXIES": "127.0.0.1",
            "PARLEY_LISTEN": f"127.0.0.1:{port}",
            "PARLEY_LOG_LEVEL": os.environ.get("PARLEY_LOG_LEVEL", "warning"),
            "PARLEY_MIGRATE_ON_START": "false",
            # One client (this driver) makes all the load: the per-client limits would refuse it.
            "PARLEY_RATE_LIMIT_PROXY": "off",
            "PARLEY_RATE_LIMIT_REGISTRATIONS": "off",
            "PARLEY_RATE_LIMIT_TOKEN_CALLS": "off",
        })
        return child

    def spawn(self, slot):
        log = open(os.path.join(self.dir, f"{slot.name}.log"), "ab")
        process = subprocess.Popen([self.bin, "serve"], env=self.instance_environment(slot.port),
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        slot.lives.append(Incarnation(process))

    async def wait_ready(self, slot, limit=60.0):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if slot.current.process.poll() is not None:
                raise SoakError(f"{slot.name} exited with {slot.current.process.returncode}: {self.tail(slot)}")
            connection = Connection(slot.port)
            try:
                if (await connection.request("GET", "/readyz", timeout=2)).status == 200:
                    return
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, StaleConnection, ValueError):
                pass
            finally:
                await connection.close()
            await asyncio.sleep(0.05)
        raise SoakError(f"{slot.name} was not ready within {limit:.0f} s: {self.tail(slot)}")

    def tail(self, slot):
        try:
            with open(os.path.join(self.dir, f"{slot.name}.log"), "rb") as f:
                return f.read()[-1500:].decode(errors="replace")
        except OSError:
            return ""

    def haproxy_states(self):
        """{server name: status} of the backend, from HAProxy's stats socket."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(self.haproxy_socket)
            s.sendall(b"show stat\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        lines = data.decode().splitlines()
        header = lines[0].lstrip("# ").split(",")
        states = {}
        for line in lines[1:]:
            row = dict(zip(header, line.split(",")))
            if row.get("pxname") == "parley" and row.get("svname", "").startswith("parley"):
                states[row["svname"]] = row
        return states

    async def wait_balanced(self, names, limit=30.0):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            states = self.haproxy_states()
            if all(states.get(n, {}).get("status", "").startswith("UP") for n in names):
                return
            await asyncio.sleep(0.1)
        raise SoakError(f"HAProxy did not see {names} UP within {limit:.0f} s: "
                        f"{ {n: r.get('status') for n, r in self.haproxy_states().items()} }")

    def stop_all(self):
        for slot in self.slots:
            life = slot.current
            if life and life.process.poll() is None:
                life.process.terminate()
        for slot in self.slots:
            life = slot.current
            if life:
                try:
                    life.process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    life.process.kill()
                    life.process.wait()

    # ------------------------------------------------------------ requests through HAProxy

    async def call(self, connection, method, path, token=None, body=None, extra=(), soak_id=None):
        headers = list(extra)
        if token:
            headers.append(("Authorization", f"Bearer {token}"))
        data = b""
        if body is not None:
            data = json.dumps(body).encode() if not isinstance(body, bytes) else body
            if not isinstance(body, bytes):
                headers.append(("Content-Type", "application/json"))
        if soak_id is not None:
            headers.append(("X-Soak-Id", str(soak_id)))
        target = path if path.startswith(self.base) else self.base + path
        try:
            return await connection.request(method, target, headers, data)
        except StaleConnection:
            # What every HTTP client does on a kept-alive connection the other side closed:
            # send again on a new one. Counted and printed.
            self.stale_resends += 1
            return await connection.request(method, target, headers, data)

    async def setup(self, connection):
        """Registrations on every destination; sign-ins for the authorization-code ones."""
        alice = {"username": "alice", "password": "wonderland"}
        for kind, destination, extra, count in [
            ("basic", "smp", {"credentials": alice}, 6),
            ("cc", "cc", {}, 4),
            ("code", "code", {}, 6),
        ]:
            self.registrations[kind] = []
            for _ in range(count):
                answer = await self.call(connection, "POST", "/v1/registrations", body={"destination": destination, **extra})
                if answer.status != 201:
                    raise SoakError(f"POST /v1/registrations ({destination}) answered {answer.status}: {answer.body[:300]!r}")
                created = answer.json()
                self.registrations[kind].append((created["clientToken"], created["id"]))
        for token, registration in self.registrations["code"]:
            await self.sign_in(connection, token)
            self.signed_in.append((token, registration))
        for kind in ("basic", "cc", "code"):
            for token, _ in self.registrations[kind]:
                path = "/v1/proxy/api/data" if kind == "basic" else "/v1/proxy/data"
                answer = await self.call(connection, "GET", path, token=token)
                if answer.status != 200:
                    raise SoakError(f"first proxied call on {kind} answered {answer.status}: {answer.body[:300]!r}")

    async def sign_in(self, connection, token):
        """An OAuth2 authorization-code sign-in as a browser does it: Parley's confirmation
        page, the authorization server's login form, the callback through the balancer."""
        challenged = await self.call(connection, "GET", "/v1/proxy/data", token=token)
        flow = challenged.json().get("flow") or {}
        if challenged.status != 401 or not flow.get("url"):
            raise SoakError(f"the authorization-code registration was not challenged: {challenged.status} {challenged.body[:300]!r}")
        target = flow["url"][len(f"https://127.0.0.1:{self.haproxy_port}"):]
        cookies = {}

        def keep(answer):
            for value in answer.all("set-cookie"):
                name, _, rest = value.partition("=")
                cookies[name.strip()] = rest.split(";", 1)[0]

        def jar():
            return [("Cookie", "; ".join(f"{n}={v}" for n, v in cookies.items()))] if cookies else []

        page = await connection.request("GET", target, jar())
        keep(page)
        text = page.body.decode(errors="replace")
        fields = dict(re.findall(r'name="(k|token)" value="([^"]*)"', text))
        if page.status != 200 or "data-parley-confirm" not in text or set(fields) != {"k", "token"}:
            raise SoakError(f"no confirmation page at the flow URL: {page.status} {text[:300]!r}")
        form = urllib.parse.urlencode(fields).encode()
        confirmed = await connection.request(
            "POST", target.split("?", 1)[0] + "/confirm",
            [("Content-Type", "application/x-www-form-urlencoded")] + jar(), form)
        keep(confirmed)
        refresh = confirmed.header("refresh") or ""
        if confirmed.status != 200 or not refresh.startswith("0; url="):
            raise SoakError(f"the confirmation did not lead on: {confirmed.status} {confirmed.body[:300]!r}")
        authorize = refresh[len("0; url="):]
        query = authorize.split("?", 1)[1]
        simulator = Connection(self.sim_port)
        try:
            login = await simulator.request(
                "POST", "/oauth/authorize", [("Content-Type", "application/x-www-form-urlencoded")],
                (query + "&username=alice&password=wonderland").encode())
        finally:
            await simulator.close()
        callback = login.header("location") or ""
        if login.status != 302 or not callback.startswith(self.public + "/callback/oauth2?"):
            raise SoakError(f"the authorization server's login: {login.status} {callback[:200]!r}")
        finished = await connection.request("GET", callback[len(f"https://127.0.0.1:{self.haproxy_port}"):], jar())
        if finished.status != 303:
            raise SoakError(f"the callback answered {finished.status}: {finished.body[:300]!r}")

    # ------------------------------------------------------------ the mix

    MIX = [
        # (weight, kind, method, path, body, expected status)
        (24, "basic", "GET", "/v1/proxy/api/data", None, 200),       # SMPSESSION cookie (Basic once)
        (8, "basic", "POST", "/v1/proxy/csrf/items", {"name": "pen"}, 201),  # SAP CSRF token + cookie
        (6, "basic", "POST", "/v1/proxy/echo/orders", {"qty": 1}, 200),
        (18, "cc", "GET", "/v1/proxy/data", None, 200),               # client-credentials token
        (5, "cc", "POST", "/v1/proxy/data", {"n": 1}, 200),
        (22, "code", "GET", "/v1/proxy/data", None, 200),             # authorization code, refreshed
        (6, "code", "POST", "/v1/proxy/data", {"n": 2}, 200),
        (6, "me", "GET", "/v1/registrations/me", None, 200),
        (3, "register", "POST", "/v1/registrations", None, 201),     # a new registration, then its first call
        (2, "fresh", "GET", "/v1/proxy/api/data", None, 200),
    ]

    def pick(self, rng):
        total = sum(w for w, *_ in self.MIX)
        roll = rng.uniform(0, total)
        for entry in self.MIX:
            roll -= entry[0]
            if roll <= 0:
                return entry
        return self.MIX[-1]

    async def one(self, connection, rng, phase, fresh):
        _, kind, method, path, body, expected = self.pick(rng)
        token = registration = None
        if kind == "me":
            token, registration = rng.choice(self.registrations["basic"] + self.registrations["cc"])
        elif kind == "register":
            body = {"destination": "smp", "credentials": {"username": "alice", "password": "wonderland"}}
        elif kind == "fresh":
            if not fresh:
                kind, path = "basic", "/v1/proxy/api/data"
                token, registration = rng.choice(self.registrations["basic"])
            else:
                token, registration = fresh.pop()
        else:
            token, registration = rng.choice(self.registrations[kind])
        self.next_id += 1
        record = Record(kind, registration, self.next_id, phase)
        record.start = time.monotonic()
        try:
            answer = await self.call(connection, method, path, token=token, body=body, soak_id=record.soak_id)
            record.status = answer.status
            if answer.status != expected:
                record.code = answer.json().get("code") or (answer.header("parley-request-id") and "-") or "balancer"
            elif kind == "register":
                created = answer.json()
                if "clientToken" in created:
                    fresh.append((created["clientToken"], created["id"]))
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                StaleConnection, ValueError, ssl.SSLError) as e:
            record.error = type(e).__name__
        record.end = time.monotonic()
        if kind == "code" and record.code == "interaction_required":
            self.token_lost_during.add(registration)
        self.records.append(record)
        return record

    async def closed_loop(self, concurrency, seconds, phase):
        """`concurrency` clients, each sending its next request as soon as the last is answered."""
        stop = time.monotonic() + seconds
        fresh = []

        async def client(seed):
            rng = random.Random(seed)
            connection = Connection(self.haproxy_port, self.tls)
            try:
                while time.monotonic() < stop:
                    await self.one(connection, rng, phase, fresh)
            finally:
                await connection.close()

        first = len(self.records)
        began = time.monotonic()
        await asyncio.gather(*(client(i) for i in range(concurrency)))
        done = self.records[first:]
        ok = sum(1 for r in done if r.status is not None and r.code is None)
        return ok / (time.monotonic() - began), len(done) - ok

    async def paced(self, rate, seconds, workers, phase):
        """`workers` clients, each sending at rate / workers per second on a fixed schedule (a
        request that is late goes at once; lateness over a second is forgiven, not caught up)."""
        stop = time.monotonic() + seconds
        interval = workers / rate
        fresh = []
        late = [0]

        async def client(seed):
            rng = random.Random(seed)
            connection = Connection(self.haproxy_port, self.tls)
            next_at = time.monotonic() + rng.uniform(0, interval)
            try:
                while next_at < stop:
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    elif delay < -1:
                        late[0] += 1
                        next_at = time.monotonic()
                    await self.one(connection, rng, phase, fresh)
                    next_at += interval
            finally:
                await connection.close()

        await asyncio.gather(*(client(1000 + i) for i in range(workers)))
        return late[0]

    # ------------------------------------------------------------ faults

    async def faults(self, began):
        """SIGKILL round robin every kill_interval (restart at once), PostgreSQL restart at the middle."""
        pg_at = began + self.seconds / 2
        times = []
        t = self.kill_interval / 2
        while t < self.seconds - 10:
            at = began + t
            if abs(at - pg_at) < 15:
                at = pg_at + 15
            if at < began + self.seconds - 10:
                times.append(at)
            t += self.kill_interval
        events = [(at, "kill") for at in times] + [(pg_at, "pg")]
        victim = 0
        for at, what in sorted(events):
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            if what == "pg":
                await self.restart_postgres()
                if os.environ.get("SOAK_SABOTAGE") == "revoke-refresh-tokens":
                    # The soak's own check: every refresh token dies at the authorization server,
                    # so the token-loss criterion must fail.
                    simulator = Connection(self.sim_port)
                    try:
                        await simulator.request("POST", "/sim/oauth/revoke-refresh-tokens", body=b"")
                    finally:
                        await simulator.close()
                    say(f"soak: {self.clock(time.monotonic())} SOAK_SABOTAGE: every refresh token revoked at the authorization server")
            else:
                await self.kill_and_restart(self.slots[victim % 3])
                victim += 1

    async def kill_and_restart(self, slot):
        life = slot.current
        life.rss_end = rss_kib(life.pid)
        life.ended_by = "SIGKILL"
        killed = time.monotonic()
        os.kill(life.pid, signal.SIGKILL)
        await asyncio.get_running_loop().run_in_executor(None, life.process.wait)
        # Until the process is reaped its listening socket may still take connections, which the
        # kernel then resets: requests sent between the signal and here were on the killed instance too.
        dead = time.monotonic()
        self.kills.append((killed, dead, slot.name, life.pid))
        say(f"soak: {self.clock(killed)} SIGKILL {slot.name} (pid {life.pid}, RSS {life.rss_end / MIB:.1f} MiB); restarting it")
        self.spawn(slot)
        await self.wait_ready(slot)
        back = time.monotonic()
        # HAProxy checks every 2 s and needs two good checks (rise 2) to send traffic again.
        await asyncio.sleep(4.5)
        await self.wait_balanced([slot.name], limit=60)
        slot.current.rss_start = rss_kib(slot.current.pid)
        self.restarts.append((back, slot.name, back - killed))
        say(f"soak: {self.clock(back)} {slot.name} ready again (pid {slot.current.pid}) {back - killed:.1f} s after the kill")

    async def restart_postgres(self):
        began = time.monotonic()
        say(f"soak: {self.clock(began)} PostgreSQL: pg_ctl restart -m fast")
        with open(self.pg_log, "ab") as log:
            result = await asyncio.get_running_loop().run_in_executor(None, lambda: subprocess.run(
                self.pg_ctl + ["restart", "-m", "fast", "-w", "-t", "60"], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL))
        if result.returncode != 0:
            raise SoakError(f"pg_ctl restart failed ({result.returncode}); see {self.pg_log}")
        back = time.monotonic()
        self.pg_windows.append((began, back, back + self.pg_grace))
        say(f"soak: {self.clock(back)} PostgreSQL accepts connections again after {back - began:.1f} s")

    def clock(self, t):
        return f"[{t - self.t0:7.1f} s]"

    # ------------------------------------------------------------ judging

    # An HTTP log line: "… parley/<server> <timers> <status> <bytes> [<cookies> ]<termination> … {<soak id>|<host>}".
    HAPROXY_LINE = re.compile(r" parley/(\S+) \S+ (\d{3}) \S+ (?:\S+ \S+ )?([A-Za-z-]{4}) .*\{(\d+)[|}]")

    def haproxy_lines(self):
        """HAProxy's log lines (only abnormal ones are logged) by soak id: (server, status, termination state).
        A request line the pattern cannot read is counted in `self.unread_log_lines`: a judge that
        cannot read its witness must not pass (nor blame) anything."""
        found = {}
        self.unread_log_lines = 0
        try:
            with open(self.haproxy_log, errors="replace") as f:
                for line in f:
                    m = self.HAPROXY_LINE.search(line)
                    if m:
                        found[int(m.group(4))] = (m.group(1), int(m.group(2)), m.group(3))
                    elif re.search(r" parley/\S+ .*\{\d+", line):
                        self.unread_log_lines += 1
        except OSError:
            pass
        return found

    def classify(self, record, logged):
        """(allowed?, class) of a request that did not get its expected answer."""
        server, status, termination = logged.get(record.soak_id, (None, record.status, None))
        for killed, dead, name, _pid in self.kills:
            if record.start <= dead and record.end >= killed and server == name and termination and termination[0] == "S":
                return True, f"in flight on {name} when it was killed ({record.status} {termination})"
        for began, _back, grace_end in self.pg_windows:
            if record.start <= grace_end and record.end >= began:
                if record.status == 503 and record.code == "store_unavailable":
                    return True, "503 store_unavailable during the PostgreSQL restart"
                if record.status == 503 and record.code == "balancer" and server in (None, "<NOSRV>"):
                    return True, "503 from HAProxy (no instance ready) during the PostgreSQL restart"
        what = f"{record.status} {record.code}" if record.status is not None else record.error
        return False, f"{what} ({record.kind}; HAProxy: {server or 'not logged'} {termination or ''})".rstrip()

    async def token_check(self, connection):
        """A token is lost when an authorization-code registration that held tokens needs a new
        authorization: a proxied call answered 401 interaction_required during the soak, or at the
        end its proxied call is not answered 200 as alice, or Parley no longer holds its
        authorization_code token (admin API), or the authorization server saw a login or a
        refused refresh (invalid_grant) after the set-up's sign-ins."""
        lost = set(self.token_lost_during)
        reasons = [f"{len(self.token_lost_during)} registration(s) answered interaction_required during the soak"] \
            if self.token_lost_during else []
        admin = Connection(self.slots[0].port)
        try:
            for token, registration in self.signed_in:
                answer = await self.call(connection, "GET", "/v1/proxy/data", token=token)
                if answer.status != 200 or answer.json().get("sub") != "alice":
                    lost.add(registration)
                    reasons.append(f"registration {registration}: proxied call answered {answer.status} {answer.json().get('code')}")
                shown = await admin.request("GET", f"/admin/v1/registrations/{registration}",
                                            [("Authorization", f"Bearer {self.admin_token}")])
                kinds = [t.get("kind") for t in shown.json().get("tokens", [])]
                if shown.status != 200 or "authorization_code" not in kinds:
                    lost.add(registration)
                    reasons.append(f"registration {registration}: admin API {shown.status}, tokens {kinds}")
        finally:
            await admin.close()
        return lost, reasons

    def sim_stats(self):
        connection = Connection(self.sim_port)

        async def get():
            try:
                return (await connection.request("GET", "/sim/stats")).json()
            finally:
                await connection.close()
        return get()

    # ------------------------------------------------------------ the run

    async def run(self):
        self.t0 = time.monotonic()
        say(f"soak: migrating, then starting {', '.join(s.name for s in self.slots)}")
        migrate = subprocess.run([self.bin, "migrate"], env=self.instance_environment(self.slots[0].port),
                                 capture_output=True, text=True)
        if migrate.returncode != 0:
            raise SoakError(f"parley migrate failed: {migrate.stdout[-800:]}{migrate.stderr[-800:]}")
        for slot in self.slots:
            self.spawn(slot)
        for slot in self.slots:
            await self.wait_ready(slot)
        await self.wait_balanced([s.name for s in self.slots])

        connection = Connection(self.haproxy_port, self.tls)
        await self.setup(connection)
        stats_setup = await self.sim_stats()
        logins_after_setup = stats_setup["oauth"]["authorizeLogins"] + stats_setup["oauth"]["silentAuthorizations"]
        say(f"soak: {sum(len(v) for v in self.registrations.values())} registrations; "
            f"{len(self.signed_in)} authorization-code sign-ins done")

        # The maximum: closed-loop clients, doubling until the throughput stops growing.
        say(f"soak: measuring the maximum throughput ({self.ramp_step:.0f} s per step)")
        first = len(self.records)  # from here on every request is judged, the ramp's too
        best, best_concurrency, previous = 0.0, 0, 0.0
        for concurrency in (4, 8, 16, 32, 64):
            rate, failed = await self.closed_loop(concurrency, self.ramp_step, "ramp")
            say(f"soak:   {concurrency:3d} clients: {rate:8.1f} requests/s answered as expected ({failed} not)")
            if rate > best:
                best, best_concurrency = rate, concurrency
            if failed > rate * self.ramp_step / 100 or (previous and rate < previous * 1.05):
                break
            previous = rate
        if best <= 0:
            raise SoakError("no request was answered during the ramp")
        target = best * self.load_percent / 100
        workers = max(8, min(128, best_concurrency * 2))
        say(f"soak: maximum {best:.1f} requests/s (at {best_concurrency} clients); load {target:.1f} requests/s "
            f"({self.load_percent:.0f} %) from {workers} paced clients for {self.seconds} s")

        for slot in self.slots:
            slot.current.rss_start = rss_kib(slot.current.pid)
        self.running_load = True
        began = self.t0 = time.monotonic()
        faults = asyncio.ensure_future(self.faults(began))
        late = await self.paced(target, self.seconds, workers, "soak")
        await faults  # a fault scheduled at the very end finishes first
        elapsed = time.monotonic() - began
        for slot in self.slots:
            slot.current.rss_end = rss_kib(slot.current.pid)

        # The verdict.
        await self.wait_balanced([s.name for s in self.slots], limit=30)
        lost, lost_reasons = await self.token_check(connection)
        await connection.close()
        stats = await self.sim_stats()
        oauth = stats["oauth"]
        new_logins = oauth["authorizeLogins"] + oauth["silentAuthorizations"] - logins_after_setup
        invalid_grants = oauth["tokenErrorsByCode"].get("invalid_grant", 0)
        refreshes = oauth["tokenCallsByGrant"].get("refresh_token", 0)
        if new_logins:
            lost_reasons.append(f"the authorization server saw {new_logins} sign-in(s) after the set-up")
        if invalid_grants:
            lost_reasons.append(f"the authorization server refused {invalid_grants} refresh(es) with invalid_grant")
        tokens_lost = max(len(lost), new_logins, invalid_grants)

        judged = self.records[first:]
        soak = [r for r in judged if r.phase == "soak"]
        ramp_failed = [r for r in judged if r.phase == "ramp" and (r.status is None or r.code is not None)]
        failed = [r for r in soak if r.status is None or r.code is not None] + ramp_failed
        logged = self.haproxy_lines()
        allowed, unexplained = collections.Counter(), collections.Counter()
        examples = []
        for record in failed:
            ok, label = self.classify(record, logged)
            (allowed if ok else unexplained)[label] += 1
            if not ok and len(examples) < 10:
                examples.append(f"#{record.soak_id} at {record.start - began:.1f} s: {label}")
        by_kind = collections.Counter(r.kind for r in soak)
        latencies = sorted(r.end - r.start for r in soak if r.status is not None and r.code is None)
        states = self.haproxy_states()
        retries = sum(int(r.get("wretr") or 0) for r in states.values())
        redispatches = sum(int(r.get("wredis") or 0) for r in states.values())

        say("")
        say("================ Parley soak ================")
        say(f"load:        {len(soak)} requests in {elapsed:.0f} s = {len(soak) / elapsed:.1f}/s "
            f"({self.load_percent:.0f} % of the measured maximum {best:.1f}/s; {late} late by over 1 s)")
        say("mix:         " + ", ".join(f"{k} {n}" for k, n in sorted(by_kind.items())))
        if latencies:
            say(f"latency:     p50 {percentile(latencies, 0.5) * 1000:.1f} ms, p99 {percentile(latencies, 0.99) * 1000:.1f} ms, "
                f"max {latencies[-1] * 1000:.0f} ms (answered as expected)")
        slowest = sorted((r for r in soak if r.status is not None), key=lambda r: r.start - r.end)[:3]
        say("slowest:     " + "; ".join(f"{(r.end - r.start) * 1000:.0f} ms ({r.kind}, {r.status}, at {r.start - began:.1f} s)" for r in slowest))
        say(f"faults:      {len(self.kills)} SIGKILL(s): " + ", ".join(
            f"{name} at {t - began:.0f} s (reaped {(dead - t) * 1000:.0f} ms later)" for t, dead, name, _ in self.kills))
        for back, name, down in self.restarts:
            say(f"             {name} ready again {down:.1f} s after its kill")
        for start, back, grace_end in self.pg_windows:
            say(f"             PostgreSQL restart at {start - began:.0f} s, accepting again after {back - start:.1f} s "
                f"(window for its errors: until {grace_end - began:.0f} s)")
        say(f"balancer:    {retries} retries, {redispatches} redispatches by HAProxy; "
            f"{self.stale_resends} request(s) resent by the client on a closed keep-alive connection")
        say(f"refreshes:   {refreshes} refresh_token grants at the authorization server, "
            f"{oauth['tokenCallsByGrant'].get('client_credentials', 0)} client_credentials, "
            f"{oauth['tokenCallsByGrant'].get('authorization_code', 0)} authorization_code")
        stalled = sum(1 for r in soak if r.end - r.start > 10)
        say(f"stalled:     {stalled} request(s) took over 10 s")
        say(f"errors:      {len(failed)} of {len(soak)} (+ {len(judged) - len(soak)} of the ramp, {len(ramp_failed)} failed): {sum(allowed.values())} allowed, {sum(unexplained.values())} not")
        for label, n in allowed.most_common():
            say(f"   allowed   {n:6d}  {label}")
        for label, n in unexplained.most_common():
            say(f"   FAILED    {n:6d}  {label}")
        for example in examples:
            say(f"             {example}")
        say(f"tokens lost: {tokens_lost} (of {len(self.signed_in)} authorization-code registrations with tokens)")
        for reason in lost_reasons:
            say(f"             {reason}")
        say("memory (RSS, MiB; 'start' once the process carries load, 'end' at its SIGKILL or the soak's end):")
        growth_failed = []
        for slot in self.slots:
            for life in slot.lives:
                if life.rss_start is None or life.rss_end is None:
                    continue
                growth = (life.rss_end - life.rss_start) / MIB
                say(f"   {slot.name} pid {life.pid:>7}: start {life.rss_start / MIB:7.1f}, end {life.rss_end / MIB:7.1f}, "
                    f"growth {growth:+7.1f} ({life.ended_by})")
                if self.max_growth_mib is not None and growth > self.max_growth_mib:
                    growth_failed.append(f"{slot.name} pid {life.pid} grew {growth:.1f} MiB")
        criteria = [
            ("requests were made", len(soak) > 0),
            ("at least one instance was killed", len(self.kills) >= 1),
            ("PostgreSQL was restarted", len(self.pg_windows) == 1),
            ("only allowed errors", not unexplained),
            ("every HAProxy request line was read", self.unread_log_lines == 0),
            ("no token lost", tokens_lost == 0),
            ("tokens were refreshed", refreshes > 0),
        ]
        if self.max_growth_mib is not None:
            criteria.append((f"RSS growth at most {self.max_growth_mib:.0f} MiB per process", not growth_failed))
        for name, ok in criteria:
            say(f"{'ok  ' if ok else 'FAIL'}  {name}")
        say(f"SOAK requests={len(soak)} errors={len(failed)} allowed={sum(allowed.values())} "
            f"unexplained={sum(unexplained.values())} kills={len(self.kills)} pg_restarts={len(self.pg_windows)} "
            f"tokens_lost={tokens_lost} refreshes={refreshes} stalled={stalled} max_rps={best:.1f} target_rps={target:.1f}")
        passed = all(ok for _, ok in criteria)
        say(f"SOAK {'PASSED' if passed else 'FAILED'}")
        return 0 if passed else 1


def main():
    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    soak = None
    code = 2
    try:
        soak = Soak()
        code = asyncio.run(soak.run())
    except SoakError as e:
        print(f"soak: could not run: {e}", file=sys.stderr, flush=True)
        code = 2
    finally:
        if soak is not None:
            soak.stop_all()
    sys.exit(code)


if __name__ == "__main__":
    main()
