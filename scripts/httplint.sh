#!/usr/bin/env bash
# Lints captured HTTP answers with httplint (REDbot's linter, PyPI):
#
#   scripts/httplint.sh <allow-list> <capture-directory>
#
# The directory holds pairs `<kind>.request` (the raw request head that was sent) and
# `<kind>.response` (the raw answer, byte for byte). Every note httplint rates WARN or BAD is a
# finding; a finding is accepted only when the allow-list has a line `<kind-glob> <NoteName>`
# (`#` starts a comment; every line says why the finding is deliberate). Prints each answer's
# findings and exits 1 when any finding is not allowed, or when an allow-list line matched
# nothing (a stale entry). Installs the versions pinned in scripts/httplint-requirements.txt
# into .local/httplint on first use (and whenever the pins change). Environment:
#   PYTHON   the interpreter that creates the venv (default python3; on Debian python3-venv)
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 <allow-list> <capture-directory>" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
requirements="$root/scripts/httplint-requirements.txt"
# venv: .local/httplint with exactly these pins
source "$root/scripts/pinned-venv.sh"
pinned_venv httplint "$requirements"

"$venv/bin/python" - "$1" "$2" <<'PY'
import fnmatch, os, sys
from argparse import Namespace
from httplint.cli.http_parser import HttpCliParser, modes
from httplint.message import HttpRequestLinter
from httplint.note import levels

allow_path, directory = sys.argv[1], sys.argv[2]
allowed = []  # (kind glob, note name, line number)
with open(allow_path, encoding="utf-8") as f:
    for number, line in enumerate(f, 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 2:
            sys.exit(f"httplint.sh: {allow_path}:{number}: want '<kind-glob> <NoteName>  # why'")
        allowed.append((fields[0], fields[1], number))

class Capture(HttpCliParser):
    """Parses one raw answer and keeps its linter's notes instead of printing them. `now`
    is when the answer was captured (its file's time), for the Date and freshness checks."""
    def __init__(self, request, now):
        super().__init__(Namespace(mode=modes.RESPONSE), now)
        self.request = request
        self.notes = None
    def input_start(self, *args):
        result = super().input_start(*args)
        self.linter.request = self.request
        if self.request is not None and self.request.method == "HEAD":
            self.linter.is_head_response = True
        return result
    def input_end(self, trailers):
        self.linter.finish_content(True, trailers)
        self.notes = list(self.linter.notes)

def request_linter(raw):
    head = raw.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    method, target, version = head[0].split(b" ", 2)
    linter = HttpRequestLinter()
    linter.process_request_topline(method, b"http://parley.test" + target, version)
    linter.process_headers([tuple(part.strip() for part in line.split(b":", 1)) for line in head[1:] if b":" in line])
    linter.finish_content(True, [])
    return linter

def flatten(notes):
    for note in notes:
        yield note
        yield from flatten(note.subnotes)

used = set()
failed = False
kinds = sorted(name[: -len(".response")] for name in os.listdir(directory) if name.endswith(".response"))
if not kinds:
    sys.exit("httplint.sh: no captured answers")
for kind in kinds:
    with open(os.path.join(directory, kind + ".response"), "rb") as f:
        raw = f.read()
    request = None
    request_path = os.path.join(directory, kind + ".request")
    if os.path.exists(request_path):
        with open(request_path, "rb") as f:
            request = request_linter(f.read())
    parser = Capture(request, os.path.getmtime(os.path.join(directory, kind + ".response")))
    parser.handle_input(raw)
    if parser.notes is None:  # answers framed by the connection's close end here
        parser.input_end([])
    status = raw.split(b"\r\n", 1)[0].decode("latin-1")
    findings = []
    for note in flatten(parser.notes or []):
        if note.level not in (levels.WARN, levels.BAD):
            continue
        name = type(note).__name__
        match = next((a for a in allowed if fnmatch.fnmatchcase(kind, a[0]) and a[1] == name), None)
        if match:
            used.add(match[2])
        else:
            failed = True
        findings.append(f"    {'allowed' if match else 'FINDING'} [{note.level.name}] {name}: {note.summary}")
    print(f"{kind}: {status}: {len(findings)} finding(s)")
    for line in findings:
        print(line)
for glob, name, number in allowed:
    if number not in used:
        failed = True
        print(f"stale allow-list line {number}: {glob} {name} matched no finding")
print(f"httplint: {len(kinds)} answers, {'FAILED' if failed else 'passed'}")
sys.exit(1 if failed else 0)
PY
