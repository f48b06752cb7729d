"""The memory budget: KV capacity from the model's numbers, what each variant costs of it (formulas of the
model's dims, the TP size and the knob's value), and the error on every KV figure of the original stack.
Everything is computed through the model (registry/memory.py), never from a constant written here."""
import shutil
import tomllib
from pathlib import Path

import pytest

from r9k.registry import load_registry
from r9k.registry.memory import GIB, budget, cost_if_toggled
from r9k.registry.memory_check import FIGURES, table
from r9k.registry.resolve import resolve

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def reg():
    return load_registry()


def kv(reg, profile, **sets):
    return budget(reg, resolve(reg, profile, env={}, sets=sets)).kv_tokens


def costs(reg, profile, **sets):
    return {c.knob: c for c in budget(reg, resolve(reg, profile, env={}, sets=sets)).costs}


def test_hc_fp8_decode_charges_the_down_copy_once(reg):
    """At TP2 in v0.3.1 (R9K_HC_FP8_DOWN off) R9K_HC_FP8_DECODE holds the fp8 down copy; with
    R9K_HC_FP8_DOWN on (v0.3.2) the copy is that knob's and R9K_HC_FP8_DECODE costs nothing more."""
    v031 = dict(R9K_HC_FP8_DOWN="0", R9K_HC_FREE_BF16="0", R9K_HC_FP8_DECODE_MAXM="16")
    on, off = kv(reg, "tp2-default", **v031), kv(reg, "tp2-default", **v031, R9K_HC_FP8_DECODE="0")
    assert off - on > 0
    c = cost_if_toggled(reg, resolve(reg, "tp2-default", env={}, sets=v031), "hc_fp8_decode")
    assert c.tokens == pytest.approx(off - on, abs=1)
    # the copy is the same bytes whichever knob holds it
    down = costs(reg, "tp2-default")["R9K_HC_FP8_DOWN"].bytes
    assert "R9K_HC_FP8_DECODE" not in costs(reg, "tp2-default")
    assert down > costs(reg, "tp2-default", **v031)["R9K_HC_FP8_DECODE"].bytes
    assert kv(reg, "tp2-default", R9K_HC_FP8_DECODE="0") == kv(reg, "tp2-default")


def _with_dims(tmp_path, **dims):
    from r9k.registry.loader import PACKAGE_DIR

    root = tmp_path / "registry"
    shutil.copytree(PACKAGE_DIR, root, ignore=shutil.ignore_patterns("*.py", "__pycache__", "gates"))
    p = root / "models.toml"
    text = p.read_text()
    for k, v in dims.items():
        import re

        text, n = re.subn(rf"\b{k} = [\d_.]+", f"{k} = {v}", text, count=1)
        assert n == 1, k
    p.write_text(text)
    return load_registry(root)


def test_costs_follow_the_model_dims_and_tp(reg, tmp_path):
    """Doubling the hc modules doubles the hc copies' costs; the expert cache scales with 1/TP and the slots."""
    base = costs(reg, "tp2-default")
    big = load = _with_dims(tmp_path, hc_modules=200)
    twice = {c.knob: c for c in budget(big, resolve(big, "tp2-default", env={})).costs}
    for knob in ("R9K_HC_FP8", "R9K_HC_FREE_BF16"):
        assert twice[knob].bytes == 2 * base[knob].bytes, knob
    del load
    slots = costs(reg, "tp2-default", R9K_EXPERT_CACHE_SLOTS="135")["R9K_EXPERT_CACHE_SLOTS"].bytes
    assert base["R9K_EXPERT_CACHE_SLOTS"].bytes == pytest.approx(2 * slots, abs=1)
    assert "R9K_EXPERT_CACHE_SLOTS" not in costs(reg, "tp4-default")  # experts resident: no cache
    g4 = costs(reg, "tp4-default")["CGSIZES"].bytes
    g2 = costs(reg, "tp2-default")["CGSIZES"].bytes
    assert g2 == pytest.approx(2 * g4, abs=1)  # the same sizes, half the ranks
    big_graphs = costs(reg, "tp4-default", CGSIZES="1,2,4,8,16,32,64,128,256,512")["CGSIZES"].bytes
    assert big_graphs == pytest.approx(2 * g4, abs=1)  # the largest size doubled
    stock = costs(reg, "tp4-default", R9K_GDN_STATE="stock")["R9K_GDN_STATE"].bytes
    assert stock > 0 and "R9K_GDN_STATE" not in costs(reg, "tp4-default")


