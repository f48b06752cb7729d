"""The control panel as a new user meets it in the first hour (issue 14): no way out loses an edit, no
dialog's default is destructive, undo/redo, the editor hand-off, the palette jump, the picker's order,
honest files, the launch screen and the knob column at every width. Real app, real files (a copy of
the synthetic profiles of tests/tui/fixtures)."""
from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import tomllib
from pathlib import Path

import pytest
from textual.widgets import Collapsible, Input, Static

from r9k.r9kctl.tui.app import R9kApp
from r9k.r9kctl.tui.dialogs import ConfirmScreen, ErrorScreen, SaveAsScreen
from r9k.r9kctl.tui.launch_screen import LaunchScreen
from r9k.r9kctl.tui.main_screen import MainScreen
from r9k.r9kctl.tui.variant_table import COLUMNS, layout
from r9k.registry.loader import load_registry

from .terminal import panel_on_a_terminal
from .test_tui_pilot import drive, pick_profile, search, text_of

SIZE = (120, 36)


def run(coro):
    return asyncio.run(coro)


def notes(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def find(pilot, knob: str) -> None:
    """Show the rows matching ``knob`` (the search box set at once; test_tui_pilot types it key by key)."""
    screen = pilot.app.screen
    screen.query_one("#search", Input).value = knob
    await pilot.pause()
    screen.table.focus()


async def toggle(pilot, knob: str) -> None:
    await find(pilot, knob)
    assert pilot.app.screen.table.current_variant() == load_registry().variant(knob).id
    await pilot.press("space")
    await pilot.pause()


async def way_out(pilot, way: str) -> None:
    if way == "palette":
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*list("quit"))
        await pilot.pause(0.3)
        await pilot.press("enter")
    else:
        await pilot.press(way)
    await pilot.pause()


@pytest.mark.parametrize("way", ["q", "ctrl+q", "palette"])
def test_every_way_out_asks_and_cancel_is_the_default(fx_workspace, way):
    prof = fx_workspace / "profiles" / "fx-tp2.toml"
    before = prof.read_text()

    async def scenario(app, pilot):
        s = app.screen.s
        await toggle(pilot, "R9K_FX_FP8_DECODE")
        await way_out(pilot, way)
        assert isinstance(app.screen, ConfirmScreen) and "unsaved" in app.screen.title_text
        assert app.focused.id == "answer-cancel"
        await pilot.press("enter")  # the default: stay
        await pilot.pause()
        assert isinstance(app.screen, MainScreen) and s.has_edits() and app.return_code is None
        await way_out(pilot, way)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen) and app.return_code is None
        await way_out(pilot, way)
        await pilot.press("d")  # quit without saving: only when chosen
        await pilot.pause()
        return app

    app = drive("fx-tp2", scenario, SIZE)
    assert app.return_code == 0
    assert prof.read_text() == before


def test_save_and_quit_saves_every_edited_profile_with_typed_values(fx_workspace):
    tp2 = fx_workspace / "profiles" / "fx-tp2.toml"
    tp4 = fx_workspace / "profiles" / "fx-tp4.toml"

    async def scenario():
        app = R9kApp(profile="fx-tp2", env={})
        async with app.run_test(size=SIZE) as pilot:
            await toggle(pilot, "R9K_FX_FP8_DECODE")
            await pick_profile(pilot, "fx-tp4")
            await toggle(pilot, "R9K_FX_ROUTER")
            await find(pilot, "R9K_FX_FP8_DECODE_MAXM")
            await pilot.press("equals_sign")
            await pilot.pause()
            inp = app.screen.query_one(Input)
            inp.value = ""
            await pilot.press(*list("24"), "enter")
            await pilot.pause()
            assert "+1 other profile(s) unsaved" in text_of(app.screen.query_one("#summary", Static))
            await pilot.press("q")
            await pilot.pause()
            await pilot.press("s")
            await pilot.pause()
        return app

    app = run(scenario())
    assert app.return_code == 0
    k2 = tomllib.loads(tp2.read_text())["knobs"]
    k4 = tomllib.loads(tp4.read_text())["knobs"]
    reg = load_registry()
    assert k2["R9K_FX_FP8_DECODE"] == 0 and type(k2["R9K_FX_FP8_DECODE"]) is int  # a bool knob: 0, not "0"
    assert k4["R9K_FX_FP8_DECODE_MAXM"] == 24 and type(k4["R9K_FX_FP8_DECODE_MAXM"]) is int
    router = reg.variant("R9K_FX_ROUTER")
    assert isinstance(k4["R9K_FX_ROUTER"], str) and k4["R9K_FX_ROUTER"] in router.choices  # an enum: a string


