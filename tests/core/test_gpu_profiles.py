"""The H200 profiles (profiles/gpu-*: notes/gpu-serve.md) validate here, against the vLLM the device machine runs
(0.26) and this machine's (0.32), and stay what their A/B comparison needs: the fused profile switches on exactly
tp4-default's kernel variants that its architecture has layers for, its twin has every knob at stock, and both
serve the same checkpoint with the same vLLM arguments."""
import json

import pytest

from r9k.plugin import tiny_model
from r9k.registry import load_registry
from r9k.registry.resolve import resolve
from r9k.registry.validate import validate

PAIRS = [("gpu-qwen2-moe", "gpu-qwen2-moe-stock")]
# the ops whose adapters install into vLLM 0.26's Qwen2-MoE layers (its MoERunner; its router is a plain
# ReplicatedLinear, not GateLinear; the other ops act on hyper-connections, GDN, QSA, block-fp8 linears and TP
# all-reduces)
QWEN2_MOE_OPS = {"moe_route", "shared_expert"}


@pytest.fixture(scope="module")
def reg():
    return load_registry()


@pytest.mark.parametrize("version", ["0.26", "0.32"])
@pytest.mark.parametrize("profile", [p for pair in PAIRS for p in pair])
def test_gpu_profile_validates_strict(reg, profile, version, monkeypatch):
    # the H200's gate records are imported here (unverified: a strict launch on this machine would refuse them);
    # accepted as the device's own launch sees them (scripts/gpu.sh serve re-runs them there first)
    from r9k.registry import envvars

    monkeypatch.setenv(envvars.ACCEPT_IMPORTED_GATES.name, "1")
    report = validate(reg, profile=profile, strict=True, vllm_version=version)
    # a gate whose test changed since the H200 last ran it is stale there (the ledger's rule; scripts/gpu.sh
    # serve re-runs the profile's gates on the device before it launches): allowed only when it is fresh here
    stale = [d for d in report.warnings if d.code == "gate" and "gate stale on cuda-h200" in d.message
             and "fresh on cpu-triton-interpret" in d.message]
    assert not report.errors and report.warnings == stale, [d.format() for d in report.diagnostics]
    rs = report.profiles[profile]
    assert rs.platform == "cuda-h200" and rs.tp == 1 and "--enforce-eager" not in rs.serve_args  # CUDA graphs on


@pytest.mark.parametrize("fused,stock", PAIRS)
def test_fused_profile_and_its_stock_twin(reg, fused, stock):
    f, s = resolve(reg, fused), resolve(reg, stock)
    assert s.non_stock() == [] and all(r.value == r.variant.stock for r in s.items.values())
    ops = {r.variant.implementation.op for r in f.non_stock()}
    tp4 = {r.variant.implementation.op for r in resolve(reg, "tp4-default").non_stock() if r.variant.implementation.op}
    assert ops and ops == QWEN2_MOE_OPS & tp4  # tp4-default's set, where the architecture has its layers
    assert (f.model, f.model_path, list(f.serve_args)) == (s.model, s.model_path, list(s.serve_args))


def test_the_h200_checkpoint_weighs_what_the_model_entry_says(reg):
    """models.toml's weight bytes of h200-qwen2-moe (the memory budget) from the recipe's own dimensions."""
    c = tiny_model.H200_QWEN2_MOE
    h, v, e = c["hidden_size"], c["vocab_size"], c["num_experts"]
    kv = c["num_key_value_heads"] * h // c["num_attention_heads"]
    layer = (2 * h * h + 2 * kv * h + h + 2 * kv + e * h + h + 3 * c["shared_expert_intermediate_size"] * h
             + e * 3 * c["moe_intermediate_size"] * h + 2 * h)
    params = 2 * v * h + h + c["num_hidden_layers"] * layer
    assert reg.models["h200-qwen2-moe"].weight_bytes_per_gpu["tp1"] == 2 * params
    assert json.loads(json.dumps(c))["architectures"] == ["Qwen2MoeForCausalLM"]
    assert tiny_model.recipe_hash("qwen2-moe-h200") != tiny_model.recipe_hash("qwen2-moe")


@pytest.mark.parametrize("dry", [False, True])
def test_a_gpu_profile_on_the_cpu_build_is_one_preflight_line_and_builds_nothing(r9kctl, tmp_path, dry):
    """Refused (or, dry, printed) before its 10 GB checkpoint is built: the model is made where it runs."""
    from r9k.registry import envvars
    from r9k.registry.vllm_interface import installed_version

    v = installed_version()
    if v is None or "+cpu" not in v:
        pytest.skip(f"needs vLLM's CPU build installed (found {v})")
    cache = tmp_path / "cache"
    rc, out, err = r9kctl("launch", "--profile", "gpu-qwen2-moe", *(["--dry-run"] if dry else []),
                          env={envvars.CACHE_DIR.name: str(cache)})
    assert not (cache / "models").exists() or not any((cache / "models").iterdir()), list((cache / "models").iterdir())
    assert "Traceback" not in err
    if dry:
        assert rc == 0 and "built in the user's cache at launch" in out + err, out + err
    else:
        lines = [ln for ln in err.splitlines() if "error[" in ln]
        assert rc == 2 and len(lines) == 1 and "error[preflight]" in lines[0] and "CPU build" in lines[0], err
        assert "profiles/gpu-qwen2-moe.toml:" in lines[0].split(": error[")[0]
