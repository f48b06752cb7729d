"""Processes the end-to-end tests start (vLLM servers, the panel, its web server): a free port, the live
processes of a session or process group, stopping a group with nothing left behind, and a JSON answer for
the stand-in servers.

Imported as ``servers`` (pytest puts ``tests/`` on ``sys.path`` for the test packages below it).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import json
import urllib.request
from pathlib import Path
from typing import Optional, Sequence

import pytest

START_TIMEOUT_S = 600  # a cold start compiles the model; generous for a loaded 2-core CI machine
PY = sys.executable
R9KCTL = [PY, "-m", "r9k.r9kctl.cli"]
#: Every vLLM server a test starts lets the OS place its threads: with vLLM's default (``auto``) a TP 1 worker
#: pins itself to core 0 and reserves the other core, so two servers of the two xdist workers both ran on core
#: 0 while core 1 idled (vmstat: 18 runnable, 45% idle; ``taskset -p``: affinity 0). As a user would on a small
#: machine, through the declared knob's environment variable (``cpu_omp_bind``; it is part of the launched set).
CPU_BIND = {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def _ports():
    """This process's ports: below the kernel's ephemeral range (``bind(("", 0))`` and outgoing connections take
    theirs from that range, so no other process, not vLLM's own ZMQ and torch.distributed sockets, nor another
    xdist worker's server, can be handed one of these between the check here and the server's bind: CI saw
    ``Address already in use`` when tests took theirs from that range), a block of its own per xdist worker."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    n = int(worker[2:]) if worker[2:].isdigit() else 0
    block = max(64, (low - 10000) // 16)
    start = 10000 + (n % 16) * block
    yield from range(start, min(start + block, low))


_PORTS = _ports()
_HELD: list[socket.socket] = []  # one bound, never listening socket per port handed out, for the process's life


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on, from :func:`_ports`: each one once in a test session,
    and held: a socket bound to it with ``SO_REUSEADDR`` (not listening) stays open until this process ends.
    A process binding the port as vLLM's API server, torch's TCPStore and Python's HTTP servers do (with
    ``SO_REUSEADDR``, then listening) gets it; any other bind of it is refused, so nothing else can take it
    between this check and the server's bind (CI saw ``Address already in use`` there, twice)."""
    for port in _PORTS:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        _HELD.append(s)
        return port
    raise RuntimeError("no free port left below the ephemeral range")


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


#: lines of each server's log that a failing e2e test prints (tests/conftest.py's report hook)
LOG_TAIL_LINES = 60


class Server:
    """A process tree started in its own session, with its output in a log file.

    Every server is recorded in :attr:`started`; when a test fails, tests/conftest.py adds the last
    :data:`LOG_TAIL_LINES` lines of the log of each server that test started to its failure report."""

    started: list["Server"] = []

    def __init__(self, argv: list[str], env: dict, log: Path):
        Server.started.append(self)
        self.log = log
        self.fh = open(log, "wb")
        self.proc = subprocess.Popen(argv, env=env, stdout=self.fh, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=str(log.parent))

    def text(self) -> str:
        if not self.fh.closed:
            self.fh.flush()
        return self.log.read_text(errors="replace")

    def tail(self, n: int = LOG_TAIL_LINES) -> str:
        """The last ``n`` lines of the server's log ("" when it cannot be read)."""
        try:
            return "\n".join(self.text().splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        sid = self.proc.pid
        for sig, wait_s in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
            try:
                os.killpg(sid, sig)
            except ProcessLookupError:
                pass
            deadline = time.time() + wait_s
            while time.time() < deadline:
                if self.proc.poll() is not None and not live_pids(session=sid):
                    break
                time.sleep(0.5)
            else:
                continue
            break
        self.proc.wait(timeout=30)
        self.fh.close()
        left = live_pids(session=sid)
        assert not left, f"processes left running: {left}"


def wait_healthy(srv: Server, port: int) -> None:
    deadline = time.time() + START_TIMEOUT_S
    while time.time() < deadline:
        if srv.proc.poll() is not None:
            pytest.fail(f"server exited with {srv.proc.returncode} before /health:\n{srv.text()[-6000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(2)
    pytest.fail(f"no /health within {START_TIMEOUT_S} s:\n{srv.text()[-6000:]}")


def vllm_cache(tmp: Path) -> str:
    """vLLM's cache folder for the launches of this test session: pytest's base folder of the session (one per
    xdist worker), beside the tests' own folders. vLLM keys its torch.compile artifacts by its config hash,
    which covers the r9k carrier in --additional-config, so a launch of a set another test already compiled
    loads the compiled graph (about half of a cpu-smoke start on 2 cores) and a different set compiles anew
    (tests/plugin/test_e2e_adapters.py checks the keys differ)."""
    return str(Path(tmp).parent / "vllm-cache")


def shared_models(tmp: Path) -> None:
    """The tiny models of this worker's launches built once: the test's cache folder's ``models/`` is a link to
    one folder per xdist worker, and ``r9kctl launch`` hands vLLM the model's resolved path, so two starts of one
    set in two tests have one model path, which vLLM hashes into its compile-cache key: the second start finds
    the first one's compiled graph (and its Inductor kernels) instead of tracing and compiling again."""
    models = Path(tmp).parent / "r9k-models"
    models.mkdir(exist_ok=True)
    link = Path(tmp) / "r9k-cache" / "models"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.symlink_to(models, target_is_directory=True)


def base_env(tmp: Path) -> dict:
    shared_models(tmp)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("R9K_", "_R9K_", "VLLM_"))}
    env.pop("TRITON_INTERPRET", None)  # the profile sets it; the test must not
    env.update({
        "R9K_CACHE_DIR": str(tmp / "r9k-cache"),  # tiny model, manifests, status files
        "VLLM_CACHE_ROOT": vllm_cache(tmp),
        "VLLM_PLUGINS": "r9k",  # general plugin, and its /r9k/status route where installed
        "PYTHONUNBUFFERED": "1",
        **CPU_BIND,
    })
    return env


