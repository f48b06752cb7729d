"""Benchmark of the control panel (not a test): first-frame time and toggle re-validate + redraw time.

    python -m r9k.bench.bench_tui [--size 120x36] [--runs 5] [--toggles 60] [--profile tp2-default]
                                       [--user-cache] [--phases]

Each run is a fresh interpreter on a pseudo-terminal (the real terminal driver): the first frame and the
validated frame (from the child's first line and from the parent's fork), Textual's hello world started the
same way between the panel's runs (the yardstick), ``--toggles`` toggles of hc_fp8_decode (key action to the
end of the refresh that shows it) and the core's part alone (``Session.cycle``). notes/tui.md, "Speed".
"""
from __future__ import annotations

import time

T0 = time.perf_counter()  # first thing: the child's "process has started running our code" mark

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

from ..registry import envvars, fileio  # noqa: E402


def _stats(xs: list[float]) -> dict:
    xs = sorted(xs)
    if not xs:
        return {}
    p90 = xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]
    return {"n": len(xs), "median": round(statistics.median(xs), 2), "p90": round(p90, 2), "max": round(xs[-1], 2)}


# ---------------------------------------------------------------------------------------------- child

def child(out: str, profile: str, toggles: int) -> None:
    from ..r9kctl.tui.app import R9kApp

    result: dict = {"import_s": time.perf_counter() - T0}

    class BenchApp(R9kApp):
        def first_frame_painted(self) -> None:
            if self.first_frame_at is None:  # *_at: CLOCK_MONOTONIC, comparable with the parent's; CPU since start
                super().first_frame_painted()
                result.update(first_frame_s=self.first_frame_at - T0, first_frame_at=self.first_frame_at,
                              first_frame_cpu_s=time.process_time())

        def validated_frame_painted(self) -> None:
            if self.validated_at is None:  # the panel with its validation result: the toggles start from here
                super().validated_frame_painted()
                result.update(validated_s=self.validated_at - T0, validated_at=self.validated_at)
                self.call_later(self._start_toggles)

        def _start_toggles(self) -> None:
            self.screen.jump_to("hc_fp8_decode")
            self._times: list[float] = []
            self._cpu: list[float] = []
            self._toggle_next()
            self.set_interval(0.01, self._poll)

        def _toggle_next(self) -> None:
            self.screen.last_toggle_ms = None
            self.screen.action_toggle()

        def _poll(self) -> None:
            ms = self.screen.last_toggle_ms
            if ms is None:
                return
            self._times.append(ms)
            self._cpu.append(self.screen.last_toggle_cpu_ms)
            if len(self._times) >= toggles:
                result.update(toggle_ms=self._times, toggle_cpu_ms=self._cpu)
                self.exit()
                return
            self._toggle_next()

    app = BenchApp(profile=profile)
    app.run()
    # the core's part alone, on the same session
    s = app.session
    core = []
    for _ in range(toggles):
        t = time.perf_counter()
        s.cycle("hc_fp8_decode")
        core.append((time.perf_counter() - t) * 1000.0)
    result.update(core_ms=core, variants=len(s.reg.variants), kv_tokens=s.budget.kv_tokens if s.budget else None)
    with fileio.open_for_writing(out) as f:
        json.dump(result, f)


def hello_child(out: str) -> None:
    """Textual's hello world, started the same way (the yardstick of the panel's first frame)."""
    from textual.app import App
    from textual.widgets import Static

    result: dict = {}

    class Hello(App):
        def compose(self):
            yield Static("Hello, World!")

        def on_mount(self) -> None:
            self.call_after_refresh(self._painted)

        def _painted(self) -> None:
            t = time.perf_counter()
            result.update(first_frame_s=t - T0, first_frame_at=t, first_frame_cpu_s=time.process_time())
            self.exit()

    Hello().run()
    with fileio.open_for_writing(out) as f:
        json.dump(result, f)


def phases_child(profile: str) -> None:
    """CPU time of each start-up phase in this fresh interpreter (headless)."""
    import asyncio

    P = time.process_time
    out = {"interpreter": P()}
    c = P()
    import textual.app  # noqa: F401
    from textual.widgets import Footer, Input, Static  # noqa: F401

    out["textual import"], c = P() - c, P()
    import r9k.registry.validate  # noqa: F401

    out["registry import"], c = P() - c, P()
    from ..r9kctl.tui import main_screen, session  # noqa: F401
    from ..r9kctl.tui.app import R9kApp

    out["app modules import"], c = P() - c, P()
    opened = session.Session.open.__func__

    def timed_open(cls, *a, **k):
        t = P()
        r = opened(cls, *a, **k)
        out["Session.open"] = P() - t
        return r

    session.Session.open = classmethod(timed_open)

    async def run() -> None:
        app = R9kApp(profile=profile)
        async with app.run_test(size=(120, 36)):
            while app.first_frame_at is None:
                await asyncio.sleep(0.001)

    asyncio.run(run())
    out["compose, styles, first paint"] = P() - c - out["Session.open"]
    out["total"] = P()
    print(json.dumps({k: round(v * 1000.0, 1) for k, v in out.items()}))


# ---------------------------------------------------------------------------------------------- parent

