"""Snapshot tests of the control panel (pytest-textual-snapshot): the SVGs under __snapshots__/ are the
approved screens. They run on the small synthetic registry of tests/tui/fixtures, in a temporary workspace used
as the working directory (stable relative paths), with an empty environment and fixed terminal sizes.
After an intended visual change: ``pytest tests/tui/test_tui_snapshots.py --snapshot-update`` and
review the new SVGs."""
from __future__ import annotations

import pytest

from r9k.r9kctl.tui.app import R9kApp


def app(profile: str = "fx-tp2", theme: str | None = None) -> R9kApp:
    return R9kApp(profile=profile, env={}, theme=theme)


async def _toggle(pilot, vid: str) -> None:
    pilot.app.screen.jump_to(vid)
    await pilot.pause()
    await pilot.press("space")
    await pilot.pause()


SIZES = [(80, 24), (120, 36), (160, 45)]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_main_screen_with_an_edit(fx_workspace, snap_compare, size):
    """The knob column whole, the unsaved badge left of the pickers, narrower panels below 100 columns."""
    async def before(pilot):
        await _toggle(pilot, "fx_fp8_decode")

    assert snap_compare(app(), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_quit_dialog_cancel_focused(fx_workspace, snap_compare, size):
    async def before(pilot):
        await _toggle(pilot, "fx_fp8_decode")
        await pilot.press("q")
        await pilot.pause()

    assert snap_compare(app(), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_launch_screen_command_first(fx_workspace, snap_compare, size, monkeypatch):
    from pathlib import Path

    from r9k.r9kctl.tui.session import Session

    real = Session.plan_launch

    def plan_launch(self, final=False):  # the interpreter's path differs between machines: its name only
        plan = real(self, final)
        if plan.argv:
            plan.argv[0] = Path(plan.argv[0]).name
        if "--additional-config" in plan.argv:  # the carried set names a file in this run's cache: its shape only
            plan.argv[plan.argv.index("--additional-config") + 1] = '{"r9k":{"hash":"...","path":"..."}}'
        plan.server = "SERVER"
        return plan

    monkeypatch.setattr(Session, "plan_launch", plan_launch)

    async def before(pilot):
        from textual.widgets import Input

        await pilot.press("l")
        await pilot.pause()
        pilot.app.screen.query_one("#launch-extra", Input).cursor_blink = False  # the cursor shown, not mid-blink
        await pilot.pause()

    assert snap_compare(app(), terminal_size=size, run_before=before)


def test_main_screen_with_detail_pane_large(fx_workspace, snap_compare):
    async def before(pilot):
        pilot.app.screen.jump_to("fx_fp8_decode")
        await pilot.pause()

    assert snap_compare(app("fx-tp4"), terminal_size=(170, 46), run_before=before)


def test_validation_panel_with_an_error(fx_workspace, snap_compare):
    async def before(pilot):
        await _toggle(pilot, "fx_fp8_decode")  # KV capacity up, shown against the saved state
        await _toggle(pilot, "fx_fp8_down")  # R9K_FX_FREE_BF16 requires it: an error

    assert snap_compare(app(), terminal_size=(120, 36), run_before=before)


def test_diff_view_of_the_edits(fx_workspace, snap_compare):
    async def before(pilot):
        await _toggle(pilot, "fx_fp8_decode")
        await _toggle(pilot, "fx_router")
        await pilot.press("d")
        await pilot.pause()

    assert snap_compare(app(), terminal_size=(120, 30), run_before=before)


def test_help_screen(fx_workspace, snap_compare):
    assert snap_compare(app(), press=["question_mark"], terminal_size=(100, 34))


def test_light_theme(fx_workspace, snap_compare):
    assert snap_compare(app(theme="r9k-light"), terminal_size=(100, 24))


def test_error_screen_names_file_and_line(fx_workspace, snap_compare):
    (fx_workspace / "profiles" / "broken.toml").write_text(
        'description = "x"\nextends = "fx-tp4"\n[knobs\nR9K_FX_ROUTER = "r9k"\n')
    assert snap_compare(app(), terminal_size=(100, 20))
