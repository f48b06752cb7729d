"""The memory figures say what they are: which memory_check rows are in-sample (a model constant was set from
them), one KV figure per configuration whichever command computes it, and launch kinds compared like for like."""
from __future__ import annotations

import pytest

from r9k.registry import load_registry
from r9k.registry import memory_check as M


@pytest.fixture(scope="module")
def reg():
    return load_registry()


def test_memory_check_says_which_rows_are_in_sample(reg):
    rows = M.table(reg)
    bounded = [r for r in rows if r["bound_pct"] is not None]
    assert bounded and all(r["sample"].startswith("in-sample: ") for r in bounded)  # every bounded row calibrates
    held = [r for r in rows if r["sample"] == "held out"]
    assert held and all(r["bound_pct"] is None for r in held)
    by = {r["figure"]: r["sample"] for r in rows}
    assert "kv_bytes_per_token" in by["v0.3.0 TP4, KVMEM=7.0"]  # calibrated from it (models.toml says so)
    assert "overhead_bytes_per_gpu tp4" in by["v0.3.2 TP4"]
    assert by["v0.3.1 TP2, fp8 down copy (R9K_HC_FP8_DECODE=1)"] == "held out"  # shown, never fitted
    text = M.render(rows)
    assert "| sample |" in text and f"{len(rows) - len(held)} of {len(rows)} figures are in-sample" in text
    assert "every bounded row is in-sample" in text


@pytest.mark.parametrize("profile", ["tp4-default", "tp2-default", "27b-tp2"])
def test_validate_and_memory_check_give_one_kv_figure(reg, profile):
    """The profiles on the original's cards state its 32,624 MiB exactly (31.86 GiB, rounded, gave 41 tokens
    more in validate than memory_check for tp4-default and tp2-default)."""
    from r9k.registry.validate import validate

    rep = validate(reg, profile=profile)
    rs = rep.profiles[profile]
    release = reg.profiles[profile].extends.removeprefix("release:")
    assert rs.hardware["memory_gib_per_gpu"] == M.CARD_GIB
    assert rep.budgets[profile].kv_tokens == M.tokens(reg, rs.model, rs.tp, release, {})


def test_the_tp2_cold_figure_is_not_compared_with_a_warm_one(reg, capsys):
    """v0.3.0's Flash-Next TP2 133,306 is a cold-compile launch (the original's v0.3.1 notes compare it with the
    cold 103,517 as the fp8 down copy's cost); v0.3.1's 166,818 is warm: diff shows them on separate rows,
    never as a +25.1% change."""
    from r9k.r9kctl import cli

    rec = next(b for b in reg.releases["v0.3.0"].bench
               if b.config == "fn_tp2" and b.metric == "kv_cache_tokens" and not b.setting)
    assert rec.value == 133306 and rec.launch == "cold"
    assert cli.main(["diff", "v0.3.0", "v0.3.1"]) == 0
    out = capsys.readouterr().out
    kv = [ln for ln in out.splitlines() if ln.startswith("fn_tp2 ") and "KV cache" in ln]
    assert "+25.1%" not in out
    assert any("cold launch" in ln and "133,306" in ln and "v0.3.0 only" in ln for ln in kv), kv
    assert any("warm launch" in ln and "166,818" in ln and "v0.3.1 only" in ln for ln in kv), kv