def test_dialog_defaults_are_never_destructive(fx_workspace):
    keys = ("ctrl+s", "r", "e", "q")  # save invalid, reload, editor, quit
    with pytest.raises(ValueError):
        ConfirmScreen("x", "y", [("quit", "Quit", "y", "error"), ("cancel", "Cancel", "n", "default")], default="quit")
    prof = fx_workspace / "profiles" / "fx-tp2.toml"

    async def scenario():
        app = R9kApp(profile="fx-tp2", env={})
        async with app.run_test(size=SIZE) as pilot:
            s = app.screen.s
            await toggle(pilot, "R9K_FX_FP8_DOWN")  # invalid: R9K_FX_FREE_BF16 needs it
            seen = []
            for key in keys:
                await pilot.press(key)
                await pilot.pause()
                assert isinstance(app.screen, ConfirmScreen), key
                seen.append(app.screen.title_text)
                assert app.focused.id == "answer-cancel", (key, app.focused)
                await pilot.press("enter")
                await pilot.pause()
                assert isinstance(app.screen, MainScreen) and s.has_edits(), key
            # the changed-on-disk dialog
            await pilot.press("space")  # valid again
            await pilot.pause()
            await toggle(pilot, "R9K_FX_FP8_DECODE")
            prof.write_text(prof.read_text() + "\n# edited elsewhere\n")
            await pilot.press("ctrl+s")
            await pilot.pause()
            assert "changed on disk" in app.screen.title_text and app.focused.id == "answer-cancel"
            await pilot.press("enter")
            await pilot.pause()
            assert s.has_edits()
            # the launch screen: the arguments field focused; enter applies it, never launches or closes
            started = []
            app.start_server = started.append
            await pilot.press("l")
            await pilot.pause()
            assert isinstance(app.screen, LaunchScreen) and app.focused.id == "launch-extra"
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, LaunchScreen) and app.focused.id == "launch-extra" and not started
            await pilot.press("escape")
            await pilot.pause()
            assert isinstance(app.screen, MainScreen) and app.return_value is None and not started
            return seen

    seen = run(scenario())
    assert len(set(seen)) == len(keys)  # a dialog of its own for each


def test_undo_and_redo_of_every_edit_including_a_reload(fx_workspace):
    async def scenario():
        app = R9kApp(profile="fx-tp2", env={})
        async with app.run_test(size=SIZE) as pilot:
            s = app.screen.s
            await toggle(pilot, "R9K_FX_FP8_DECODE")
            one = dict(s.current_edits)
            await find(pilot, "R9K_FX_FP8_DECODE_MAXM")
            await pilot.press("equals_sign")
            await pilot.pause()
            app.screen.query_one(Input).value = ""
            await pilot.press(*list("40"), "enter")
            await pilot.pause()
            two = dict(s.current_edits)
            assert len(two) == 2
            await pilot.press("delete")  # back to inherited: the edit goes
            await pilot.pause()
            three = dict(s.current_edits)
            assert three == one
            await pilot.press("r")  # reload drops the edits (asked)
            await pilot.pause()
            await pilot.press("y")
            await pilot.pause()
            assert not s.has_edits()
            for expect in (three, two, one, {}):
                await pilot.press("ctrl+z")
                await pilot.pause()
                assert dict(s.current_edits) == expect
                assert s.rs.value("R9K_FX_FP8_DECODE") == ("0" if expect else "1")
            await pilot.press("ctrl+z")  # nothing more
            await pilot.pause()
            assert "nothing to undo" in notes(app)
            for expect in (one, two, three, {}):
                await pilot.press("ctrl+y")
                await pilot.pause()
                assert dict(s.current_edits) == expect
            await pilot.press("ctrl+z")
            await pilot.pause()
            assert dict(s.current_edits) == three  # the reload undone again
            # an undo in another profile brings that profile back on screen
            await pick_profile(pilot, "fx-tp4")
            await pilot.press("ctrl+z")
            await pilot.pause()
            assert s.profile == "fx-tp2" and dict(s.current_edits) == two

    run(scenario())


def _editor(monkeypatch, tmp_path: Path, body: str) -> None:
    """$EDITOR (and no $VISUAL): a script that runs ``body`` with ``p`` the file it was given."""
    script = tmp_path / "fake_editor.py"
    script.write_text("import sys, pathlib\np = pathlib.Path(sys.argv[-1])\n" + body)
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", f"{sys.executable} {script}")


