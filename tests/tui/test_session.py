"""The control panel's editing state (r9kctl/tui/session.py) without the screen: layers, edits that
vanish when undone, keys spelt as the file spells them, refusal of illegal values."""
from __future__ import annotations

import random

import pytest
import tomllib

from r9k.registry.loader import load_registry
from r9k.r9kctl.tui.session import REMOVED, EditError, Session


def test_environment_and_override_layers_win_over_an_edit(workspace):
    reg = load_registry()
    s = Session(reg, "tp2-default", env={"R9K_HC_FP8_DECODE": "1"})
    assert s.rs.items["hc_fp8_decode"].layer == "environment"
    assert s.env_overrides("hc_fp8_decode") == "R9K_HC_FP8_DECODE"
    s.set_value("hc_fp8_decode", "0")  # the profile says 0 (an edit), the environment still says 1
    assert s.current_edits == {"hc_fp8_decode": "0"} and s.rs.value("R9K_HC_FP8_DECODE") == "1"
    s.set_value("hc_fp8_decode", "1")  # the value the profile chain gives anyway: no edit
    assert not s.has_edits()
    o = Session(reg, "tp2-default", env={}, sets={"R9K_HC_FP8_DECODE": "0"})
    assert o.rs.items["hc_fp8_decode"].layer == "override" and o.env_overrides("hc_fp8_decode")


def test_edits_vanish_when_undone_and_reset_removes_the_files_key(workspace):
    p = workspace / "profiles" / "round2-numerics.toml"
    reg = load_registry()
    s = Session(reg, "round2-numerics", env={})
    assert s.rs.value("R9K_ROUTER") == "stock" and s.rs.items["router_gemm"].layer == "profile"
    s.cycle("router_gemm")  # enum: the next choice
    assert s.has_edits()
    s.set_value("router_gemm", "stock")  # back to the file's value: no edit
    assert not s.has_edits()
    s.reset("router_gemm")  # the file's key goes; the parent's value applies again
    assert s.current_edits == {"router_gemm": REMOVED}
    assert s.rs.value("R9K_ROUTER") == s.reg.variants["router_gemm"].default_for("qwen3.8-flash-next", 4)
    # a knob the file does not set: toggling twice leaves nothing
    s.cycle("hc_fp8_decode")
    s.cycle("hc_fp8_decode")
    assert set(s.current_edits) == {"router_gemm"}
    s.save()
    data = tomllib.loads(p.read_text())
    assert "R9K_ROUTER" not in data["knobs"] and data["knobs"]["R9K_QSA_GLUE"] == "stock"
    assert "# The v0.2.0 notes" in p.read_text()


def test_key_spelt_as_the_file_spells_it(workspace):
    p = workspace / "profiles" / "by-id.toml"
    split = random.randrange(1, 8)
    p.write_text(f'# by id\nextends = "tp4-default"\n\n[knobs]\nrouter_split = {split}  # the id, an int\n')
    s = Session(load_registry(), "by-id", env={})
    assert s.key_for("router_split") == "router_split"
    s.set_value("router_split", str(split + 1))
    s.save()
    text = p.read_text()
    assert f"router_split = {split + 1}  # the id, an int" in text and "R9K_ROUTER_SPLIT" not in text


def test_illegal_value_is_refused_with_the_allowed_values(workspace):
    s = Session(load_registry(), "tp2-default", env={})
    v = s.reg.variant("R9K_HC_FP8_DECODE_MAXM")
    with pytest.raises(EditError, match="allowed"):
        s.set_value(v.id, "-3" if v.range and v.range.min is not None else "many")
    with pytest.raises(EditError):
        s.set_value("hc_fp8_decode", "perhaps")
    assert not s.has_edits()
