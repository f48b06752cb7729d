"""The running server: health, what each op uses and its counters, vLLM's choices, the KV cache predicted vs
allocated, the last log lines; polled every :data:`POLL_S` seconds in a worker thread. ``s`` stops and ``r``
restarts a server the panel started; ``escape`` goes back to the panel (``o`` there comes back here)."""
from __future__ import annotations

import time

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import work
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from .server import Poll, Server
from ...plugin.api import kv_cache_line

POLL_S = 1.5

STATE_STYLE = {"healthy": "bold green", "starting": "bold yellow", "unhealthy": "bold red", "exiting": "bold red",
               "exited": "bold red", "stopping": "bold yellow", "stopped": "bold", "unreachable": "bold red"}


def _ago(t: float) -> str:
    s = int(max(0, time.time() - t))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def head_text(srv: Server, p: Poll | None) -> Text:
    state = p.state if p else "starting"
    t = Text.assemble(("server ", "bold"), (srv.url, "bold cyan"), "  ", (state, STATE_STYLE.get(state, "bold")))
    if srv.proc is not None:
        t.append(f"  pid {srv.proc.pid} (own process group)")
        if srv.started_at:
            t.append(f", up {_ago(srv.started_at)}")
    else:
        t.append("  (attached: started elsewhere)")
    if p and p.returncode is not None:
        t.append(f", exit code {p.returncode}")
    st = p.status if p else None
    if st:
        t.append(f"\nprofile {st.get('profile')}  hash {st.get('hash')}  tp {st.get('tp')}  model {st.get('model')}")
        if not st.get("agree", True):
            t.append("  the processes report different hashes", "bold red")
    elif p and p.status_error:
        t.append("\n" + p.status_error, "yellow")
    if srv.log_path is not None:
        t.append(f"\nlog {srv.log_path}", "dim")
    return t


def ops_table(st: dict) -> Table:
    tab = Table(title="what each op uses (all processes), calls since start", title_justify="left", expand=True)
    for col in ("op", "implementation in use", "layers on r9k", "kept vLLM's path (why)", "calls"):
        tab.add_column(col, overflow="fold")
    in_use = st.get("in_use") or {}
    ops = st.get("ops") or {}
    for op in sorted(set(ops) | set(in_use)):
        o = ops.get(op, {})
        kept = "; ".join(f"{n} {r}" for r, n in sorted((o.get("kept") or {}).items())) or "-"
        calls = ", ".join(f"{path}={n:,}" for path, n in sorted((o.get("calls") or {}).items())) or "0"
        impl = in_use.get(op)
        tab.add_row(op, str(impl) if impl is not None else "-", str(o.get("installed", 0)), kept, calls)
    return tab


def applied_table(st: dict):
    applied = st.get("applied")
    if not applied:
        return Text("vLLM's choices: not reported (yet)", "dim")
    rows = applied.get("rows", [])
    tab = Table(title=f"vLLM's choices: {len(rows) - len(applied.get('mismatches', []))} of {len(rows)} request(s) "
                      "applied", title_justify="left", expand=True)
    for col in ("state", "knob", "requested", "applied", "where"):
        tab.add_column(col, overflow="fold")
    for r in rows:
        style = {"mismatch": "bold red", "unverified": "yellow"}.get(r.get("state"), "")
        tab.add_row(Text(str(r.get("state")), style), r.get("knob"), str(r.get("requested")),
                    str(r.get("applied")), str(r.get("where")) + (f": {r['note']}" if r.get("note") else ""))
    b = applied.get("backends") or {}
    if b:
        return Group(tab, Text("backends: " + ", ".join(f"{k} {v}" for k, v in b.items())))
    return tab


def kv_text(st: dict) -> Text:
    kv = st.get("kv_cache")
    if not kv:
        return Text("KV cache: predicted vs allocated: not reported yet (the engine is not ready)", "dim")
    return Text(kv_cache_line(kv))


class ServerScreen(Screen):
    BINDINGS = [
        Binding("s", "stop", "Stop", id="r9k.server_stop"),
        Binding("r", "restart", "Restart", id="r9k.server_restart"),
        Binding("escape", "back", "Back to the panel", id="r9k.server_back"),
        Binding("q", "app.quit", "Quit", id="r9k.server_quit"),
    ]

    def __init__(self, server: Server, **kw) -> None:
        super().__init__(**kw)
        self.server = server
        self.last: Poll | None = None
        self.polls = 0

    def compose(self):
        with VerticalScroll(id="server-body"):
            yield Static(head_text(self.server, None), id="server-head")
            yield Static(id="server-kv")
            yield Static(id="server-ops")
            yield Static(id="server-applied")
            yield Static(id="server-log")
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_status()
        self.set_interval(POLL_S, self.refresh_status)

    def check_action(self, action: str, parameters) -> bool | None:
        if action in ("stop", "restart") and not self.server.owned:
            return None  # shown disabled: a server started elsewhere is not ours to stop
        return True

    @work(thread=True, exclusive=True, group="server-poll")
    def refresh_status(self) -> None:
        p = self.server.poll()
        self.app.call_from_thread(self.show, p)

    def show(self, p: Poll) -> None:
        self.last = p
        self.polls += 1
        self.query_one("#server-head", Static).update(head_text(self.server, p))
        for part, render in (("kv", kv_text), ("ops", ops_table), ("applied", applied_table)):
            self.query_one(f"#server-{part}", Static).update(render(p.status) if p.status else Text(""))
        log = Text("last log lines\n", "bold")
        if p.log:
            log.append("\n".join(p.log), "dim")
        else:
            log.append("(no log: attached to a server started elsewhere)" if self.server.log_path is None
                       else "(empty)", "dim")
        self.query_one("#server-log", Static).update(log)

    def action_stop(self) -> None:
        if self.server.owned and self.server.running():
            self.notify("stopping the server (SIGTERM to its process group)")
            self._control(lambda: f"server stopped (exit code {self.server.stop()})")

    def action_restart(self) -> None:
        if self.server.owned:
            self.notify("restarting the server")
            self._control(self._restart)

    def _restart(self) -> str:
        self.server.restart()
        return f"server restarted (pid {self.server.proc.pid})"

    @work(thread=True, exclusive=True, group="server-control")
    def _control(self, act) -> None:
        """Stop or restart off the event loop (it waits for the process group); then say what happened."""
        self.app.call_from_thread(self.notify, act())
        self.app.call_from_thread(self.refresh_status)

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 1 and self.app.main_screen() is not None:
            self.app.pop_screen()
        else:
            self.app.exit()
