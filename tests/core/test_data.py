"""The shipped data: every knob and release of the reference converted, and every profile clean."""
import tomllib
from pathlib import Path

import pytest

from r9k.registry import load_registry
from r9k.registry.resolve import resolve
from r9k.registry.validate import validate

from .conftest import REFERENCE as _SHARED

# The reference: ../shared/reference where the workspace has it, else the copy shipped with the tests (the same
# files), so the full check runs in every clone
REFERENCE = _SHARED if (_SHARED / "knob-catalog.toml").exists() else \
    __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "reference"

REGISTRY = Path(__file__).resolve().parents[2] / "registry"


@pytest.fixture(scope="module")
def reg():
    return load_registry()


def _toml_variants() -> list[dict]:
    """Every ``[[variant]]`` table of the shipped TOML files, read without the loader."""
    return [v for p in sorted((REGISTRY / "variants").glob("*.toml"))
            for v in tomllib.loads(p.read_text(encoding="utf-8")).get("variant", [])]


def test_counts(reg):
    """The loader keeps every variant and release the files hold (counted from the files, not a literal)."""
    declared = _toml_variants()
    assert len(reg.variants) == len(declared) == len({v["id"] for v in declared}) > 0
    versions = [p.stem for p in (REGISTRY / "releases").glob("*.toml")]
    order = reg.release_order()
    assert sorted(order) == sorted(versions)
    original = [v for v in order if not reg.releases[v].project]
    assert original == sorted(original, key=lambda v: tuple(int(x) for x in v.lstrip("v").split(".")))
    for v, r in reg.releases.items():  # a project release comes after the release it extends
        if r.project:
            assert order.index(r.previous) < order.index(v)
    assert [v for v, r in reg.releases.items() if r.project] == ["v0.3.2-r9k.1"]  # this project's own
    assert {"tp4-default", "tp2-default", "27b-tp2", "stock", "round2-numerics", "cpu-smoke"} <= set(reg.profiles)


def test_every_reference_knob_and_default_is_here(reg):
    cat = tomllib.loads((REFERENCE / "knob-catalog.toml").read_text())
    for v in cat["variant"]:
        mine = reg.variants[v["id"]]
        assert mine.knob == v["knob"]
        for tp in ("tp4", "tp2"):
            if f"default_{tp}" in v:
                assert mine.defaults[tp] == mine.normalize(str(v[f"default_{tp}"])), (v["id"], tp)
        if "default_27b_tp2" in v:
            ref = str(v["default_27b_tp2"])
            if mine.also_knobs and ", " in ref:
                # "DFlash2-FP8, SPEC=7": the knob's own value, then its companion knobs' values, which the
                # launcher mapping now carries as fixed fields (registry/vllm_map.py: SPEC=7 becomes
                # num_speculative_tokens 7); each companion value must be there, none dropped
                own, *rest = ref.split(", ")
                assert mine.model_defaults["qwen3.8-27b"]["tp2"] == own
                fixed = {str(x) for x in (mine.sets.fields or {}).values()}
                for companion in rest:
                    assert companion.split("=", 1)[1] in fixed, (v["id"], companion)
            else:
                assert mine.model_defaults["qwen3.8-27b"]["tp2"] == ref
        assert mine.status.state == {"shipped-default": "default-on", "opt-in": "opt-in", "rejected": "rejected"}[
            v["status"]]
        assert mine.status.reason
        assert len([m for m in mine.measured if m.platform == "r9700"]) == len(v.get("measured", []))
        if v.get("note"):
            assert mine.note == v["note"]  # every caveat kept


def test_validate_all_is_clean(reg):
    report = validate(reg, all_profiles=True, env={})
    # Gate freshness is the one thing the data alone cannot keep: a kernel edit makes its gate stale
    # until `r9kctl gate` (or an imported GPU run) records it again, and an imported record is fresh but
    # unverified here (gate-unverified) until accepted. A profile may switch on a variant that
    # cannot run on its platform (the availability rule says so: one warning per variant, counted in the
    # report as a fallback). Everything else must be clean.
    assert [d.format() for d in report.diagnostics if d.code not in ("gate", "gate-unverified", "no-implementation")] == []
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
    assert len(rs.items) == len(reg.variants)  # one value per variant
    assert len(rs.hash) == 12


def test_stock_profile_is_all_stock(reg):
    rs = resolve(reg, "stock", env={})
    assert rs.active() == []
    assert all(r.value == r.variant.stock for r in rs.items.values())


def test_round2_numerics(reg):
    """Round-2 numerics: v0.2.0 with the trio at stock (the v0.2.0 notes' recipe, a statement about v0.2.0),
    not the trio on the latest release, where the fp8 hc GEMMs and this project's combine + norm change
    numerics too (issue 24)."""
    v020, r2 = resolve(reg, "stock", env={}), resolve(reg, "round2-numerics", env={})
    from r9k.registry.resolve import value_at_release

    changed = {r.variant.knob for r in r2.items.values()
               if r.value != value_at_release(reg, r.variant, "v0.2.0", r2.model, r2.tp)}
    assert changed == {"R9K_ROUTER", "R9K_QSA_GLUE", "R9K_HC_MIX"}
    assert all(r2.value(k) == "stock" for k in changed) and r2.release == "v0.2.0" and v020.ok


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
    names its kernel variants itself: they must stay tp4-default's (all of them run on this backend), at TP 1
    and TP 2 alike; cpu-flash-next-tp2 leaves the fp8 hc mix off so that the
    bf16 one, which it supersedes, is served too, and the block-fp8 GEMM (interpreter cost; served at TP 1)."""
    reg = load_registry()

    def kernels(profile: str) -> set[str]:
        return {r.variant.knob for r in resolve(reg, profile).non_stock() if r.variant.implementation.op}

    not_on_cpu: set[str] = set()
    # the all-reduce variants run where vLLM all-reduces (TP >= 2): served at TP 2 by the cpu-smoke launch of
    # tests/plugin/test_serve_tp2.py (with --set, its thresholds made for the tiny model), not by these profiles
    all_reduce = {r.variant.knob for r in resolve(reg, "tp4-default").non_stock()
                  if r.variant.implementation.op == "allreduce"}
    assert all_reduce, "tp4-default switches an all-reduce variant on"
    want = kernels("tp4-default") - not_on_cpu - all_reduce
    assert want and kernels("cpu-flash-next") == want
    assert kernels("cpu-flash-next-tp2") == want - {"R9K_HC_FP8_DECODE", "R9K_FP8_QA"}
