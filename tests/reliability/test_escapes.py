"""The one output rule for data (issue 37): no string from a file, the environment or the network reaches the
terminal with a control or bidi character in it. A seeded generator (no extra dependency) puts terminal
escapes (OSC 52 clipboard writes, OSC 0 titles, CSI 2J, C1 CSI, RLO, CR, backspace) into every data field a
user controls: a profile's description, ``model_path``, ``serve_args``, ``[env]`` values, a knob value and
an unknown knob key, a variant's summary, a status file and a server's ``/r9k/status`` answer; every
command that shows them is run and its stdout and stderr hold none (newline and tab are the only controls
allowed). A real pty check runs ``r9kctl`` on a terminal: what reaches the terminal holds no OSC or CSI
sequence other than the SGR colours rich draws with."""
from __future__ import annotations

import http.server
import json
import os
import random
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from .harness import copy_registry, run_main

PAYLOADS = ["\x1b]52;c;cHduZWQ=\x07", "\x1b]0;pwned\x07", "\x1b[2J", "\x9b2J", "\u202e", "\u2066", "\r", "\x08",
            "\x1b[31m", "\x1bP+q\x1b\\", "\x00"[:0] + "\x7f", "\x85"]
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def payload(rng: random.Random) -> str:
    return "".join(rng.choice(PAYLOADS) + rng.choice(["x", "evil", " ", "é"]) for _ in range(rng.randint(1, 4)))


def toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string with \uXXXX escapes is a TOML basic string


def make_tree(root: Path, rng: random.Random) -> Path:
    reg = copy_registry(root / "registry")
    att = reg / "variants" / "attention.toml"
    text = att.read_text()
    att.write_text(text.replace('summary = "Paged attention', f'summary = {toml_str(payload(rng))[:-1]}Paged attention', 1))
    p = root / "p"
    p.mkdir()
    (p / "evil.toml").write_text(
        f"description = {toml_str(payload(rng))}\nextends = \"cpu-smoke\"\nmodel_path = {toml_str('/m/' + payload(rng))}\n"
        f"serve_args = [\"--served-model-name\", {toml_str('n' + payload(rng))}]\n\n"
        f"[env]\nMY_VAR = {toml_str(payload(rng))}\n")
    (p / "badknob.toml").write_text(
        f"description = \"bad\"\nextends = \"stock\"\n\n[knobs]\nR9K_ROUTER = {toml_str(payload(rng))}\n"
        f"{toml_str('R9K_' + payload(rng))} = \"1\"\n")
    return root


class _Status(http.server.BaseHTTPRequestHandler):
    body = b"{}"

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *a):
        pass


def _status_answer(rng: random.Random) -> dict:
    return {"schema": 1, "profile": payload(rng), "hash": "abc" + payload(rng), "tp": 1, "model": payload(rng),
            "values": {"R9K_ROUTER": payload(rng)}, "in_use": {"router_gemm": payload(rng)},
            "non_stock": [{"variant": "router_gemm", "knob": "R9K_ROUTER", "value": payload(rng), "stock": "0",
                           "layer": "profile", "source": payload(rng), "implementation": payload(rng)}],
            "processes": {}, "agree": True, "server": payload(rng)}


def _pty_read(master: int) -> bytes:
    """One read of a pseudo-terminal's master side; ``b""`` once the other side is closed (Linux raises EIO)."""
    try:
        return os.read(master, 65536)
    except OSError:
        return b""


