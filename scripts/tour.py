#!/usr/bin/env python3
"""The demo's whole walk-through in headless Chromium (`make tour`, scripts/tour.sh).

Starts scripts/run.sh (release binaries, or PARLEY_BINARY / PARLEY_SIMULATOR_BINARY), runs every
block it prints in bash as printed, completes the interactive flows in Chromium, and prints one
line per step: what was done, what Parley answered. On every kind of Parley's own hosted page it
runs axe-core (axe-selenium-python) in the light and the dark colour scheme and fails on any
violation of impact serious or critical; it checks that nothing overflows 320 px, and with
--screenshots DIR writes <page>-<phone|desktop>-<light|dark>.png (360 and 1280 px wide) there.
Stops everything at the end; exit status 0 only when every step passed. The last lines are a
summary that TourTests reads:

    tour checked: confirmation/light confirmation/dark …
    tour: N steps, F failed
"""

import argparse
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from axe_selenium_python import Axe
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE_KINDS = ["confirmation", "basic-form", "basic-form-error", "signed-in", "failed", "invalid-link", "web-refused"]
SCHEMES = ["light", "dark"]
WIDTHS = {"phone": 360, "desktop": 1280}
NARROWEST = 320
BLOCKS = ["demo", "demo-client", "demo-oauth", "demo-saml", "demo-otp", "demo-form", "demo-password", "demo-cert"]


class StepFailed(Exception):
    pass


class Tour:
    def __init__(self, screenshots):
        self.number = 0
        self.failed = 0
        self.checked = []
        self.screenshots = screenshots
        self.shots = 0

    def step(self, what, answer, ok=True):
        self.number += 1
        if not ok:
            self.failed += 1
        if isinstance(answer, (dict, list)):
            answer = json.dumps(answer, separators=(",", ":"))
        text = " ".join(str(answer).split())
        if len(text) > 170:
            text = text[:167] + "…"
        print(f"[{self.number:02d}] {'ok  ' if ok else 'FAIL'} {what} → {text}", flush=True)
        return ok

    def expect(self, condition, what, answer):
        if not self.step(what, answer, bool(condition)):
            raise StepFailed(what)


