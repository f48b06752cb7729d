"""The control panel's editing state (r9kctl/tui/session.py) without the screen: layers, edits that
vanish when undone, keys spelt as the file spells them, refusal of illegal values."""
from __future__ import annotations

import random

import pytest
import tomllib

from r9k.registry.loader import load_registry
from r9k.r9kctl.tui.session import REMOVED, EditError, Session


def test_environment_and_override_layers_win_over_an_edit(fx_workspace):
    reg = load_registry()
    s = Session(reg, "fx-tp2", env={"R9K_FX_FP8_DECODE": "1"})
    assert s.rs.items["fx_fp8_decode"].layer == "environment"
    assert s.env_overrides("fx_fp8_decode") == "R9K_FX_FP8_DECODE"
    s.set_value("fx_fp8_decode", "0")  # the profile says 0 (an edit), the environment still says 1
    assert s.current_edits == {"fx_fp8_decode": "0"} and s.rs.value("R9K_FX_FP8_DECODE") == "1"
    s.set_value("fx_fp8_decode", "1")  # the value the profile chain gives anyway: no edit
    assert not s.has_edits()
    o = Session(reg, "fx-tp2", env={}, sets={"R9K_FX_FP8_DECODE": "0"})
    assert o.rs.items["fx_fp8_decode"].layer == "override" and o.env_overrides("fx_fp8_decode")


def test_edits_vanish_when_undone_and_reset_removes_the_files_key(fx_workspace):
    p = fx_workspace / "profiles" / "fx-older.toml"
    reg = load_registry()
    s = Session(reg, "fx-older", env={})
    assert s.rs.value("R9K_FX_ROUTER") == "stock" and s.rs.items["fx_router"].layer == "profile"
    s.cycle("fx_router")  # enum: the next choice
    assert s.has_edits()
    s.set_value("fx_router", "stock")  # back to the file's value: no edit
    assert not s.has_edits()
    s.reset("fx_router")  # the file's key goes; the parent's value applies again
    assert s.current_edits == {"fx_router": REMOVED}
    assert s.rs.value("R9K_FX_ROUTER") == s.reg.variants["fx_router"].default_for("fixture-moe", 4)
    # a knob the file does not set: toggling twice leaves nothing
    s.cycle("fx_fp8_decode")
    s.cycle("fx_fp8_decode")
    assert set(s.current_edits) == {"fx_router"}
    s.save()
    data = tomllib.loads(p.read_text())
    assert "R9K_FX_ROUTER" not in data["knobs"] and data["knobs"]["R9K_FX_GLUE"] == "stock"
    assert "# Fixture profile on the older fixture release" in p.read_text()


def test_key_spelt_as_the_file_spells_it(fx_workspace):
    p = fx_workspace / "profiles" / "by-id.toml"
    split = random.randrange(1, 8)
    p.write_text(f'# by id\nextends = "fx-tp4"\n\n[knobs]\nfx_router_split = {split}  # the id, an int\n')
    s = Session(load_registry(), "by-id", env={})
    assert s.key_for("fx_router_split") == "fx_router_split"
    s.set_value("fx_router_split", str(split + 1))
    s.save()
    text = p.read_text()
    assert f"fx_router_split = {split + 1}  # the id, an int" in text and "R9K_FX_ROUTER_SPLIT" not in text


def test_illegal_value_is_refused_with_the_allowed_values(fx_workspace):
    s = Session(load_registry(), "fx-tp2", env={})
    v = s.reg.variant("R9K_FX_FP8_DECODE_MAXM")
    with pytest.raises(EditError, match="allowed"):
        s.set_value(v.id, "-3" if v.range and v.range.min is not None else "many")
    with pytest.raises(EditError):
        s.set_value("fx_fp8_decode", "perhaps")
    assert not s.has_edits()
