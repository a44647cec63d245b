"""Helpers shared by the Python scripts in scripts/bench/ (standard library only).

The scripts take their set-up from the environment, like the shell ones (common.sh):
BIN, DATABASE_URL, PSQL, SIM_PORT, KEYS, TMP. They start the Parley instances they need
themselves and stop them on exit, also on SIGTERM/SIGINT/SIGHUP.
"""

import asyncio
import http.client
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.parse

_NAME = os.path.basename(sys.argv[0])


def say(*parts):
    print(*parts, flush=True)


class BenchError(Exception):
    """Something could not run; the script exits 1 with this message."""


def die(message):
    raise BenchError(message)


def run_main(main):
    """Runs main(), stopping every instance on the way out; turns signals into exits."""
    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    try:
        main()
    except BenchError as e:
        print(f"{_NAME}: FAILED: {e}", file=sys.stderr, flush=True)
        code = 1
    else:
        code = 0
    finally:
        stop_instances()
    sys.exit(code)


class Env:
    def __init__(self):
        missing = [v for v in ("BIN", "DATABASE_URL", "PSQL", "SIM_PORT", "KEYS", "TMP") if not os.environ.get(v)]
        if missing:
            die(f"missing environment: {' '.join(missing)} (see scripts/bench/common.sh)")
        self.bin = os.environ["BIN"]
        self.database_url = os.environ["DATABASE_URL"]
        self.psql = shlex.split(os.environ["PSQL"])
        self.sim_port = int(os.environ["SIM_PORT"])
        self.keys = os.environ["KEYS"]
        self.tmp = os.environ["TMP"]
        if not os.access(os.path.join(self.bin, "parley"), os.X_OK):
            die(f"no parley binary in BIN={self.bin}")

    def sql(self, statement):
        out = subprocess.run(self.psql + ["-v", "ON_ERROR_STOP=1", "-c", statement], capture_output=True, text=True)
        if out.returncode != 0:
            die(f"psql: {out.stderr.strip()}")
        return out.stdout.strip()


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for_port(port, seconds):
    """Returns once 127.0.0.1:`port` accepts a connection (polled every 50 ms); dies after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                die(f"nothing listens on port {port} after {seconds} s")
            time.sleep(0.05)


# ---------------------------------------------------------------- HTTP

def request(port, method, path, token=None, body=None, timeout=10.0):
    """One request on a new connection: (status, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        return exchange(conn, method, path, token, body)
    finally:
        conn.close()


def exchange(conn, method, path, token=None, body=None):
    """One request on `conn` (kept alive): (status, body bytes)."""
    headers = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if body is not None:
        body = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    return response.status, response.read()


def register(port, destination, extra=None):
    """POST /v1/registrations; the client token."""
    payload = {"destination": destination}
    payload.update(extra or {})
    status, body = request(port, "POST", "/v1/registrations", body=payload)
    if status != 201:
        die(f"POST /v1/registrations on port {port} answered {status}: {body[:300]!r}")
    return json.loads(body)["clientToken"]


def sim_stats(env):
    status, body = request(env.sim_port, "GET", "/sim/stats")
    if status != 200:
        die(f"GET /sim/stats answered {status}")
    return json.loads(body)


def sim_post(env, path):
    status, body = request(env.sim_port, "POST", path)
    if status // 100 != 2:
        die(f"POST {path} on the simulator answered {status}: {body[:200]!r}")


# ---------------------------------------------------------------- Parley instances

_instances = []


class Instance:
    def __init__(self, name, port, process, log):
        self.name, self.port, self.process, self.log = name, port, process, log

    def alive(self):
        return self.process.poll() is None


def start_instances(env, names, destinations_yaml, workdir):
    """Starts one `parley serve` per name (all at once), waits for /readyz 200 on each
    (30 s at most); the first one to start applies any migrations."""
    os.makedirs(workdir, exist_ok=True)
    destinations = os.path.join(workdir, "destinations.yaml")
    with open(destinations, "w") as f:
        f.write(destinations_yaml)
    ports = free_ports(len(names))
    started = []
    for name, port in zip(names, ports):
        child_env = dict(os.environ)  # other PARLEY_* knobs of the caller reach Parley
        child_env.update({
            "PARLEY_DATABASE_URL": env.database_url,
            "PARLEY_ENCRYPTION_KEYS": env.keys,
            "PARLEY_DESTINATIONS": destinations,
            "PARLEY_LOG_LEVEL": "warning",
            "PARLEY_LISTEN": f"127.0.0.1:{port}",
            "PARLEY_RATE_LIMIT_PROXY": "off",
            "PARLEY_RATE_LIMIT_REGISTRATIONS": "off",
            "PARLEY_RATE_LIMIT_TOKEN_CALLS": "off",
        })
        log = os.path.join(workdir, f"parley-{name}.log")
        with open(log, "wb") as out:
            process = subprocess.Popen([os.path.join(env.bin, "parley"), "serve"], env=child_env,
                                       stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        instance = Instance(name, port, process, log)
        _instances.append(instance)
        started.append(instance)
    deadline = time.monotonic() + 30
    for instance in started:
        while True:
            if not instance.alive():
                die(f"Parley {instance.name} exited with {instance.process.returncode}: {_tail(instance.log)}")
            try:
                if request(instance.port, "GET", "/readyz", timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                die(f"Parley {instance.name} did not become ready within 30 s: {_tail(instance.log)}")
            time.sleep(0.01)
    return started


def stop_instances():
    """SIGTERM to every instance started here, SIGKILL after 10 s."""
    for instance in _instances:
        if instance.alive():
            instance.process.terminate()
    for instance in _instances:
        try:
            instance.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            instance.process.kill()
            instance.process.wait()
    _instances.clear()


def _tail(path, lines=10):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).strip()
    except OSError:
        return ""


# ---------------------------------------------------------------- figures

def percentile(sorted_values, fraction):
    """The value at rank ceil(fraction·n) (1-based), nearest-rank method."""
    if not sorted_values:
        return float("nan")
    rank = max(1, -(-int(round(fraction * 1000)) * len(sorted_values) // 1000))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def verdict(ok):
    return "met" if ok else "MISSED"


# ---------------------------------------------------------------- CPU accounting

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """utime+stime of process `pid` (all its threads) in seconds; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of proc(5)


# ---------------------------------------------------------------- HTTP (asyncio, kept alive)

class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def header(self, name):
        return next((v for n, v in self.headers if n == name), None)

    def all(self, name):
        return [v for n, v in self.headers if n == name]

    @property
    def text(self):
        return self.body.decode(errors="replace")

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            die(f"an answer that is not JSON: {self.status} {self.body[:300]!r}")


class Client:
    """One kept-alive HTTP/1.1 connection to 127.0.0.1:port (reopened when the server closes it)."""

    def __init__(self, port):
        self.port = port
        self.reader = self.writer = None

    async def call(self, method, path, token=None, body=None, form=None, headers=()):
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
        if token:
            head += f"Authorization: Bearer {token}\r\n"
        payload = b""
        if body is not None:
            payload = json.dumps(body).encode()
            head += "Content-Type: application/json\r\n"
        elif form is not None:
            payload = urllib.parse.urlencode(form).encode()
            head += "Content-Type: application/x-www-form-urlencoded\r\n"
        if payload or method in ("POST", "PUT", "PATCH"):
            head += f"Content-Length: {len(payload)}\r\n"
        for name, value in headers:
            head += f"{name}: {value}\r\n"
        self.writer.write(head.encode() + b"\r\n" + payload)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        fields = []
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                fields.append((name.strip().lower(), value.strip()))
        response = Response(status, fields, b"")
        if method == "HEAD" or status in (204, 304):
            data = b""
        elif (response.header("transfer-encoding") or "").lower() == "chunked":
            data = b""
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                data += chunk[:-2]
        elif response.header("content-length") is not None:
            data = await self.reader.readexactly(int(response.header("content-length")))
        else:
            data = await self.reader.read()
            self.close()
        response.body = data
        if (response.header("connection") or "").lower() == "close":
            self.close()
        return response

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def each(port, items, workers, work):
    """`await work(client, item)` for every item, `workers` at a time, each worker on a kept-alive
    connection of its own; the results in the items' order."""
    items = list(items)
    results = [None] * len(items)
    queue = iter(enumerate(items))

    async def worker():
        client = Client(port)
        try:
            for i, item in queue:
                results[i] = await work(client, item)
        finally:
            client.close()

    await asyncio.gather(*(worker() for _ in range(max(1, min(workers, len(items))))))
    return results


def expect(response, status, what):
    if response.status != status:
        die(f"{what} answered {response.status} (expected {status}): {response.body[:300]!r}")
    return response


# ---------------------------------------------------------------- a simulator of a script's own

def start_simulator(env, name):
    """An upstream simulator of the script's own (so that its counters are the script's), with
    hour-long access tokens; (process, port). The caller terminates it."""
    (port,) = free_ports(1)
    log = os.path.join(env.tmp, f"{name}-simulator.log")
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [os.path.join(env.bin, "upstream-simulator"), "--host", "127.0.0.1", "--port", str(port),
             "--access-token-seconds", "3600"], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            if request(port, "GET", "/sim/stats", timeout=1)[0] == 200:
                return process, port
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.terminate()
            die(f"the simulator did not start: {_tail(log)}")
        time.sleep(0.05)


def password_destination(name, sim_port):
    """A destination file's entry: OAuth2 password grant against the simulator at `sim_port`."""
    sim = f"http://127.0.0.1:{sim_port}"
    return f"""  - name: {name}
    url: {sim}
    oauth2:
      grant: password
      tokenEndpoint: {sim}/oauth/token
      clientId: parley-confidential
      clientSecret: s3cret
      clientAuthentication: client_secret_basic
      scopes: [read]
"""


# ---------------------------------------------------------------- seeding

USER = {"username": "alice", "password": "wonderland"}


async def register_and_call(client, destination, paths, credentials=None):
    """`POST /v1/registrations` for `destination` (with `credentials`), then `GET` each of `paths` as
    the new registration, each answering 200 (dies otherwise); its client token."""
    body = {"destination": destination}
    if credentials is not None:
        body["credentials"] = credentials
    token = expect(await client.call("POST", "/v1/registrations", body=body), 201,
                   f"POST /v1/registrations ({destination})").json()["clientToken"]
    for path in paths:
        expect(await client.call("GET", path, token=token), 200, f"the seeding call {path} ({destination})")
    return token