# --- the demo ------------------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Demo:
    """scripts/run.sh in its own process group; its output collected by a thread."""

    def __init__(self, env):
        self.lines = []
        self.ready = threading.Event()
        self.process = subprocess.Popen(
            ["bash", str(ROOT / "scripts/run.sh")], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, text=True, errors="replace")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line)
            if os.environ.get("TOUR_VERBOSE"):
                sys.stderr.write("  | " + line)
            if "Parley's log follows." in line:
                self.ready.set()
        self.ready.set()

    @property
    def output(self):
        return "".join(self.lines)

    def wait_ready(self, timeout):
        self.ready.wait(timeout)
        return "Parley's log follows." in self.output

    def stop(self):
        """SIGTERM, as Ctrl-C would; the script stops Parley, the simulator and its PostgreSQL."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        try:
            os.killpg(self.process.pid, 0)
            leftover = True
        except ProcessLookupError:
            leftover = False
        if leftover:
            os.killpg(self.process.pid, signal.SIGKILL)
        # The PostgreSQL folder a root run made in /var/tmp (the demo folder holds the rest).
        match = re.search(r"creating a local PostgreSQL in (\S+)", self.output)
        if match and match.group(1).startswith("/var/tmp/parley-demo-"):
            shutil.rmtree(os.path.dirname(match.group(1)), ignore_errors=True)
        return not leftover


def walk_through(output):
    """{paragraph name: [commands]} of the printed walk-through, in order."""
    parts = output.split("──────────")
    text = next((p for p in parts[1:] if "Parley is ready" in p), None)
    if text is None:
        raise StepFailed("no walk-through in the demo's output")
    blocks = {}
    for paragraph in text.split("\n\n"):
        lines = paragraph.strip("\n").split("\n")
        head = lines[0]
        if ":" not in head or not any(l.startswith("  ") for l in lines[1:]):
            continue
        commands = [l.strip() for l in lines[1:] if l.startswith("  ") and not l.strip().startswith("#")]
        blocks[head.split(":", 1)[0]] = commands
    return blocks


def bash(script, timeout=60):
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=timeout)
    return done.stdout, done.returncode


def as_json(text):
    try:
        value = json.loads(text)
        return value if isinstance(value, dict) else None
    except ValueError:
        return None


# --- the browser ---------------------------------------------------------------------------


def chromium(lang=None):
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("TOUR_CHROMIUM", "/usr/bin/chromium")
    for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"]:
        options.add_argument(argument)
    if lang:
        options.add_argument(f"--lang={lang}")
        options.add_experimental_option("prefs", {"intl.accept_languages": lang})
    service = Service(executable_path=os.environ.get("TOUR_CHROMEDRIVER", "/usr/bin/chromedriver"))
    return webdriver.Chrome(service=service, options=options)


def wait(browser, condition, timeout=20):
    return WebDriverWait(browser, timeout).until(condition)


def url_starts(prefix):
    return lambda browser: browser.current_url.startswith(prefix)


def replaced(element):
    """True once the document `element` belongs to has been replaced. Selenium's `staleness_of`
    knows only `StaleElementReferenceException`; while the new document takes over, ChromeDriver
    may answer "Node with given id does not belong to the document" instead (an unknown error),
    which means the same (SeleniumHQ/selenium#15401) and ended a tour run on 2026-11-28."""
    def check(_):
        try:
            element.is_enabled()
            return False
        except StaleElementReferenceException:
            return True
        except WebDriverException as error:
            if "does not belong to the document" in str(error):
                return True
            raise
    return check


def confirm(browser, url):
    """Opens a flow URL and presses the confirmation page's button."""
    browser.get(url)
    wait(browser, EC.element_to_be_clickable((By.CSS_SELECTOR, "form[data-parley-confirm] button, form[data-parley-confirm] [type=submit]"))).click()


def sign_in(browser, username="alice", password="wonderland", button="#login"):
    wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "#username"))).send_keys(username)
    browser.find_element(By.CSS_SELECTOR, "#password").send_keys(password)
    browser.find_element(By.CSS_SELECTOR, button).click()


def done_status(browser, flow_url):
    done = flow_url.split("?", 1)[0] + "/done"
    wait(browser, url_starts(done))
    body = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "body[data-parley-flow-status]")))
    return body.get_attribute("data-parley-flow-status")


def set_scheme(browser, scheme):
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]})


def set_width(browser, width):
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": width, "height": 800 if width < 600 else 900, "deviceScaleFactor": 1, "mobile": width < 600})


def save_full_page(browser, width, path):
    """A screenshot of the whole page at this width: the viewport grown to the page's height."""
    set_width(browser, width)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": width, "height": max(800 if width < 600 else 900, int(height)), "deviceScaleFactor": 1,
                             "mobile": width < 600})
    browser.execute_script("return document.body.offsetHeight")  # the new layout, before the shot
    return browser.save_screenshot(path)


def serious(browser):
    """axe-core's violations of impact serious or critical on the current page, and all of its results."""
    axe = Axe(browser)
    axe.inject()
    results = axe.run()
    return [v for v in results["violations"] if v.get("impact") in ("serious", "critical")], results


