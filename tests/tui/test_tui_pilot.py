"""The control panel driven through Textual's Pilot: the real app on the small synthetic registry of
tests/tui/fixtures, real files (a copy of its profiles).

Each test runs in a temporary workspace (conftest.fx_workspace) and resolves with an empty environment, so a knob
exported in the developer's shell cannot change what the tests see.
"""
from __future__ import annotations

import asyncio
import io
import random
import secrets
from pathlib import Path

import pytest
from textual.widgets import Input, Static

from r9k.registry.loader import load_registry
from r9k.registry.memory import cost_if_toggled
from r9k.registry.resolve import resolve
from r9k.r9kctl.tui.app import R9kApp
from r9k.r9kctl.tui.dialogs import ConfirmScreen, ErrorScreen, HelpScreen, SaveAsScreen, ValueInputScreen
from r9k.r9kctl.tui.diff_screen import DiffScreen
from r9k.r9kctl.tui.launch_screen import LaunchScreen
from r9k.r9kctl.tui.main_screen import MainScreen
from r9k.r9kctl.tui.variant_table import VariantTable

SIZE = (120, 40)


def run(coro):
    return asyncio.run(coro)


def drive(profile: str, scenario, size=SIZE, **options):
    """Open the panel on ``profile`` (an empty environment) at ``size`` and run ``scenario(app, pilot)``;
    what it returns."""
    async def main():
        app = R9kApp(profile=profile, env={}, **options)
        async with app.run_test(size=size) as pilot:
            return await scenario(app, pilot)

    return run(main())


def text_of(widget) -> str:
    """The plain text a Static shows (its content rendered by rich, wide enough not to wrap much)."""
    from rich.console import Console

    content = widget.content
    if isinstance(content, str):
        return content
    console = Console(width=400, record=True, file=io.StringIO(), color_system=None)
    console.print(content)
    return console.export_text()


def validation_text(screen) -> str:
    return text_of(screen.query_one("#validation-title", Static)) + "\n" + \
        text_of(screen.query_one("#validation-body", Static))


def budget_text(screen) -> str:
    return text_of(screen.query_one("#budget-text", Static))


def mark_profile(path: Path) -> str:
    """Add a fresh comment to a profile file (a random marker the save must keep)."""
    marker = f"# keep-me {secrets.token_hex(6)}"
    text = path.read_text()
    lines = text.splitlines()
    lines.insert(random.randrange(1, 3), marker)
    path.write_text("\n".join(lines) + "\n")
    return marker


async def search(pilot, text: str) -> None:
    await pilot.press("slash")
    inp = pilot.app.screen.query_one("#search", Input)
    inp.value = ""
    await pilot.press(*list(text))
    await pilot.press("enter")
    await pilot.pause()


async def pick_profile(pilot, name: str) -> None:
    """Open the profile picker and choose a profile by typing its name (type-to-search)."""
    await pilot.press("p")
    await pilot.pause()
    await pilot.press(*list(name))
    await pilot.press("enter")
    await pilot.pause()


