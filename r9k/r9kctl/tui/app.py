"""The control panel's App: loads the registry (or shows where it is broken), installs the main screen,
the command palette provider, two themes of its own and a keymap by binding id."""
from __future__ import annotations

import contextlib
import os
import time
from functools import partial
from pathlib import Path
from typing import Mapping, Optional

from rich.segment import Segment
from textual import work
from textual.app import App
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.filter import LineFilter
from textual.theme import Theme

from ...registry.errors import Diagnostic, RegistryError
from ...registry.envvars import cache_dir
from ...registry.redact import drop_controls, has_controls
from .server import Server

ACTIONS = [  # the command palette's (text, action on the main screen, help)
    ("Diff: unsaved edits against the saved profile", "diff", "the same diff as r9kctl diff"),
    ("Save profile", "save", "write the edits, keeping comments and layout"),
    ("Save as new profile", "save_as", "a new profile that extends this one"),
    ("Launch (dry run first)", "launch", "show the exact command and environment, then confirm"),
    ("Reload from disk", "reload", "drop the edits and re-read the registry and profiles"),
    ("Reset variant to inherited value", "reset", "remove the profile's own key for the selected variant"),
    ("Problems: every error and warning", "problems", "choose one to jump to its variant"),
    ("Toggle detail pane", "toggle_detail", ""),
    ("Toggle light/dark theme", "app.toggle_r9k_theme", ""),
    ("Help: keys and columns", "app.help", ""),
]


class R9kCommands(Provider):
    """The command palette (ctrl+p): the app's actions, profile and TP switches, jumps to a variant, diffs."""

    def _commands(self):
        main = self.app.main_screen()
        if main is None:
            return
        s = main.s
        for text, action, help_ in ACTIONS:  # "app." actions go to the app (Textual's action namespaces)
            yield text, partial(main.run_action, action), help_
        for name in sorted(s.reg.profiles):
            if name != s.profile:
                yield f"Switch profile: {name}", partial(main.switch_profile, name), s.reg.profiles[name].description
        for tp in s.tp_options():
            yield f"Set TP size: {tp}", partial(main.switch_tp, tp), ""
        for side in sorted(s.reg.profiles) + list(reversed(s.reg.release_order())):
            if side != s.profile:
                yield f"Diff: {s.profile} against {side}", partial(main.action_diff, side, s.profile), ""
        for vid, v in s.reg.variants.items():
            yield f"Jump to variant: {vid} ({v.knob})", partial(main.jump_to, vid), v.summary

    async def discover(self) -> Hits:
        for text, cmd, help_ in self._commands():
            if text.startswith("Jump to") or " against " in text:  # many: found by searching
                continue
            yield DiscoveryHit(text, cmd, help=help_ or None)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, cmd, help_ in self._commands():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), cmd, text=text, help=help_ or None)


DARK = Theme(name="r9k-dark", primary="#4EA1D3", secondary="#B083F0", accent="#E8A33D", warning="#E8A33D",
             error="#E5534B", success="#57AB5A", background="#1C2128", surface="#22272E", panel="#2D333B",
             dark=True)
LIGHT = Theme(name="r9k-light", primary="#0969DA", secondary="#8250DF", accent="#BF8700", warning="#9A6700",
              error="#CF222E", success="#1A7F37", background="#FFFFFF", surface="#F6F8FA", panel="#EAEEF2",
              dark=False)


class DropControls(LineFilter):
    """A control or bidi character in what a widget draws (a description, a value, a server's answer) never reaches
    the terminal (an OSC 52 would write the clipboard): dropped, their cell width being 0 (the CLI escapes them)."""

    def apply(self, segments, background):
        if not any(has_controls(s.text) for s in segments):
            return segments
        return [s if s.control else Segment(drop_controls(s.text), s.style) for s in segments]


def _read(path: Path) -> Optional[bytes]:
    try:
        return path.read_bytes()
    except OSError:
        return None


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "r9k" / "tui.toml"


DROP_CONTROLS = DropControls()
HANG_UP_GRACE_S = 3.0  # after SIGHUP / SIGTERM: the app's own exit first, then the process's