def check_page(tour, browser, page, ready_selector):
    """axe in light and dark, the 320 px overflow check, and the screenshots of one page kind."""
    wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, ready_selector)))
    for scheme in SCHEMES:
        set_scheme(browser, scheme)
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        bad, results = serious(browser)
        other = len(results["violations"]) - len(bad)
        detail = "; ".join(
            f"{v['impact']} {v['id']}: {v['help']} ({', '.join(n['target'][0] if isinstance(n['target'][0], str) else str(n['target'][0]) for n in v['nodes'][:3])})"
            for v in bad)
        tour.step(f"axe {page} {scheme}",
                  f"{len(bad)} serious/critical, {other} minor/moderate, {len(results['passes'])} rules passed" + (f": {detail}" if detail else ""),
                  ok=not bad)
        set_width(browser, NARROWEST)
        overflow = browser.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        tour.step(f"{page} {scheme} at {NARROWEST} px", "nothing overflows" if overflow <= 0 else f"{overflow} px too wide",
                  ok=overflow <= 0)
        if tour.screenshots:
            for name, width in WIDTHS.items():
                if save_full_page(browser, width, os.path.join(tour.screenshots, f"{page}-{name}-{scheme}.png")):
                    tour.shots += 1
        tour.checked.append(f"{page}/{scheme}")
    set_scheme(browser, "light")
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


# --- the walk-through ----------------------------------------------------------------------


