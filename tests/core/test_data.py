"""The shipped data: every knob and release of the reference converted, and every profile clean."""
import tomllib

import pytest

from r9k.registry import load_registry
from r9k.registry.resolve import resolve
from r9k.registry.validate import validate

from .conftest import REFERENCE


@pytest.fixture(scope="module")
def reg():
    return load_registry()


def test_counts(reg):
    assert len([v for v in reg.variants.values() if v.vllm is None]) == 149  # + vLLM's own switches (vllm.toml)
    assert reg.release_order() == ["v0.1.0", "v0.2.0", "v0.2.1", "v0.2.2", "v0.2.3", "v0.2.4", "v0.2.5", "v0.3.0",
                                   "v0.3.1", "v0.3.2"]
    assert {"tp4-default", "tp2-default", "27b-tp2", "stock", "round2-numerics", "cpu-smoke"} <= set(reg.profiles)


@pytest.mark.skipif(not (REFERENCE / "knob-catalog.toml").exists(), reason="../shared/reference not present")
def test_every_reference_knob_and_default_is_here(reg):
    cat = tomllib.loads((REFERENCE / "knob-catalog.toml").read_text())
    for v in cat["variant"]:
        mine = reg.variants[v["id"]]
        assert mine.knob == v["knob"]
        for tp in ("tp4", "tp2"):
            if f"default_{tp}" in v:
                assert mine.defaults[tp] == mine.normalize(str(v[f"default_{tp}"])), (v["id"], tp)
        if "default_27b_tp2" in v:
            assert mine.model_defaults["qwen3.8-27b"]["tp2"] == str(v["default_27b_tp2"])
        assert mine.status.state == {"shipped-default": "default-on", "opt-in": "opt-in", "rejected": "rejected"}[
            v["status"]]
        assert mine.status.reason
        assert len([m for m in mine.measured if m.platform == "r9700"]) == len(v.get("measured", []))
        if v.get("note"):
            assert mine.note == v["note"]  # every caveat kept


def test_validate_all_is_clean(reg):
    report = validate(reg, all_profiles=True, env={})
    # Gate freshness is the one thing the data alone cannot keep: a kernel edit makes its gate stale
    # until `r9kctl gate` (or an imported GPU run) records it again. A profile may switch on a variant that
    # cannot run on its platform (the availability rule says so: one warning per variant, counted in the
    # report as a fallback). Everything else must be clean.
    assert [d.format() for d in report.diagnostics if d.code not in ("gate", "no-implementation")] == []
    fallbacks = {(name, v.knob) for name, vs in report.availability.items() for v in vs.values()
                 if v.state == "fallback"}
    warned = {(it, d.message.split("=")[0]) for d in report.diagnostics if d.code == "no-implementation"
              for it in d.items if it in reg.profiles}
    assert fallbacks and {k for _, k in fallbacks} == {k for _, k in warned}
    assert all(d.level == "warning" for d in report.diagnostics)
    assert set(report.profiles) == set(reg.profiles)


@pytest.mark.parametrize("profile", ["tp4-default", "tp2-default", "27b-tp2", "stock", "round2-numerics", "cpu-smoke"])
def test_every_profile_resolves(reg, profile):
    rs = resolve(reg, profile, env={})
    assert rs.ok, [d.format() for d in rs.diagnostics]
    assert len([r for r in rs.items.values() if r.variant.vllm is None]) == 149
    assert len(rs.hash) == 12


def test_stock_profile_is_all_stock(reg):
    rs = resolve(reg, "stock", env={})
    assert rs.active() == []
    assert all(r.value == r.variant.stock for r in rs.items.values())


def test_round2_numerics(reg):
    base, r2 = resolve(reg, "tp4-default", env={}), resolve(reg, "round2-numerics", env={})
    changed = {r.variant.knob for r in r2.items.values() if r.value != base.items[r.variant.id].value}
    assert changed == {"R9K_ROUTER", "R9K_QSA_GLUE", "R9K_HC_MIX"}
    assert all(r2.value(k) == "stock" for k in changed)


def test_release_defaults_are_derived_from_history(reg):
    at = lambda rel, knob, tp: resolve_release(reg, rel, knob, tp)
    assert at("v0.3.0", "R9K_HC_FP8_DECODE", 4) == "0"
    assert at("v0.3.1", "R9K_HC_FP8_DECODE", 4) == "1"
    assert at("v0.3.1", "R9K_HC_FP8_DECODE", 2) == "0"  # stayed off at TP2 until v0.3.2
    assert at("v0.3.2", "R9K_HC_FP8_DECODE", 2) == "1"
    assert at("v0.3.0", "R9K_FP8_QA", 2) == "0"
    assert at("v0.2.0", "UTIL", 4) == "0.94"
    assert at("v0.3.0", "UTIL", 4) == "0.98"


def resolve_release(reg, rel, knob, tp):
    from r9k.registry.resolve import value_at_release

    return value_at_release(reg, reg.variant(knob), rel, "qwen3.8-flash-next", tp)


def test_the_cpu_flash_next_profiles_carry_tp4_defaults_kernel_variants():
    """cpu-flash-next starts from stock (tp4-default's launcher knobs cannot apply on vLLM's CPU backend) and
    names its kernel variants itself: they must stay tp4-default's, less the three this backend cannot run
    (block-fp8 GEMMs, their fused activation quant, the QSA indexer glue), at TP 1 and TP 2 alike."""
    reg = load_registry()

    def kernels(profile: str) -> set[str]:
        return {r.variant.knob for r in resolve(reg, profile).non_stock() if r.variant.implementation.op}

    not_on_cpu = {"R9K_FP8_BLOCK", "R9K_FP8_QA", "R9K_QSA_GLUE"}
    want = kernels("tp4-default") - not_on_cpu
    assert want and kernels("cpu-flash-next") == want
    assert kernels("cpu-flash-next-tp2") == want