def test_editor_hand_off_reloads_and_asks_about_unsaved_edits(fx_workspace, tmp_path, monkeypatch):
    prof = fx_workspace / "profiles" / "fx-tp2.toml"
    _editor(monkeypatch, tmp_path, "p.write_text(p.read_text() + 'R9K_FX_ROUTER = \"stock\"\\n')\n")

    async def scenario(app, pilot):
        s = app.screen.s
        assert s.rs.value("R9K_FX_ROUTER") != "stock"
        await pilot.press("e")  # no unsaved edits: straight to the editor, then reload
        await pilot.pause()
        assert s.rs.value("R9K_FX_ROUTER") == "stock"
        assert s.rs.items["fx_router"].source.startswith("profiles/fx-tp2.toml:")
        assert any("reloaded" in n for n in notes(app))
        # with an unsaved edit: asked (Cancel the default), never merged
        await toggle(pilot, "R9K_FX_FP8_DECODE")
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and app.focused.id == "answer-cancel"
        await pilot.press("enter")
        await pilot.pause()
        assert prof.read_text().count('R9K_FX_ROUTER = "stock"') == 1 and s.has_edits()
        await pilot.press("e")
        await pilot.pause()
        await pilot.press("s")  # save first, then edit
        await pilot.pause()
        text = prof.read_text()
        assert "R9K_FX_FP8_DECODE = 0" in text and text.count('R9K_FX_ROUTER = "stock"') == 2
        assert isinstance(app.screen, ErrorScreen)  # the editor wrote a duplicate key: located error
        assert "fx-tp2.toml" in text_of(app.screen.query_one("#error-text", Static))
        return text

    drive("fx-tp2", scenario, SIZE)


def test_editor_drop_then_undo_brings_the_edits_back(fx_workspace, tmp_path, monkeypatch):
    _editor(monkeypatch, tmp_path, "p.write_text(p.read_text() + '# looked at it\\n')\n")

    async def scenario(app, pilot):
        s = app.screen.s
        await toggle(pilot, "R9K_FX_FP8_DECODE")
        edits = dict(s.current_edits)
        await pilot.press("e")
        await pilot.pause()
        await pilot.press("d")  # drop the edits, then edit
        await pilot.pause()
        assert isinstance(app.screen, MainScreen) and not s.has_edits()
        await pilot.press("ctrl+z")
        await pilot.pause()
        assert dict(s.current_edits) == edits

    drive("fx-tp2", scenario, SIZE)


def test_palette_jump_clears_a_hiding_search_scrolls_and_space_toggles_that_row(fx_workspace):
    reg = load_registry()
    # the last row that space toggles (a bool or enum): off screen at the top of the table
    target = [vid for vid, v in reg.variants.items() if v.type in ("bool", "enum")][-1]
    knob = reg.variants[target].knob

    async def scenario():
        app = R9kApp(profile="fx-tp2", env={})
        async with app.run_test(size=(80, 24)) as pilot:
            s = app.screen.s
            table = app.screen.table
            await search(pilot, "R9K_FX_FP8_DECODE")  # typed, as a person would
            assert target not in table.shown
            await pilot.press("ctrl+p")
            await pilot.pause()
            await pilot.press(*list(f"jump {target}"))
            await pilot.pause(0.3)
            await pilot.press("enter")
            await pilot.pause()
            assert table.current_variant() == target and table.cursor_visible()
            assert app.screen.query_one("#search", Input).value == ""
            assert any("cleared the search 'R9K_FX_FP8_DECODE'" in n and knob in n for n in notes(app))
            await pilot.press("space")
            await pilot.pause()
            assert list(s.current_edits) == [target]  # the row shown under the cursor, no other

    run(scenario())


def test_space_never_toggles_a_row_scrolled_out_of_view(fx_workspace):
    async def scenario():
        app = R9kApp(profile="fx-tp2", env={})
        async with app.run_test(size=(80, 16)) as pilot:
            s = app.screen.s
            table = app.screen.table
            assert table.cursor_row == 0
            assert table.max_scroll_y > 0  # more rows than the terminal shows
            table.scroll_to(y=table.max_scroll_y, animate=False, immediate=True)  # the wheel moved the view away
            await pilot.pause()
            assert not table.cursor_visible()
            await pilot.press("space")
            await pilot.pause()
            assert not s.has_edits() and table.cursor_visible()
            assert any("off screen" in n for n in notes(app))
            await pilot.press("space")  # now seen: toggles
            await pilot.pause()
            assert list(s.current_edits) == [table.current_variant()]

    run(scenario())