class R9kApp(App):
    """``R9kApp(profile, tp).run()``: the panel; a confirmed launch starts the server in the background and
    opens the server screen (``R9kApp(attach=URL)``: that screen alone, on a server started elsewhere)."""

    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: the benchmark's subclass finds it too
    TITLE = "r9kctl tui"
    COMMANDS = App.COMMANDS | {R9kCommands}
    BINDINGS = [
        Binding("question_mark,f1", "help", "Help", id="r9k.help"),
        Binding("T", "toggle_r9k_theme", "Theme", show=False, id="r9k.theme"),
        Binding("ctrl+q", "quit", "Quit (asks with unsaved edits)", show=False, id="r9k.quit_app"),
    ]

    def __init__(self, profile: Optional[str] = None, tp: Optional[int] = None,
                 env: Optional[Mapping[str, str]] = None, keymap: Optional[Mapping[str, str]] = None,
                 theme: Optional[str] = None, sets: Optional[Mapping[str, object]] = None,
                 registry_root: Optional[Path] = None, profile_dirs: Optional[list[Path]] = None,
                 attach: Optional[str] = None) -> None:
        super().__init__()
        self.attach = attach  # a server's URL: the server screen alone
        self.server = None  # the vLLM server this panel started or attached to (server.py)
        self.child_env: dict[str, str] = {}  # what a started server's environment adds (r9kctl's --registry)
        self.registry_root = registry_root  # None: the loader's default
        self.profile_dirs = profile_dirs
        self.start_profile = profile
        self.start_tp = tp
        self.env = env
        self.sets = sets
        self.session = None
        self.first_frame_at: Optional[float] = None  # perf_counter() when the main screen was first painted
        self.validated_at: Optional[float] = None  # ... and when it first showed the validation result
        self.register_theme(DARK)
        self.register_theme(LIGHT)
        self.theme = theme if theme in self.available_themes else "r9k-dark"
        if keymap:
            self.set_keymap(dict(keymap))

    def get_line_filters(self):
        return [*super().get_line_filters(), DROP_CONTROLS]

    def on_mount(self) -> None:
        self._catch_hangup()
        if self.attach:
            self.server = Server.attach(self.attach)
            self.show_server()
        else:
            self.load()

    def start_server(self, session) -> None:
        """Start the session's launch plan in the background (a log file in the cache), then the server screen."""
        if self.server is not None and self.server.owned and self.server.running():
            self.notify("a server started here is still running: stop it first ('s' on the server screen)",
                        severity="warning")
            self.show_server()
            return
        self._start_server(session)

    @work(thread=True, exclusive=True, group="server-start")
    def _start_server(self, session) -> None:
        plan = session.plan_launch(final=True)  # the manifest written, the model a path: what runs
        if not plan.ok:
            self.call_from_thread(self.notify, "the profile does not validate: nothing started", severity="error")
            return
        from ..launch import serve_problem

        problem = serve_problem()
        if problem:
            self.call_from_thread(self.notify, f"cannot start vllm serve: {problem}", severity="error")
            return
        plan.env.update(self.child_env)
        log = cache_dir() / "servers" / f"{plan.manifest.get('profile')}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        self.server = Server.start(plan, log)
        self.call_from_thread(self.show_server)

    def show_server(self) -> None:
        from .server_screen import ServerScreen

        if self.server is None:
            self.notify("no server: launch one with 'l'", severity="warning")
            return
        if isinstance(self.screen, ServerScreen):
            return
        self.push_screen(ServerScreen(self.server))

    def stop_server(self) -> Optional[int]:
        """Stop the server this panel started (at the panel's end)."""
        if self.server is not None and self.server.owned and self.server.running():
            return self.server.stop()
        return None

    def main_screen(self):
        from .main_screen import MainScreen

        return next((s for s in reversed(self.screen_stack) if isinstance(s, MainScreen)), None)

    async def action_quit(self) -> None:
        """ctrl+q, the palette's Quit and q all come here: unsaved edits are asked about first."""
        main = self.main_screen()
        if main is None:
            self.exit()
            return
        if main is not self.screen and self.screen.is_modal:
            # close a dialog (maybe the quit question itself), then ask on the main screen
            while self.screen is not main and len(self.screen_stack) > 1:
                self.pop_screen()
        main.request_quit()

    def _catch_hangup(self) -> None:
        """SIGHUP and SIGTERM cannot be asked: the edits go to the recovery file (session.journal)."""
        import asyncio
        import signal

        # not the main thread, or no such signals here: nothing to catch
        with contextlib.suppress(RuntimeError, NotImplementedError, ValueError, AttributeError):
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGHUP, signal.SIGTERM):
                loop.add_signal_handler(sig, self._hang_up)

    def _hang_up(self) -> None:
        import threading

        from .session import write_recovery

        if self.session is not None:
            write_recovery(self.session)
        # an app still starting may not get to its exit: the process ends a few seconds later whatever it does
        stop = threading.Timer(HANG_UP_GRACE_S, os._exit, (129,))
        stop.daemon = True  # an exit that completes is not delayed by it
        stop.start()
        self.exit(return_code=129)

    def exit(self, result=None, return_code: int = 0, message=None) -> None:
        """A way out that asked leaves no journal to restore; a hang-up (return code 129) keeps it."""
        if return_code != 129 and self.session is not None and self.session.journal is not None:
            from .session import clear_journal

            self.session.journal = None
            clear_journal()
        super().exit(result, return_code, message)

    def edit_file(self, path: Path, then=None) -> None:
        """Open ``path`` in $VISUAL / $EDITOR (else vi) with the panel suspended; then the main screen reloads
        (or ``then(changed)`` runs)."""
        import shlex
        import subprocess

        from textual.app import SuspendNotSupported

        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        cmd = shlex.split(editor) + [str(path)]
        before = _read(path)
        try:
            try:
                with self.suspend():
                    rc = subprocess.call(cmd)
            except SuspendNotSupported:
                if not self.is_headless:
                    self.notify("this terminal cannot hand over to an editor", severity="error")
                    return
                rc = subprocess.call(cmd, stdin=subprocess.DEVNULL)  # tests: no terminal to hand over
        except OSError as exc:
            self.notify(f"cannot start {editor!r}: {exc.strerror or exc} (set $EDITOR)", severity="error", timeout=8)
            return
        if rc:
            self.notify(f"{editor} exited with status {rc}", severity="warning", timeout=4)
        changed = _read(path) != before
        if then is not None:
            then(changed)
            return
        main = self.main_screen()
        if main is not None:
            main.after_editor(changed)

    def action_edit_broken_file(self) -> None:
        """On the error screen: open the first file named by an error, then load again."""
        from .dialogs import ErrorScreen

        if not isinstance(self.screen, ErrorScreen):
            return
        files = [d.file for d in self.screen.diagnostics if d.file and Path(d.file).is_file()]
        if not files:
            self.notify("no file to open", severity="warning")
            return
        self.edit_file(Path(files[0]), then=lambda _changed: self.load())

    def load(self) -> None:
        from .session import Session, journal, restore_recovery

        try:
            self.session = Session.open(self.start_profile, self.start_tp, self.env, self.sets,
                                        root=self.registry_root, profile_dirs=self.profile_dirs,
                                        defer_validation=True)
        except RegistryError as exc:
            self.show_load_error(exc.diagnostics)
            return
        if self.start_profile and self.start_profile != self.session.profile:
            self.notify(f"no profile named '{self.start_profile}'; showing '{self.session.profile}'"
                        + (" (the closest name)" if self.session.closest_profile(self.start_profile) else ""),
                        severity="warning")
        from .main_screen import MainScreen

        restored = restore_recovery(self.session)
        self.session.journal = journal  # every edit from here on is on disk at once
        journal(self.session)
        self.switch_or_push(MainScreen(self.session))
        if restored:
            self.notify(f"restored {restored} unsaved edit(s) of a session that ended without asking (the "
                        "terminal was closed); ctrl+z drops them", timeout=10)

    def validated_frame_painted(self) -> None:
        """Called once the main screen shows the validation result."""
        if self.validated_at is None:
            self.validated_at = time.perf_counter()

    def first_frame_painted(self) -> None:
        """Called once the main screen has been painted (the benchmark's mark)."""
        if self.first_frame_at is None:
            self.first_frame_at = time.perf_counter()

    def switch_or_push(self, screen) -> None:
        """``screen`` replaces whatever is above the default screen."""
        while len(self.screen_stack) > 1:
            self.pop_screen()
        self.push_screen(screen)

    def show_load_error(self, diagnostics: list[Diagnostic]) -> None:
        from .dialogs import ErrorScreen

        self.switch_or_push(ErrorScreen(diagnostics))

    def action_retry_load(self) -> None:
        self.load()

    def action_help(self) -> None:
        from .dialogs import HelpScreen

        if isinstance(self.screen, HelpScreen):
            return
        self.push_screen(HelpScreen(self.binding_rows()))

    def binding_rows(self) -> list[tuple[str, str, str]]:
        """(keys, description, id) of the app's and the active screen's bindings, keymap applied."""
        from .main_screen import MainScreen
        from .variant_table import VariantTable

        rows = []
        keymap = getattr(self, "_keymap", {}) or {}
        for cls in (VariantTable, MainScreen, type(self)):
            for b in cls.BINDINGS:
                if not isinstance(b, Binding) or not b.id:
                    continue
                keys = keymap.get(b.id, b.key)
                keys = keys.replace("question_mark", "?").replace("slash", "/").replace("equals_sign", "=")
                rows.append((keys, b.description, b.id))
        return rows

    def action_toggle_r9k_theme(self) -> None:
        self.theme = "r9k-light" if self.current_theme.dark else "r9k-dark"