def run(tour, demo, base, simulator):
    blocks = walk_through(demo.output)
    tour.expect(all(name in blocks for name in BLOCKS + ["Verified users", "Administration", "Key rotation"]),
                "the walk-through's blocks", ", ".join(blocks))
    tokens = {}

    def register(name, command=None):
        out, _ = bash((command or blocks[name][0]) + '\nprintf %s "$T"')
        tour.expect(out.startswith("pct_"), f"{name}: register", f"client token {out[:8]}…" if out.startswith("pct_") else out or "no token")
        tokens[name] = out
        return out

    def call(name, line, token=None):
        out, _ = bash(f"T='{token or tokens[name]}'\n{line}")
        return as_json(out) or {"raw": out}

    def short(line):
        match = re.search(r"(-XPOST )?https?://[^/ ]+(/\S*)", line)
        return ("POST " if match and match.group(1) else "GET ") + (match.group(2).strip("'") if match else line)

    def flow_url(name, answer, kind):
        flow = answer.get("flow") or {}
        tour.expect(answer.get("code") == "interaction_required" and flow.get("kind") == kind and flow.get("url"),
                    f"{name}: {short(blocks[name][1])}", f"{answer.get('status')} {answer.get('code')}, flow kind {flow.get('kind')}")
        return flow["url"]

    # Non-interactive destinations: the calls answer at once.
    register("demo")
    answer = call("demo", blocks["demo"][1])
    tour.expect(answer.get("user") == "alice", f"demo: {short(blocks['demo'][1])}", answer)
    answer = call("demo", blocks["demo"][2])
    tour.expect("sha256" in answer, f"demo: {short(blocks['demo'][2])} (CSRF token fetched by Parley)", answer)
    register("demo-client")
    answer = call("demo-client", blocks["demo-client"][1])
    tour.expect(answer.get("sub") == "parley-confidential", f"demo-client: {short(blocks['demo-client'][1])}", answer)
    register("demo-password")
    answer = call("demo-password", blocks["demo-password"][1])
    tour.expect(answer.get("sub") == "alice", f"demo-password: {short(blocks['demo-password'][1])}", answer)
    register("demo-cert")
    answer = call("demo-cert", blocks["demo-cert"][1])
    # nginx in front of the simulator verified the certificate Parley presented; the echo shows its headers.
    headers = answer.get("headers") or {}
    verified = {name: headers.get(name) for name in ["x-client-verify", "x-client-subject"]}
    tour.expect(verified == {"x-client-verify": ["SUCCESS"], "x-client-subject": ["CN=parley-demo-client"]},
                f"demo-cert: {short(blocks['demo-cert'][1])}", verified if headers else answer)
    out, status = bash(blocks["demo-cert"][2])
    tour.expect(status == 52 and not out, "demo-cert: nginx's HTTPS port without a certificate",
                f"closed unanswered (curl exit {status})")
    out, _ = bash("\n".join(blocks["Verified users"]))
    tour.expect('"verified":true' in out, "verified user: register with an identity token, GET /v1/registrations/me",
                re.search(r'"user":\{[^}]*\}', out).group(0) if '"user":{' in out else out)

    # Interactive destinations: 401 with a flow URL, each completed in Chromium.
    flows = {}
    for name, kind in [("demo-oauth", "oauth2"), ("demo-saml", "saml2"), ("demo-otp", "otp"), ("demo-form", "basic")]:
        register(name)
        flows[name] = flow_url(name, call(name, blocks[name][1]), kind)
    # A second demo-form flow, to fail on purpose, and a third for the German page.
    failing = flow_url("demo-form", call("demo-form", blocks["demo-form"][1], register("demo-form (to fail)", blocks["demo-form"][0])), "basic")
    german = flow_url("demo-form", call("demo-form", blocks["demo-form"][1], register("demo-form (German page)", blocks["demo-form"][0])), "basic")

    browser = chromium()
    try:
        # The check itself: a page with an image without a text alternative must be reported.
        browser.get("data:text/html,<!doctype html><html lang=en><title>control</title><main><img src=x.png></main></html>")
        bad, _ = serious(browser)
        tour.expect(any(v["id"] == "image-alt" for v in bad), "axe on a control page (an image without alt text)",
                    ", ".join(f"{v['impact']} {v['id']}" for v in bad) or "nothing found: axe is not checking")

        # /web without a flow's binding: Parley's refusal page.
        browser.get(base + "/web/demo-saml/")
        body = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "body[data-parley-error]")))
        tour.expect(True, "GET /web/demo-saml/ without a flow", f"refusal page ({body.get_attribute('data-parley-error')})")
        check_page(tour, browser, "web-refused", "body[data-parley-error]")

        # A flow link with a wrong secret: the invalid-link page.
        browser.get(flows["demo-form"].split("?", 1)[0] + "?k=not-the-secret")
        body = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "body[data-parley-error]")))
        tour.expect(True, "a flow URL with a wrong secret", f"error page ({body.get_attribute('data-parley-error')})")
        check_page(tour, browser, "invalid-link", "body[data-parley-error]")

        # demo-form: confirmation page, the form, a wrong password, the right one.
        browser.get(flows["demo-form"])
        kind = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "body[data-parley-flow-kind]"))).get_attribute("data-parley-flow-kind")
        tour.expect(browser.find_elements(By.CSS_SELECTOR, "form[data-parley-confirm]"), "demo-form: open the flow URL",
                    f"confirmation page ({kind} flow)")
        check_page(tour, browser, "confirmation", "form[data-parley-confirm]")
        confirm(browser, flows["demo-form"])
        wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "#username")))
        tour.expect(True, "demo-form: press Continue", "the credentials form")
        check_page(tour, browser, "basic-form", "#password")
        sign_in(browser, password="not-the-password", button="form button[type=submit], form [type=submit]")
        error = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "#error")))
        tour.expect(error.get_attribute("role") == "alert", "demo-form: sign in as alice with a wrong password",
                    f"the form again, with an error: {error.text}")
        check_page(tour, browser, "basic-form-error", "#error")
        sign_in(browser, button="form button[type=submit], form [type=submit]")
        status = done_status(browser, flows["demo-form"])
        tour.expect(status == "completed", "demo-form: sign in as alice / wonderland", f"done page: {status}")
        check_page(tour, browser, "signed-in", "body[data-parley-flow-status]")
        answer = call("demo-form", blocks["demo-form"][1])
        tour.expect(answer.get("user") == "alice", f"demo-form: {short(blocks['demo-form'][1])} again", answer)

        # Five wrong passwords end a flow as failed.
        confirm(browser, failing)
        for attempt in range(5):
            # The form's page is replaced by the next one; from the second attempt on the old page has
            # an #error too, so wait until it is gone before looking for the new one.
            page = browser.find_element(By.CSS_SELECTOR, "body") if attempt else None
            sign_in(browser, password=f"wrong-{attempt}", button="form button[type=submit], form [type=submit]")
            if attempt < 4:
                if page is not None:
                    wait(browser, replaced(page))
                wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "#error")))
        status = done_status(browser, failing)
        tour.expect(status == "failed", "demo-form (to fail): five wrong passwords", f"done page: {status}")
        check_page(tour, browser, "failed", "body[data-parley-flow-status]")

        # The walk-through's other interactive blocks, as it says.
        confirm(browser, flows["demo-oauth"])
        wait(browser, url_starts(simulator + "/oauth/authorize"))
        sign_in(browser)
        status = done_status(browser, flows["demo-oauth"])
        tour.expect(status == "completed", "demo-oauth: Continue, sign in at the simulator's authorization server", f"done page: {status}")
        answer = call("demo-oauth", blocks["demo-oauth"][1])
        tour.expect(answer.get("sub") == "alice", f"demo-oauth: {short(blocks['demo-oauth'][1])} again", answer)

        confirm(browser, flows["demo-saml"])
        wait(browser, url_starts(simulator + "/idp/"))
        sign_in(browser)
        status = done_status(browser, flows["demo-saml"])
        tour.expect(status == "completed", "demo-saml: Continue, sign in at the simulator's identity provider", f"done page: {status}")
        answer = call("demo-saml", blocks["demo-saml"][1])
        tour.expect(answer.get("via") == "saml", f"demo-saml: {short(blocks['demo-saml'][1])} again", answer)

        confirm(browser, flows["demo-otp"])
        wait(browser, url_starts(base + "/web/demo-otp/otp"))
        code = call("demo-otp", next(l for l in blocks["demo-otp"] if "/control/otp/code" in l)).get("code")
        tour.expect(code, "demo-otp: Continue; the passcode from /control/otp/code", "a passcode")
        wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "input[name=passcode]"))).send_keys(code)
        browser.find_element(By.CSS_SELECTOR, "#submit").click()
        status = done_status(browser, flows["demo-otp"])
        tour.expect(status == "completed", "demo-otp: type the passcode", f"done page: {status}")
        answer = call("demo-otp", blocks["demo-otp"][1])
        tour.expect(answer.get("via") == "basic-otp", f"demo-otp: {short(blocks['demo-otp'][1])} again", answer)
    finally:
        browser.quit()

    # The confirmation page in German (Chromium with --lang=de sends Accept-Language: de).
    browser = chromium(lang="de")
    try:
        browser.get(german)
        wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "form[data-parley-confirm]")))
        lang = browser.execute_script("return document.documentElement.lang")
        tour.step("the confirmation page with Accept-Language: de", f'<html lang="{lang}">', ok=lang == "de")
        if tour.screenshots:
            set_scheme(browser, "light")
            if save_full_page(browser, WIDTHS["phone"], os.path.join(tour.screenshots, "confirmation-phone-light-de.png")):
                tour.shots += 1
    finally:
        browser.quit()

    # Administration against the running demo.
    out, status = bash("\n".join(blocks["Administration"]))
    answers = [as_json(line) for line in out.splitlines()]
    listed, revoked, audit = (answers + [None, None, None])[:3]
    tour.expect(listed and len(listed.get("items", [])) == 1, "parley admin registrations --destination demo-password",
                f"{len((listed or {}).get('items', []))} registration, tokens: {[t.get('kind') for t in ((listed or {}).get('items') or [{}])[0].get('tokens', [])]}")
    tour.expect(revoked and revoked.get("revoked") == 1, "parley admin revoke --destination demo-password", revoked)
    tour.expect(audit and audit.get("items"), "parley admin audit --limit 5",
                ", ".join(item.get("action", "?") for item in (audit or {}).get("items", [])))
    answer = call("demo-password", blocks["demo-password"][1])
    tour.expect(answer.get("sub") == "alice", "demo-password: the call again (a new token by the password grant)", answer)

    # Key rotation: new key, restart, rekey, old key dropped, restart.
    out, status = bash("\n".join(blocks["Key rotation"]), timeout=240)
    gone = re.search(r"no longer in use: (\S+)", out)
    resealed = re.search(r"resealed: [^\n]*", out)
    tour.expect(status == 0 and gone, "key rotation: new key first, Parley restarted, parley rekey, old key dropped",
                f"{resealed.group(0) if resealed else out.strip()[-200:]}; no longer in use: {gone.group(1) if gone else '?'}")
    for name in ["demo", "demo-form", "demo-password", "demo-oauth"]:
        answer = call(name, blocks[name][1])
        tour.expect(answer.get("user") == "alice" or answer.get("sub") == "alice",
                    f"{name}: the call again, after the rotation (only the new key in the ring)", answer)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--screenshots", metavar="DIR", help="write the page screenshots there")
    parser.add_argument("--demo-dir", metavar="DIR", help="the demo folder (default: a new temporary folder, removed afterwards)")
    arguments = parser.parse_args()
    if arguments.screenshots:
        os.makedirs(arguments.screenshots, exist_ok=True)
    tour = Tour(arguments.screenshots)

    env = dict(os.environ)
    env.setdefault("SE_OFFLINE", "true")
    own_dir = arguments.demo_dir is None
    demo_dir = arguments.demo_dir or tempfile.mkdtemp(prefix="parley-tour-")
    env["PARLEY_DEMO_DIR"] = demo_dir
    # Free ports unless set: the tour runs beside a `make run`.
    ports = set()

    def port():
        while True:
            p = free_port()
            if p not in ports:
                ports.add(p)
                return str(p)

    env.setdefault("PARLEY_LISTEN", "127.0.0.1:" + port())
    for variable in ["PARLEY_DEMO_SIMULATOR_PORT", "PARLEY_DEMO_TLS_PORT", "PARLEY_DEMO_PG_PORT"]:
        env.setdefault(variable, port())
    for variable in ["PARLEY_DESTINATIONS", "PARLEY_ENCRYPTION_KEYS", "PARLEY_ADMIN_TOKENS", "PARLEY_DATABASE_URL", "PARLEY_PUBLIC_URL"]:
        env.pop(variable, None)  # the demo's own, so every block runs as printed
    base = "http://" + env["PARLEY_LISTEN"]
    simulator = "http://127.0.0.1:" + env["PARLEY_DEMO_SIMULATOR_PORT"]

    started = time.monotonic()
    built = "PARLEY_BINARY" in env and "PARLEY_SIMULATOR_BINARY" in env
    demo = Demo(env)
    try:
        ready = demo.wait_ready(120 if built else 3600)
        tour.expect(ready, "start the demo (scripts/run.sh)",
                    f"ready on {base} in {time.monotonic() - started:.1f} s" if ready else demo.output[-1500:])
        run(tour, demo, base, simulator)
    except StepFailed:
        pass
    except Exception as error:  # a browser or subprocess failure is a failed step, with what it said
        tour.step("the tour", f"{type(error).__name__}: {error}", ok=False)
    finally:
        stopped = demo.stop()
        tour.step("stop the demo (SIGTERM)", "Parley, the simulator and PostgreSQL stopped" if stopped else "a process was left running",
                  ok=stopped)
        if own_dir:
            shutil.rmtree(demo_dir, ignore_errors=True)
    if tour.failed and not os.environ.get("TOUR_VERBOSE"):
        print("the demo's output (TOUR_VERBOSE=1 shows it as it comes):\n" + demo.output[-4000:], file=sys.stderr)
    if tour.screenshots:
        print(f"screenshots: {tour.shots} in {tour.screenshots}")
    print("tour checked: " + " ".join(tour.checked))
    print(f"tour: {tour.number} steps, {tour.failed} failed ({time.monotonic() - started:.0f} s)")
    return 1 if tour.failed else 0


if __name__ == "__main__":
    sys.exit(main())