def run_in_pty(size: tuple[int, int], profile: str, toggles: int, hello: bool = False) -> dict:
    import fcntl
    import pty
    import struct
    import tempfile
    import termios

    fd_out, out = tempfile.mkstemp(suffix=".json")
    os.close(fd_out)
    t_fork = time.perf_counter()
    pid, master = pty.fork()
    if pid == 0:  # child: size the terminal, then a fresh interpreter
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
        what = ["--hello-child", out] if hello else ["--child", out, "--profile", profile, "--toggles", str(toggles)]
        os.execv(sys.executable, [sys.executable, "-m", "r9k.bench.bench_tui", *what])
    # parent: drain the terminal output until the child exits
    while True:
        try:
            if not os.read(master, 65536):
                break
        except OSError:
            break
    _, status = os.waitpid(pid, 0)
    wall = time.perf_counter() - t_fork
    os.close(master)
    try:
        with open(out) as f:
            res = json.load(f)
    except (OSError, ValueError):
        raise SystemExit(f"benchmark child failed (status {status}); run it in a terminal to see why")
    finally:
        os.unlink(out)
    res["wall_s"] = wall
    res["from_fork_s"] = res["first_frame_at"] - t_fork  # interpreter start and imports included
    if "validated_at" in res:
        res["validated_from_fork_s"] = res["validated_at"] - t_fork
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="120x36", help="terminal WIDTHxHEIGHT")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--toggles", type=int, default=60)
    p.add_argument("--profile", default="tp2-default")
    p.add_argument("--user-cache", action="store_true",
                   help=f"use the user's {envvars.CACHE_DIR.name} (default: a fresh one, warmed by an untimed first run, "
                        "as on a user's machine; a developer's cache also holds every test registry parsed)")
    p.add_argument("--phases", action="store_true", help="CPU time of each start-up phase instead (headless)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--phases-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--hello-child", help=argparse.SUPPRESS)
    p.add_argument("--no-hello", action="store_true", help="skip the Textual hello-world runs (the yardstick)")
    a = p.parse_args(argv)
    if a.hello_child:
        hello_child(a.hello_child)
        return 0
    if a.child:
        child(a.child, a.profile, a.toggles)
        return 0
    if a.phases_child:
        phases_child(a.profile)
        return 0
    import contextlib
    import tempfile

    with (contextlib.nullcontext() if a.user_cache
          else tempfile.TemporaryDirectory(prefix="r9k-bench-cache-", ignore_cleanup_errors=True)) as tmp_cache:
        if tmp_cache:
            os.environ[envvars.CACHE_DIR.name] = tmp_cache
            run_in_pty((80, 24), a.profile, 2)  # warm-up: fills the parse cache, not timed
        if a.phases:
            phases(a)
        else:
            measure(a)
    return 0


def _load() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def phases(a) -> None:
    import subprocess

    rows = []
    for _ in range(a.runs):
        res = subprocess.run([sys.executable, "-m", "r9k.bench.bench_tui", "--phases-child", "--profile",
                              a.profile], capture_output=True, text=True, check=True)
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
    print(json.dumps({"cpus": os.cpu_count(), "loadavg_1m": _load(), "runs": a.runs}))
    for key in rows[0]:
        print(f"{key} CPU ms:", json.dumps(_stats([r[key] for r in rows])))


def measure(a) -> None:
    w, h = (int(x) for x in a.size.lower().split("x"))
    ms: dict[str, list[float]] = {k: [] for k in ("hello from_fork_s", "hello first_frame_cpu_s", "from_fork_s",
                                                  "validated_from_fork_s", "first_frame_s", "first_frame_cpu_s",
                                                  "wall_s", "import_s", "toggle_ms", "toggle_cpu_ms", "core_ms")}
    info = {}
    for _ in range(a.runs):
        if not a.no_hello:  # interleaved with the panel's runs, so both see the same machine load
            hr = run_in_pty((w, h), a.profile, 0, hello=True)
            for k in ("from_fork_s", "first_frame_cpu_s"):
                ms[f"hello {k}"].append(hr[k] * 1000.0)
        r = run_in_pty((w, h), a.profile, a.toggles)
        for k in ("from_fork_s", "validated_from_fork_s", "first_frame_s", "first_frame_cpu_s", "wall_s", "import_s"):
            ms[k].append(r[k] * 1000.0)
        for k in ("toggle_ms", "toggle_cpu_ms", "core_ms"):
            ms[k] += r[k][1:]  # the first toggle also warms caches: reported apart
        info = {"variants": r["variants"], "first_toggle_ms": round(r["toggle_ms"][0], 2)}
    forks, hellos = ms["from_fork_s"], ms["hello from_fork_s"]
    print(json.dumps({"cpus": os.cpu_count(), "loadavg_1m": _load(), "size": a.size, "profile": a.profile,
                      "runs": a.runs, **info}))
    print("first frame ms (from the parent's fork: interpreter start, imports, load, paint):", json.dumps(_stats(forks)))
    if hellos:
        ratio = statistics.median(forks) / statistics.median(hellos)
        print("  Textual hello world, started the same way, ms:", json.dumps(_stats(hellos)),
              "CPU ms:", json.dumps(_stats(ms["hello first_frame_cpu_s"])))
        print(f"  ratio of the medians (panel / hello world): {ratio:.2f}")
    for label, key in (
            ("  the panel with its validation result (deferred checks done, painted) ms from the fork:",
             "validated_from_fork_s"),
            ("first frame ms (from the child's first line):", "first_frame_s"),
            ("  CPU time of the child up to the first frame, interpreter start included:", "first_frame_cpu_s"),
            ("  of which importing the app ms:", "import_s"),
            ("process start to the end of the run ms (parent's fork to exit, includes the toggles):", "wall_s"),
            ("toggle re-validate + redraw ms:", "toggle_ms"),
            ("  CPU time ms:", "toggle_cpu_ms"),
            ("  of which core (resolve + check_profile + budget) ms:", "core_ms")):
        print(label, json.dumps(_stats(ms[key])))


if __name__ == "__main__":
    sys.exit(main())