def test_toggle_fp8_decode_at_tp2_budget_requires_save_reload(fx_workspace):
    prof_file = fx_workspace / "profiles" / "fx-tp2.toml"
    marker = mark_profile(prof_file)
    reg = load_registry()
    base = resolve(reg, "fx-tp2", env={})
    assert base.tp == reg.profiles["fx-tp2"].tp and base.value("R9K_FX_FP8_DECODE") == "1"
    # R9K_FX_FP8_DECODE holds an fp8 copy (its memory formula in the fixture): switching it off frees that
    cost = cost_if_toggled(reg, base, "fx_fp8_decode")
    assert cost is not None and cost.tokens > 0

    async def scenario():
        app = R9kApp(profile="fx-dense", env={})
        async with app.run_test(size=SIZE) as pilot:
            screen = app.screen
            assert isinstance(screen, MainScreen)
            await pick_profile(pilot, "fx-tp2")
            s = screen.s
            assert s.profile == "fx-tp2" and s.tp == base.tp
            kv0 = s.budget.kv_tokens
            assert f"{kv0:,}" in budget_text(screen)

            await search(pilot, "R9K_FX_FP8_DECODE")
            table = screen.query_one(VariantTable)
            assert table.current_variant() == "fx_fp8_decode"
            await pilot.press("space")
            await pilot.pause()
            assert s.rs.value("R9K_FX_FP8_DECODE") == "0"
            assert s.rs.items["fx_fp8_decode"].layer == "profile"
            # switching the fp8 copies off frees their memory for the KV cache
            assert s.budget.kv_tokens == kv0 + cost.tokens
            shown = budget_text(screen)
            assert f"{kv0 + cost.tokens:,}" in shown
            assert not cost.tokens or f"{cost.tokens:+,} vs saved" in shown
            assert "1 unsaved" in text_of(screen.query_one("#logo", Static))

            # a requires error appears (R9K_FX_FREE_BF16 needs the fp8 down copy) and clears
            await search(pilot, "R9K_FX_FP8_DOWN")
            assert table.current_variant() == "fx_fp8_down"
            await pilot.press("space")
            await pilot.pause()
            text = validation_text(screen)
            assert "1 error" in text and "requires" in text and "R9K_FX_FREE_BF16" in text, text
            await pilot.press("space")
            await pilot.pause()
            text = validation_text(screen)
            assert "error" not in text.split("\n")[0].replace("no errors", ""), text
            assert not [d for d in s.report.diagnostics if d.code == "requires" and d.level == "error"]
            assert list(s.current_edits) == ["fx_fp8_decode"]  # toggled back: no edit left

            await pilot.press("ctrl+s")
            await pilot.pause()
            assert not s.has_edits()
            # after the save the value comes from the file, at the line it was written to
            r = s.rs.items["fx_fp8_decode"]
            assert r.layer == "profile" and "unsaved" not in r.source and r.source.startswith("profiles/fx-tp2.toml:")
            assert s.kv_delta == 0

            # reload from disk: the change is there
            await pilot.press("r")
            await pilot.pause()
            assert s.rs.value("R9K_FX_FP8_DECODE") == "0"
            assert s.budget.kv_tokens == kv0 + cost.tokens

    run(scenario())
    saved = prof_file.read_text()
    assert marker in saved
    assert "# Fixture profile: fx-tp4 on two cards" in saved
    assert "# none: the release's defaults at TP2" in saved
    assert 'R9K_FX_FP8_DECODE = 0' in saved
    # an independent load of the saved file agrees
    assert resolve(load_registry(), "fx-tp2", env={}).value("R9K_FX_FP8_DECODE") == "0"


def test_concurrent_edit_on_disk_is_detected_then_save_as(fx_workspace):
    prof_file = fx_workspace / "profiles" / "fx-tp4.toml"

    async def scenario():
        app = R9kApp(profile="fx-tp4", env={})
        async with app.run_test(size=SIZE) as pilot:
            screen = app.screen
            s = screen.s
            await search(pilot, "R9K_FX_FP8_DECODE")
            await pilot.press("space")
            await pilot.pause()
            assert s.has_edits()
            # someone else edits the file after the panel loaded it (the panel has not read it since)
            theirs = prof_file.read_text() + f'\n# edited elsewhere {secrets.token_hex(4)}\n'
            prof_file.write_text(theirs)
            await pilot.press("ctrl+s")
            await pilot.pause()
            assert isinstance(app.screen, ConfirmScreen)
            assert "changed on disk" in app.screen.title_text
            assert prof_file.read_text() == theirs  # not overwritten
            await pilot.press("a")  # save as
            await pilot.pause()
            assert isinstance(app.screen, SaveAsScreen)
            inp = app.screen.query_one(Input)
            inp.value = ""
            await pilot.press(*list("fx-tp4-nofp8"))
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, MainScreen)
            assert s.profile == "fx-tp4-nofp8"
            assert s.rs.chain == ["fx-tp4", "fx-tp4-nofp8"]
            assert s.rs.value("R9K_FX_FP8_DECODE") == "0"
            return theirs

    theirs = run(scenario())
    assert prof_file.read_text() == theirs
    new = (fx_workspace / "profiles" / "fx-tp4-nofp8.toml").read_text()
    assert 'extends = "fx-tp4"' in new and 'R9K_FX_FP8_DECODE = 0' in new


