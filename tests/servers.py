"""Processes the end-to-end tests start (vLLM servers, the panel, its web server): a free port, the live
processes of a session or process group, and stopping a group with nothing left behind.

Imported as ``servers`` (pytest puts ``tests/`` on ``sys.path`` for the test packages below it).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Optional


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def live_pids(*, session: Optional[int] = None, pgid: Optional[int] = None) -> list[int]:
    """Processes of session ``session`` or process group ``pgid`` that still run (an exited, unreaped one
    is not counted)."""
    field = 3 if session is not None else 2  # after the state: ppid, pgrp, session
    want = session if session is not None else pgid
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z" and int(fields[field]) == want:
            out.append(int(d.name))
    return out


def stop_group(proc: subprocess.Popen, wait_s: float = 60) -> None:
    """SIGTERM, then SIGKILL, to the process group a test started (``start_new_session=True``); checks that
    none of it is left running."""
    for sig, limit in ((signal.SIGTERM, wait_s), (signal.SIGKILL, 30)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        end = time.monotonic() + limit
        while time.monotonic() < end and (proc.poll() is None or live_pids(pgid=proc.pid)):
            time.sleep(0.3)
        if proc.poll() is not None and not live_pids(pgid=proc.pid):
            break
    assert not live_pids(pgid=proc.pid), f"processes left running: {live_pids(pgid=proc.pid)}"
