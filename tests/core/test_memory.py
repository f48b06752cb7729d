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


# ------------------------------------------------------------------ hybrid models: vLLM's page arithmetic


# vLLM 0.32's "CPU KV cache size" line of the three hybrid cpu profiles' launches (VLLM_CPU_KVCACHE_SPACE=1,
# --max-model-len 512): server logs of tests/plugin/test_e2e_flash_next.py and test_e2e_adapters.py of
# 2026-12-01 (notes/flash-next.md, "The KV gap"). The registry predicted 262,144 / 524,288 / 1,048,576.
VLLM_LOGGED = {"cpu-flash-next": 419_430, "cpu-flash-next-tp2": 838_860, "cpu-qwen3-next": 524_288}


@pytest.mark.parametrize("profile", sorted(VLLM_LOGGED))
def test_hybrid_kv_capacity_is_what_vllm_logged(reg, profile):
    assert kv(reg, profile) == VLLM_LOGGED[profile]


def _vllm_capacity(layout, kv_bytes: int, attn_layers: int, gdn: dict, kv_heads: int, head_dim: int, tp: int):
    """vLLM's own grouping and capacity (v1/core/kv_cache_utils.py) for specs built from a tiny checkpoint's
    config: one FullAttentionSpec per attention layer, one GDN MambaSpec (conv state bf16, recurrent state fp32
    as vLLM's CPU backend keeps it) per state layer, the state page padded to the attention page."""
    import torch
    from types import SimpleNamespace

    from vllm.config import VllmConfig
    from vllm.v1.core import kv_cache_utils as ku
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

    block = layout.block_size
    conv_ch = (2 * gdn["linear_num_key_heads"] * gdn["linear_key_head_dim"]
               + gdn["linear_num_value_heads"] * gdn["linear_value_head_dim"]) // tp
    shapes = ((conv_ch, gdn["linear_conv_kernel_dim"] - 1),
              (gdn["linear_num_value_heads"] // tp, gdn["linear_key_head_dim"], gdn["linear_value_head_dim"]))
    mode = "align" if layout.state_blocks == 2 else "none"
    specs = {}
    for i in range(attn_layers):
        specs[f"attn.{i}"] = FullAttentionSpec(block_size=block, num_kv_heads=kv_heads // tp, head_size=head_dim,
                                               dtype=torch.bfloat16)
    page = specs["attn.0"].page_size_bytes
    for i in range(layout.state_layers):
        specs[f"gdn.{i}"] = MambaSpec(block_size=block, shapes=shapes, dtypes=(torch.bfloat16, torch.float32),
                                      page_size_padded=page, mamba_cache_mode=mode)
    cfg = VllmConfig()
    cfg.cache_config.mamba_cache_mode = mode
    cfg.cache_config.kv_cache_layout = "LBHNC"  # what vLLM's CPU engine resolves (its log: "Using LBHNC")
    cfg.model_config = SimpleNamespace(max_model_len=layout.max_model_len, use_mla=False)
    kc = ku.get_kv_cache_config_from_groups(cfg, ku.get_kv_cache_groups(cfg, specs), kv_bytes)
    state_bytes = specs["gdn.0"].real_page_size_bytes
    return kc.num_blocks, ku.get_kv_cache_capacity(cfg, kc)[0], page // block, state_bytes


@pytest.mark.parametrize("profile, sets, args", [
    ("cpu-flash-next", {}, []), ("cpu-flash-next-tp2", {}, []), ("cpu-qwen3-next", {}, []),
    ("cpu-flash-next", {}, ["--max-model-len", "300"]), ("cpu-flash-next-tp2", {}, ["--no-enable-prefix-caching"]),
    ("cpu-qwen3-next", {}, ["--max-model-len=1000", "--no-enable-prefix-caching"]),
])
def test_hybrid_kv_follows_vllms_own_arithmetic(reg, profile, sets, args):
    """The registry's hybrid layout (block size, blocks, capacity) against vLLM 0.32's grouping and capacity
    functions run on specs built from the tiny checkpoint's config; the registry's per-layer numbers
    (attention bytes a token, a GDN layer's state) against those specs."""
    pytest.importorskip("vllm")
    from r9k.plugin.models.tiny_flash_next import CONFIG as FN
    from r9k.plugin.tiny_model import QWEN3_NEXT_CONFIG as Q3

    rs = resolve(reg, profile, env={}, sets=sets)
    rs.serve_args = list(rs.serve_args) + args
    b = budget(reg, rs)
    h = b.hybrid
    cfg = FN if rs.model == "tiny-flash-next" else Q3
    attn_layers = sum(t != "linear_attention" for t in cfg["layer_types"])
    assert (h.attention_layers, h.state_layers) == (attn_layers, cfg["layer_types"].count("linear_attention"))
    blocks, tokens, attn_bpt, state = _vllm_capacity(h, b.kv_bytes, attn_layers, cfg, cfg["num_key_value_heads"],
                                                     cfg["head_dim"], rs.tp)
    assert (h.attn_bytes_per_token, h.state_bytes) == (attn_bpt, state)
    assert (h.blocks(b.kv_bytes), b.kv_tokens) == (blocks, tokens)


def test_a_hybrid_layout_whose_tp_keys_differ_is_a_schema_error():
    from pydantic import ValidationError

    from r9k.registry.schema import ModelSpec

    base = dict(name="m", description="d", weight_bytes_per_gpu={"tp1": 1}, kv_bytes_per_token={"tp1": 1024},
                basis="b")
    ModelSpec(**base, kv_hybrid=dict(attention_layers=1, state_layers=3, state_bytes={"tp1": 7}, max_model_len=8))
    with pytest.raises(ValidationError, match="same"):
        ModelSpec(**base, kv_hybrid=dict(attention_layers=1, state_layers=3, state_bytes={"tp2": 7}, max_model_len=8))
    with pytest.raises(ValidationError, match="whole number"):
        ModelSpec(**base, kv_hybrid=dict(attention_layers=3, state_layers=1, state_bytes={"tp1": 7}, max_model_len=8))



def test_the_budget_charges_the_utilization_vllm_is_given(reg):
    """UTIL at stock passes nothing, so vLLM takes a profile's own ``--gpu-memory-utilization`` from serve_args
    (gpu-qwen2-moe: 0.4, both servers on one H200); the budget charges that, not vLLM's default (which made the
    prediction 2.7x vLLM's allocation on the H200); a UTIL set off its stock is what the launch passes."""
    rs = resolve(reg, "gpu-qwen2-moe")
    util = next(r for r in rs.items.values() if r.variant.knob == "UTIL")
    assert util.value == util.variant.stock and "0.4" in rs.serve_args
    assert budget(reg, rs).utilization == 0.4
    assert budget(reg, resolve(reg, "gpu-qwen2-moe", sets={"UTIL": "0.5"})).utilization == 0.5