def test_picker_prefers_exact_and_prefix_matches(fx_workspace):
    for name in ("fx-tp2", "fx-older"):  # names that contain the exact and the prefix match further in
        (fx_workspace / "profiles" / f"my-{name}.toml").write_text(f'extends = "{name}"\n')

    async def scenario():
        app = R9kApp(profile="fx-dense", env={})
        async with app.run_test(size=SIZE) as pilot:
            await pick_profile(pilot, "fx-tp2")
            assert app.screen.s.profile == "fx-tp2"
            await pick_profile(pilot, "fx-dense")
            assert app.screen.s.profile == "fx-dense"
            await pick_profile(pilot, "fx-old")
            assert app.screen.s.profile == "fx-older"

    run(scenario())

    async def shortened():  # r9kctl tui --profile fx-old: the closest name, said so
        app = R9kApp(profile="fx-old", env={})
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert app.screen.s.profile == "fx-older"
            assert any("no profile named 'fx-old'; showing 'fx-older' (the closest name)" in n for n in notes(app))

    run(shortened())


def test_save_as_writes_an_honest_description(fx_workspace):
    async def scenario():
        app = R9kApp(profile="fx-tp4", env={})
        async with app.run_test(size=SIZE) as pilot:
            await toggle(pilot, "R9K_FX_FP8_DECODE")
            await pilot.press("S")
            await pilot.pause()
            assert isinstance(app.screen, SaveAsScreen)
            app.screen.query_one(Input).value = ""
            await pilot.press(*list("fx-tp4-mine"), "enter")
            await pilot.pause()

    run(scenario())
    data = tomllib.loads((fx_workspace / "profiles" / "fx-tp4-mine.toml").read_text())
    assert data["knobs"] == {"R9K_FX_FP8_DECODE": 0}
    assert data["description"] == "fx-tp4 with R9K_FX_FP8_DECODE = 0"


def test_launch_screen_command_first_environment_folded_extra_arguments(fx_workspace):
    started = []

    async def scenario():
        app = R9kApp(profile="fx-tp2", env={})
        app.start_server = started.append  # what a confirmed launch starts (the server itself: test_operator.py)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("l")
            await pilot.pause()
            scr = app.screen
            assert isinstance(scr, LaunchScreen)
            cmd = text_of(scr.query_one("#launch-command", Static))
            assert "--tensor-parallel-size 2" in cmd and "export" not in cmd
            env = scr.query_one("#launch-env", Collapsible)
            assert env.collapsed and f"{len(scr.plan.env)} variable" in str(env.title)
            assert scr.query_one("#launch-warnings", Collapsible).collapsed
            assert app.focused.id == "launch-extra"
            await pilot.press(*list("--port 8001"), "enter")
            await pilot.pause()
            assert isinstance(app.screen, LaunchScreen) and not started  # enter applied the field, no more
            assert scr.plan.argv[-4:-2] == ["--port", "8001"]  # then the carried set (--additional-config)
            assert "--port 8001" in text_of(scr.query_one("#launch-command", Static))
            await pilot.press("ctrl+l")
            await pilot.pause()
            assert isinstance(app.screen, MainScreen)
        return app

    run(scenario())
    [session] = started
    assert session.extra_args == ["--port", "8001"]
    assert session.plan_launch(final=False).argv[-4:-2] == ["--port", "8001"]


def test_knob_column_is_whole_at_every_width():
    reg = load_registry()
    knob_w = max(len(v.knob) for v in reg.variants.values())
    index = {k: i for i, (k, _l, _w) in enumerate(COLUMNS)}
    for width in range(56, 240):
        cols = dict(layout(width, knob_w))
        assert cols[index["knob"]] == knob_w, width
        assert index["value"] in cols and index["mark"] in cols
        assert sum(w + 2 for w in cols.values()) <= width or width < 60, width
    at80 = [COLUMNS[i][0] for i, _w in layout(78, knob_w)]
    assert at80[:3] == ["mark", "knob", "value"] and "variant" not in at80