def test_invalid_profile_needs_explicit_confirm_to_save(fx_workspace):
    prof_file = fx_workspace / "profiles" / "fx-tp2.toml"
    before = prof_file.read_text()

    async def scenario(app, pilot):
        s = app.screen.s
        await search(pilot, "R9K_FX_FP8_DOWN")
        await pilot.press("space")
        await pilot.pause()
        assert s.report.errors
        # the problems list: choosing the requires error jumps to the variant that needs fx_fp8_down
        await pilot.press("v")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        assert app.screen.query_one(VariantTable).current_variant() == "fx_free_bf16"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await pilot.pause()
        assert prof_file.read_text() == before and s.has_edits()
        await pilot.press("ctrl+s")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert not s.has_edits()

    drive("fx-tp2", scenario)
    assert 'R9K_FX_FP8_DOWN = 0' in prof_file.read_text()


def test_int_input_refuses_an_illegal_value(fx_workspace):
    reg = load_registry()
    v = reg.variant("R9K_FX_FP8_DECODE_MAXM")
    lo = int(v.range.min) if v.range and v.range.min is not None else 0
    good = str(lo + random.randrange(1, 500))

    async def scenario():
        app = R9kApp(profile="fx-tp2", env={})
        async with app.run_test(size=SIZE) as pilot:
            s = app.screen.s
            await search(pilot, "R9K_FX_FP8_DECODE_MAXM")
            await pilot.press("enter")  # an int: opens the input
            await pilot.pause()
            assert isinstance(app.screen, ValueInputScreen)
            assert v.allowed_text() in text_of(app.screen.query_one("#value-allowed", Static))
            inp = app.screen.query_one(Input)
            inp.value = ""
            await pilot.press(*list("lots"), "enter")
            await pilot.pause()
            assert isinstance(app.screen, ValueInputScreen)  # refused, still open
            assert "expected an integer" in text_of(app.screen.query_one("#value-error", Static))
            inp.value = ""
            await pilot.press(*list(good), "enter")
            await pilot.pause()
            assert isinstance(app.screen, MainScreen)
            assert s.rs.value("R9K_FX_FP8_DECODE_MAXM") == good
            assert s.rs.items["fx_fp8_decode_maxm"].layer == "profile"
            # reset to the inherited value: the edit disappears
            await pilot.press("delete")
            await pilot.pause()
            assert not s.has_edits()

    run(scenario())


def test_launch_shows_dry_run_and_refuses_invalid(fx_workspace):
    async def scenario():
        app = R9kApp(profile="fx-tp2", env={})
        app.start_server = started.append  # a confirmed launch (the real start: tests/tui/test_operator.py)
        async with app.run_test(size=SIZE) as pilot:
            s = app.screen.s
            await pilot.press("l")
            await pilot.pause()
            assert isinstance(app.screen, LaunchScreen)
            plan = app.screen.plan
            assert plan.ok and "--tensor-parallel-size" in plan.argv and "2" in plan.argv
            assert plan.manifest["profile"] == "fx-tp2"  # the set travels in vLLM's config, not a variable
            assert '"hash":"%s"' % plan.manifest["hash"] in plan.argv[plan.argv.index("--additional-config") + 1]
            await pilot.press("escape")
            await pilot.pause()
            # make it invalid: refused, no launch button
            await search(pilot, "R9K_FX_FP8_DOWN")
            await pilot.press("space")
            await pilot.pause()
            await pilot.press("l")
            await pilot.pause()
            assert isinstance(app.screen, LaunchScreen) and not app.screen.plan.ok
            assert not app.screen.query("#launch-go")
            await pilot.press("ctrl+l")  # not offered: nothing happens
            await pilot.pause()
            assert isinstance(app.screen, LaunchScreen)
            await pilot.press("escape")
            await pilot.press("space")  # valid again
            await pilot.pause()
            await pilot.press("l")
            await pilot.pause()
            await pilot.press("ctrl+l")
            await pilot.pause()
        return started, s

    started = []
    result, s = run(scenario())
    assert result == [s]