def test_every_knob_whose_memory_the_original_states_has_a_formula(reg):
    cat = tomllib.loads((DATA / "reference" / "knob-catalog.toml").read_text())
    by_budget = {"UTIL", "KVMEM"}  # the budget's own levers
    missing = []
    for k in cat["variant"]:
        if "memory_cost" not in k or k["knob"] in by_budget:
            continue
        mem = reg.variants[k["id"]].memory
        if mem is None or not (mem.formula or (mem.basis or "").startswith("not ")):
            missing.append(k["knob"])
    assert missing == []


def test_every_formula_evaluates_for_every_model_and_tp(reg):
    from r9k.registry.memory import budget_of

    for m in reg.models.values():
        for key in m.kv_bytes_per_token:
            tp = int(key[2:])
            for rel in reg.release_order():
                from r9k.registry.memory_check import values_at

                b = budget_of(reg, m.name, tp, 32.0, values_at(reg, rel, m.name, tp, {}))
                assert b is not None


def test_a_bad_formula_is_a_located_schema_error(r9kctl, registry_copy):
    f = registry_copy / "variants" / "decode.toml"
    text = f.read_text()
    old = "formula = \"(value == 1) * ((1 - on('R9K_HC_FP8_DOWN')) * hc_down_copy + (1 - on('R9K_HC_FP8')) * hc_up_copy)\""
    assert old in text
    line = text[:text.index(old)].count("\n") + 1
    f.write_text(text.replace(old, "formula = \"__import__('os').system('true')\""))
    code, out, err = r9kctl("--registry", str(registry_copy), "validate", "--all")
    assert code == 2 and "Traceback" not in err
    errs = [ln for ln in err.splitlines() if "error[" in ln]
    assert len(errs) == 1 and "decode.toml" in errs[0] and "not allowed in a memory formula" in errs[0], err
    assert int(errs[0].split(":")[1]) in (line, line - 1)


ROWS = None


@pytest.fixture(scope="module")
def rows(reg):
    return {r["figure"]: r for r in table(reg)}


# The figures issue 12 bounds. v0.3.0 and v0.3.1 at TP4 are checked against the decided record, the seed's
# range 442-475k (their point figures contradict each other: v0.3.1 adds a 0.32 GiB copy yet measured more);
# the fp8 down copy is no bound: its bytes come from the dims and its recorded tokens are shown beside.
MET = ["v0.3.0 TP4", "v0.3.1 TP4", "v0.3.2 TP4", "v0.3.1 TP2", "v0.3.2 TP2", "27B TP2 (KVMEM=9)"]
SHOWN = ["v0.3.1 TP2, fp8 down copy (R9K_HC_FP8_DECODE=1)"]


def test_error_table_meets_the_bounds(rows):
    assert set(MET) == {f.label for f in FIGURES if f.bound_pct is not None}
    for name in MET:
        assert rows[name]["ok"], rows[name]
    for name in SHOWN:  # shown with its error, no bound, and the record itself unchanged (never fitted)
        assert rows[name]["bound_pct"] is None and rows[name]["ok"] is None and rows[name]["original"] == 29789


def test_a_range_record_counts_the_distance_to_the_range():
    from r9k.registry.memory_check import Figure

    f = Figure("x", "m", 4, "v", 442575, "s", range=[442000, 475000])
    assert f.error_pct(450000) == 0.0 and f.error_pct(442000) == 0.0
    assert abs(f.error_pct(433160) - 100.0 * (433160 - 442000) / 442000) < 1e-9
    assert f.error_pct(490000) > 3.0


def test_fixed_kv_budget(reg):
    b = budget(reg, resolve(reg, "27b-tp2", env={}))
    assert b.fixed_kv_bytes == 9 * GIB
    assert b.kv_tokens == 9 * GIB // reg.models["qwen3.8-27b"].kv_bytes_per_token["tp2"]
    rs = resolve(reg, "27b-tp2", env={}, sets={"KVMEM": "40"})
    from r9k.registry.validate import Report, check_profile

    rep = Report()
    check_profile(reg, rs, rep)
    assert [d.code for d in rep.errors] == ["memory"]


def test_cpu_backend_kv_space_is_a_fixed_budget(reg):
    rs = resolve(reg, "cpu-smoke", env={})
    b = budget(reg, rs)
    assert b.fixed_kv_bytes == int(float(rs.extra_env["VLLM_CPU_KVCACHE_SPACE"]) * GIB)
    assert b.kv_tokens == b.fixed_kv_bytes // reg.models["tiny-qwen2-moe"].kv_bytes_per_token["tp1"]


def test_stock_costs_only_what_stock_vllm_holds(reg):
    b = budget(reg, resolve(reg, "stock", env={}))
    assert {c.knob for c in b.costs} <= {"CGSIZES", "NSEQ", "NBT"} and b.kv_tokens > 0