@pytest.mark.parametrize("size", [(80, 24), (60, 20), (160, 45)])
def test_rendered_rows_show_every_knob_whole_and_the_badge(fx_workspace, size):
    reg = load_registry()

    async def scenario():
        app = R9kApp(profile="fx-tp2", env={})
        async with app.run_test(size=size) as pilot:
            await toggle(pilot, "R9K_FX_FP8_DECODE")
            await find(pilot, "FP8")
            table = app.screen.table
            lines = [table.render_line(y).text for y in range(1, table.size.height)]
            top = table.scroll_offset.y
            shown = table.shown[top: top + len(lines)]
            assert shown
            for vid, line in zip(shown, lines):
                knob = reg.variants[vid].knob
                assert re.search(rf"(^|\s){re.escape(knob)}(\s|$)", line), (knob, line)
            logo = text_of(app.screen.query_one("#logo", Static))
            assert "1 unsaved" in logo
            title = text_of(app.screen.query_one("#validation-title", Static)).strip()
            assert not title.endswith(":") and "valid: no" not in title

    run(scenario())


def test_a_closed_terminal_keeps_the_edits_for_the_next_start(fx_workspace):
    """SIGHUP (the terminal closed) cannot be asked about: the edits go to a recovery file and the next
    start restores them as unsaved edits. The real command line on a pseudo-terminal."""
    with panel_on_a_terminal("fx-tp2") as term:
        assert b"knob" in term.read_until(b"knob", 120)
        term.write(b" ")  # toggle the first row
        assert b"unsaved" in term.read_until(b"unsaved", 60)
        os.kill(term.pid, signal.SIGHUP)
        term.wait_drained(60)  # it writes the recovery file as it ends
    rec = fx_workspace / "cache" / "tui-recovery.json"
    assert rec.is_file()

    async def scenario():
        app = R9kApp(profile="fx-tp4", env={})
        async with app.run_test(size=SIZE) as pilot:
            s = app.screen.s
            assert s.profile == "fx-tp2" and len(s.current_edits) == 1
            assert any("restored 1 unsaved edit" in n for n in notes(app))
            await pilot.press("ctrl+z")
            await pilot.pause()
            assert not s.has_edits()

    run(scenario())
    assert not rec.exists()


@pytest.mark.parametrize("after", [0.0, 0.15, 0.3, "frame"])
def test_a_terminal_closed_while_the_panel_starts_ends_it(tmp_path, after):
    """The terminal closes while the panel is still starting (``after`` seconds after its first bytes: Textual
    up, the registry still loading) or once it shows its first frame: the panel ends either way. Before, a
    hang-up in the first ~0.5 s after the first bytes left it running, orphaned, ignoring SIGTERM (here, on
    2026-12-03: at 0.15 and 0.3 s both times, at 0 s once of three); now its handler writes the recovery file, asks the app to exit and ends the process
    HANG_UP_GRACE_S later if the app has not."""
    import pty
    import select
    import time

    env = dict(os.environ, TERM="xterm-256color", COLUMNS="100", LINES="30", R9K_CACHE_DIR=str(tmp_path / "c"),
               XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(sys.executable, [sys.executable, "-m", "r9k.r9kctl.cli", "tui", "--profile", "cpu-smoke"], env)
    try:
        buf, first, end = b"", None, time.monotonic() + 120
        while time.monotonic() < end:
            if first is not None and (b"knob" in buf if after == "frame" else time.monotonic() - first >= after):
                break
            if select.select([fd], [], [], 0.02)[0]:
                buf += os.read(fd, 65536)
                first = first or time.monotonic()
        assert first is not None and time.monotonic() < end, buf[-500:]
        os.close(fd)  # the terminal closes: the kernel hangs up the panel's session
        fd = -1
        end = time.monotonic() + 30
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            assert time.monotonic() < end, "the panel outlived its terminal by 30 s"
            time.sleep(0.1)
    finally:
        if fd >= 0:
            os.close(fd)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def test_palette_actions_run(fx_workspace):
    """A palette action on the main screen (toggle the detail pane) and one on the app (the theme) both run."""
    async def scenario():
        app = R9kApp(profile="fx-tp2", env={})
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.pause()
            before, theme = app.screen.detail_open, app.theme
            for command in ("Toggle detail pane", "Toggle light/dark theme"):
                await pilot.press("ctrl+p")
                await pilot.pause()
                await pilot.press(*[("space" if ch == " " else ch) for ch in command])
                await pilot.pause(0.5)
                await pilot.press("enter")
                await pilot.pause(0.5)
            assert app.screen.detail_open is not before and app.theme != theme

    run(scenario())
