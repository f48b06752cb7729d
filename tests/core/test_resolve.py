"""Precedence and provenance: registry < release < profile chain < environment < --set."""
from pathlib import Path

import pytest

from r9k.registry import envvars, load_registry
from r9k.registry.resolve import ResolvedSet, resolve


@pytest.fixture
def reg(tmp_path):
    d = tmp_path / "profiles"
    d.mkdir()
    (d / "mine.toml").write_text(
        '# my profile\nextends = "round2-numerics"\n\n[knobs]\nR9K_HC_MIX_MAX_M = 4\nrouter_gemm = "r9k"\n')
    return load_registry(profile_dirs=None if False else _dirs(d))


def _dirs(extra):
    from r9k.registry.loader import default_profile_dirs

    return default_profile_dirs() + [extra]


def test_layers_and_sources(reg):
    rs = resolve(reg, "mine", env={"R9K_QSA_GLUE": "r9k"}, sets={"R9K_HC_MIX": "r9k"})
    assert rs.ok
    assert rs.chain == ["round2-numerics", "mine"]  # round2-numerics extends release:v0.2.0 (issue 24)
    r = rs.items["router_gemm"]
    assert (r.value, r.layer) == ("r9k", "profile") and r.source.endswith("mine.toml:6")
    assert [h[0].layer for h in r.history] == ["release", "profile"]  # overridden by round2-numerics, then mine
    assert rs.items["hc_mix_max_m"].value == "4" and rs.items["hc_mix_max_m"].source.endswith("mine.toml:5")
    assert (rs.value("R9K_QSA_GLUE"), rs.items["qsa_indexer_glue"].layer) == ("r9k", "environment")
    assert (rs.value("R9K_HC_MIX"), rs.items["hc_decode_mix"].layer) == ("r9k", "override")
    assert rs.items["hc_fp8_decode"].layer == "release"
    assert rs.items["hc_fp8_decode"].source.startswith("release v0.2.0")


def test_release_layer_of_an_older_release(reg, tmp_path):
    d = tmp_path / "p2"
    d.mkdir()
    (d / "old.toml").write_text('extends = "release:v0.3.0"\nmodel = "qwen3.8-flash-next"\ntp = 4\n')
    from r9k.registry.loader import default_profile_dirs

    reg2 = load_registry(profile_dirs=default_profile_dirs() + [d])
    rs = resolve(reg2, "old", env={})
    r = rs.items["hc_fp8_decode"]
    assert (r.value, r.layer) == ("0", "release")
    assert r.source.startswith("release v0.3.0")
    first = rs.items["hc_fp8_decode"].history[0]
    assert (first[0].layer, str(first[0]), first[1]) == ("registry", str(r.history[0][0]), "1")


def test_unknown_env_knob_warns_with_suggestion(reg):
    rs = resolve(reg, "tp4-default", env={"R9K_HC_FP8_DECODEE": "1"})
    assert rs.ok
    (d,) = rs.diagnostics
    assert d.level == "warning" and d.code == "unknown-env"
    assert "did you mean R9K_HC_FP8_DECODE?" in d.format()
    strict = resolve(reg, "tp4-default", env={"R9K_HC_FP8_DECODEE": "1"}, strict=True)
    assert not strict.ok


def test_control_variables_are_not_knobs(reg):
    rs = resolve(reg, "tp4-default", env={envvars.MANIFEST.name: "/x", envvars.PROFILE.name: "tp4-default"})
    assert rs.diagnostics == []


def test_bad_values_are_located(reg):
    rs = resolve(reg, "tp4-default", sets={"R9K_HC_FP8_DECODE": "2", "UTIL": "1.5", "R9K_ROUTER": "fast"})
    msgs = sorted(d.message for d in rs.diagnostics)
    assert len(msgs) == 3 and not rs.ok
    assert any("R9K_HC_FP8_DECODE='2'" in m and "boolean" in m for m in msgs)
    assert any("UTIL='1.5'" in m and "above the maximum 1" in m for m in msgs)
    assert any("R9K_ROUTER='fast'" in m and "'r9k', 'stock'" in m for m in msgs)


def test_hash_is_stable_and_sensitive(reg):
    a = resolve(reg, "tp4-default", env={})
    b = resolve(reg, "tp4-default", env={})
    c = resolve(reg, "tp4-default", env={}, sets={"R9K_ROUTER": "stock"})
    assert a.hash == b.hash != c.hash


def test_manifest_round_trip_and_tamper(reg):
    rs = resolve(reg, "tp4-default", env={})
    m = rs.to_manifest()
    back = ResolvedSet.from_manifest(m, reg)
    assert back.ok and back.hash == rs.hash
    m["values"]["router_gemm"]["value"] = "stock"
    tampered = ResolvedSet.from_manifest(m, reg)
    assert not tampered.ok and tampered.diagnostics[0].code == "manifest-hash"


def test_env_export_skips_unset(reg):
    env = resolve(reg, "stock", env={}).env()
    assert "ATTN" not in env  # '' means unset
    assert env["R9K_ROUTER"] == "stock"