def test_diff_view_help_palette_and_keymap(fx_workspace):
    async def scenario():
        app = R9kApp(profile="fx-tp2", env={}, keymap={"r9k.diff": "D", "r9k.help": "f2"})
        async with app.run_test(size=SIZE) as pilot:
            s = app.screen.s
            await search(pilot, "R9K_FX_FP8_DECODE")
            await pilot.press("space")
            await pilot.pause()
            await pilot.press("d")  # remapped away: nothing
            await pilot.pause()
            assert isinstance(app.screen, MainScreen)
            await pilot.press("D")
            await pilot.pause()
            assert isinstance(app.screen, DiffScreen)
            text = text_of(app.screen.query_one("#diff-content", Static))
            assert "R9K_FX_FP8_DECODE" in text and "KV cache at tp2" in text
            await pilot.press("escape")
            await pilot.press("f2")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            assert ("D", "Diff", "r9k.diff") in app.screen.bindings
            await pilot.press("escape")
            await pilot.pause()
            # the command palette jumps to a variant
            await pilot.press("ctrl+p")
            await pilot.pause()
            await pilot.press(*list("jump to variant: fx_router_max_m"))
            await pilot.pause(0.3)
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, MainScreen)
            assert app.screen.query_one(VariantTable).current_variant() == "fx_router_max_m"

    run(scenario())


@pytest.mark.parametrize("where", ["profile", "registry"])
def test_broken_file_opens_on_a_located_error_screen(fx_workspace, where):
    if where == "profile":
        path = fx_workspace / "profiles" / "broken.toml"
        path.write_text('description = "x"\nextends = "fx-tp4"\n[knobs\nR9K_FX_ROUTER = "r9k"\n')
        expect = "profiles/broken.toml:3"
    else:
        path = fx_workspace / "registry" / "variants" / "decode.toml"
        lines = path.read_text().splitlines()
        n = random.choice([i for i, ln in enumerate(lines) if ln.startswith("summary = ")])
        lines.insert(n + 1, "colour = \"blue\"")
        path.write_text("\n".join(lines) + "\n")
        expect = f"registry/variants/decode.toml:{n + 2}"

    async def scenario():
        app = R9kApp(profile="fx-tp4", env={})
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert isinstance(app.screen, ErrorScreen)
            return text_of(app.screen.query_one("#error-text", Static))

    text = run(scenario())
    assert expect in text, text
    assert "Traceback" not in text


def test_tp_key_shows_the_profile_at_another_tp_size(fx_workspace):
    reg = load_registry()
    prof = reg.profiles["fx-tp4"]
    [other] = [t for t in reg.models[prof.model].tp_sizes if t != prof.tp]  # the fixture model's other size
    at_other = resolve(reg, "fx-tp4", tp=other, env={})

    async def scenario():
        app = R9kApp(profile="fx-tp4", env={})
        async with app.run_test(size=SIZE) as pilot:
            s = app.screen.s
            assert s.tp == prof.tp
            await pilot.press("t")
            await pilot.pause()
            assert s.tp == other and s.tp_choice == other
            assert s.rs.hash == at_other.hash
            assert f"{s.budget.kv_tokens:,}" in budget_text(app.screen)
            await pilot.press("t")  # back to the profile's own size
            await pilot.pause()
            assert s.tp == prof.tp and s.tp_choice is None

    run(scenario())
