"""A vLLM server seen from the control panel: one it started in the background (its own process group, its output
in a log file) or one it attaches to by URL. A poll reads ``GET /health``, ``GET /r9k/status`` (through
``cmd_status.fetch``) and the log's last lines. No Textual here."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional
from ...registry import envvars, fileio

LOG_TAIL_BYTES = 64 * 1024


def url_of(argv: list[str]) -> str:
    """The base URL a ``vllm serve`` argument list listens on (default: port 8000, read on the loopback)."""
    found = {"--host": "127.0.0.1", "--port": "8000"}
    for i, a in enumerate(argv):
        flag, eq, val = a.partition("=")
        if flag in found and (eq or i + 1 < len(argv)):
            found[flag] = val if eq else argv[i + 1]
    host = "127.0.0.1" if found["--host"] in ("0.0.0.0", "::", "") else found["--host"]
    return f"http://{host}:{found['--port']}"


#: vLLM's access-log lines of the screen's own polls: every 1.5 s they would push everything else out.
OWN_POLLS = ('"GET /health HTTP', '"GET /r9k/status HTTP', '"GET /r9k/status?paths=1 HTTP')


def log_tail(path: Optional[Path], lines: int = 12) -> list[str]:
    """The last ``lines`` lines of a log file (a progress bar's last state), without the screen's own polls."""
    if path is None:
        return []
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - LOG_TAIL_BYTES))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    out = [ln.rsplit("\r", 1)[-1].rstrip() for ln in data.splitlines()]
    return [ln for ln in out if ln.strip() and not any(p in ln for p in OWN_POLLS)][-lines:]


@dataclass
class Poll:
    """One look at the server."""
    state: str  # "starting", "healthy", "unhealthy", "exiting", "exited", "stopping", "stopped", "unreachable"
    healthy: bool = False
    status: Optional[dict] = None
    status_error: Optional[str] = None
    returncode: Optional[int] = None
    log: list[str] = field(default_factory=list)
    time: float = field(default_factory=time.time)


class Server:
    """``Server.start(plan, log)`` runs a launch plan in the background; ``Server.attach(url)`` follows
    a server started elsewhere (stop and restart are then not offered)."""

    def __init__(self, url: str, plan=None, log_path: Optional[Path] = None) -> None:
        self.url = url.rstrip("/")
        self.plan = plan
        self.log_path = log_path
        self.proc: Optional[subprocess.Popen] = None
        self.started_at: Optional[float] = None
        self.stopped = False

    @classmethod
    def attach(cls, url: str) -> "Server":
        return cls(url)

    @classmethod
    def start(cls, plan, log_path: Path) -> "Server":
        srv = cls(url_of(plan.argv), plan=plan, log_path=log_path)
        srv._spawn()
        return srv

    @property
    def owned(self) -> bool:
        """Started by this panel (so it can stop and restart it)."""
        return self.plan is not None

    def _spawn(self) -> None:
        from ..launch import process_env

        self.log_path.parent.mkdir(parents=True, exist_ok=True)

        env = process_env(self.plan)
        # process_env names this pid as the launch's first vLLM process (launch exec's into it); a child has
        # another pid: let the API server claim it, or it takes itself for a helper and writes no status
        env.pop(envvars.LAUNCH_PID.name, None)
        env.pop(envvars.LAUNCH_HASH.name, None)
        env.setdefault("PYTHONUNBUFFERED", "1")
        with fileio.open_for_writing(self.log_path, append=True, what="server log") as log:
            log.write(f"\n# r9kctl tui: {self.plan.display().splitlines()[-1]}\n")
            log.flush()
            self.proc = subprocess.Popen(self.plan.argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.started_at = time.time()
        self.stopped = False

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> Optional[int]:
        """SIGTERM to the whole process group, SIGKILL after ``timeout`` seconds; returns the exit code."""
        if self.proc is None:
            return None
        self.stopped = True
        for sig, wait_s in ((signal.SIGTERM, timeout), (signal.SIGKILL, 30.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            end = time.monotonic() + wait_s
            while time.monotonic() < end:
                if self.proc.poll() is not None and not _group_alive(self.proc.pid):
                    return self.proc.returncode
                time.sleep(0.2)
        return self.proc.poll()

    def restart(self) -> None:
        if not self.owned:
            raise RuntimeError("a server started elsewhere cannot be restarted from here")
        self.stop()
        self._spawn()

    def poll(self, timeout: float = 3.0) -> Poll:
        log = log_tail(self.log_path)
        if self.proc is not None and self.proc.poll() is not None:
            if _group_alive(self.proc.pid):  # vLLM's engine core and workers outlive its API server a while
                return Poll("stopping" if self.stopped else "exiting", returncode=self.proc.returncode, log=log)
            return Poll("stopped" if self.stopped else "exited", returncode=self.proc.returncode, log=log)
        healthy = False
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=timeout) as r:  # noqa: S310 - the user's URL
                healthy = r.status == 200
        except urllib.error.HTTPError:
            healthy = False
        except (OSError, ValueError):
            return Poll("starting" if self.proc is not None else "unreachable", log=log)
        status, err = None, None
        try:
            from ..cmd_status import fetch

            status = fetch(self.url, timeout)
        except urllib.error.HTTPError as exc:
            err = (f"{self.url}/r9k/status: HTTP {exc.code} (is the plugin's route on? VLLM_PLUGINS must name r9k)"
                   if exc.code == 404 else f"{self.url}/r9k/status: HTTP {exc.code}")
        except (OSError, ValueError) as exc:
            err = f"{self.url}/r9k/status: {exc}"
        return Poll("healthy" if healthy else "unhealthy", healthy=healthy, status=status, status_error=err, log=log)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs, a zombie not counted (without ``/proc``: ``kill(-pgid, 0)``)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return fileio.pid_alive(-pgid)
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[0] != "Z" and fields[2] == str(pgid):  # state, ppid, pgrp
            return True
    return False