@pytest.mark.parametrize("seed", range(3))
def test_no_command_prints_a_control_character_of_data(tmp_path, seed):
    rng = random.Random(seed)
    root = make_tree(tmp_path, rng)
    base = ["--registry", str(root / "registry"), "--profiles-dir", str(root / "p")]
    _Status.body = json.dumps(_status_answer(rng)).encode()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Status)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_port}"
    status_file = tmp_path / "s.json"
    status_file.write_text(json.dumps({**_status_answer(rng), "processes": {}}))
    commands = [["profiles"], ["show", "paged_attention"], ["list"], ["list", "--area", "attention"],
                ["resolve", "-p", "evil"], ["resolve", "-p", "evil", "--format", "env"],
                ["launch", "-p", "evil", "--dry-run"], ["validate", "-p", "evil"], ["validate", "-p", "badknob"],
                ["resolve", "-p", "badknob"], ["diff", "evil", "cpu-smoke"], ["status", "--url", url],
                ["status", "--file", str(status_file)], ["status", "--url", "http://127.0.0.1:9/\r\nforged"],
                ["show", payload(rng)], ["resolve", "-p", payload(rng)], ["resolve", "-p", "evil", "--set",
                                                                           f"R9K_ROUTER={payload(rng)}"]]
    try:
        for argv in commands:
            code, out, err = run_main(base + argv)
            assert "Traceback" not in out + err, (argv, err[-2000:])
            bad = [(m.group(0), (out + err)[max(0, m.start() - 30):m.end() + 10])
                   for m in UNSAFE.finditer(out + err)]
            assert not bad, f"r9kctl {' '.join(argv)!r} (exit {code}) printed control characters: {bad[:3]}"
    finally:
        srv.shutdown()


def test_on_a_real_pty_only_sgr_reaches_the_terminal(tmp_path):
    """``r9kctl profiles`` and ``show`` on a pseudo-terminal (rich's tables): the bytes the terminal receives
    carry SGR colours and nothing else of ESC (no OSC 52, no OSC 0, no CSI 2J), no C1 and no RLO."""
    pty = pytest.importorskip("pty")
    root = make_tree(tmp_path, random.Random(7))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "R9K_PLAIN")}
    env.update({"COLUMNS": "200", "TERM": "xterm-256color"})
    for argv in (["profiles"], ["show", "paged_attention"], ["validate", "-p", "badknob"],
                 ["launch", "-p", "evil", "--dry-run"]):
        cmd = [sys.executable, "-m", "r9k.r9kctl.cli", "--registry", str(root / "registry"),
               "--profiles-dir", str(root / "p"), *argv]
        master, slave = pty.openpty()
        proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
        os.close(slave)
        data = b""
        while chunk := _pty_read(master):
            data += chunk
        proc.wait(timeout=120)
        os.close(master)
        text = data.decode("utf-8", errors="replace")
        assert "evil" in text or "Paged" in text or "R9K_" in text, text[-2000:]
        rest = re.sub(r"\x1b\[[0-9;]*m", "", text).replace("\r\n", "\n")  # the pty turns \n into \r\n
        bad = [(m.group(0), rest[max(0, m.start() - 30):m.end() + 10]) for m in UNSAFE.finditer(rest)]
        assert not bad, f"{argv}: {bad[:3]}"


def test_the_panel_on_a_real_pty_draws_no_control_of_the_data(tmp_path):
    """``r9kctl tui -p evil`` (the description, model path, serve_args and [env] values above, a variant's
    summary) on a pseudo-terminal: Textual writes a segment's text as it is, so without the panel's filter the
    description's OSC 52 writes the clipboard. The terminal receives none of the payloads' sequences."""
    pty = pytest.importorskip("pty")
    import select
    import time

    root = make_tree(tmp_path, random.Random(7))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "R9K_PLAIN")}
    env.update({"COLUMNS": "160", "LINES": "45", "TERM": "xterm-256color", "R9K_CACHE_DIR": str(tmp_path / "c")})
    cmd = [sys.executable, "-m", "r9k.r9kctl.cli", "--registry", str(root / "registry"),
           "--profiles-dir", str(root / "p"), "tui", "-p", "evil"]
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True,
                            start_new_session=True)
    os.close(slave)
    data, t0, quit_sent = b"", time.monotonic(), False
    try:
        while time.monotonic() - t0 < 90:
            if not quit_sent and b"evil" in data and time.monotonic() - t0 > 4:
                os.write(master, b"\x11")  # ctrl+q
                quit_sent = True
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                if not (chunk := _pty_read(master)):
                    break
                data += chunk
            elif proc.poll() is not None:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        os.close(master)
    text = data.decode("utf-8", errors="replace")
    assert quit_sent, text[-2000:]
    for bad in ("\x1b]52;", "\x1b]0;pwned", "\u202e", "\u2066", "\x9b", "\x85", "\x1bP+q"):
        assert bad not in text, (bad, text[max(0, text.find(bad) - 60):text.find(bad) + 20])