def launch_profile(env: dict, tmp: Path, profile: str, name: str, *sets: str, flags: Sequence[str] = (),
                   vllm_args: Sequence[str] = ()) -> tuple[Server, int]:
    """``r9kctl launch --profile P [flags] [--set ...] -- --port N --host 127.0.0.1 [vllm_args]``, as a user
    starts it, on a free port; the server's log is ``tmp/<name>.log``."""
    port = free_port()
    argv = R9KCTL + ["launch", "--profile", profile, *flags]
    for s in sets:
        argv += ["--set", s]
    argv += ["--", "--port", str(port), "--host", "127.0.0.1", *vllm_args]
    return Server(argv, env, tmp / f"{name}.log"), port


def launch_cpu_smoke(env: dict, tmp: Path, name: str, *sets: str) -> tuple[Server, int]:
    """The cpu-smoke profile launched as :func:`launch_profile` does."""
    return launch_profile(env, tmp, "cpu-smoke", name, *sets)


class SharedServer:
    """The cpu-smoke server (the shipped profile's own set, as ``r9kctl launch --profile cpu-smoke`` starts it)
    that several e2e tests use in turn instead of starting one each: every start costs a vLLM launch (three
    processes importing vLLM, a torch.compile trace: about 80 s of one core), and these tests only read what a
    running server reports or serves. The tests that use it carry ``xdist_group(GROUP)``, so that one xdist
    worker runs them one after another (``--dist loadgroup``); tests/conftest.py stops the server after the
    last of them. A test that needs a fresh server, another set or a stopped one starts its own."""

    GROUP = "cpu-smoke-server"
    _current: Optional["SharedServer"] = None

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.env = base_env(tmp)
        self.srv, self.port = launch_cpu_smoke(self.env, tmp, "shared-cpu-smoke")
        self.users: list[str] = []  # the tests that used it, in order (a failing one's report names them)
        try:
            wait_healthy(self.srv, self.port)
        except BaseException:
            self.srv.stop()
            raise

    @classmethod
    def get(cls, tmp_factory, user: str) -> "SharedServer":
        cur = cls._current
        if cur is None or cur.srv.proc.poll() is not None:
            if cur is not None:
                cur.srv.stop()
            cur = cls._current = cls(tmp_factory.mktemp("shared-cpu-smoke"))
        cur.users.append(user)
        return cur

    @classmethod
    def stop_current(cls) -> None:
        cur, cls._current = cls._current, None
        if cur is not None:
            cur.srv.stop()  # asserts that none of its processes is left


def send_json(h, obj, status: int = 200) -> None:
    """Answer one request of a ``BaseHTTPRequestHandler`` ``h`` with ``obj`` as JSON."""
    body = json.dumps(obj).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)
