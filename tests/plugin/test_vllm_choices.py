"""What vLLM chose per layer vs the profile's vLLM switches (plugin/report.py), on a small stand-in model
built of vLLM's own CustomOp class and objects shaped as vLLM 0.32's layers (attention ``attn_backend`` /
``impl``, fused-MoE ``quant_method.unquantized_backend``); the real model is tests/plugin/test_vllm_choices_e2e.py."""
from __future__ import annotations

import enum
import sys
from types import ModuleType, SimpleNamespace as NS

import pytest

from r9k.plugin import report
from r9k.plugin.startup import StartupError
from r9k.registry.resolve import resolve

torch = pytest.importorskip("torch")


class _Backend:
    def __init__(self, name):
        self._n = name

    def get_name(self):
        return self._n


class _MoeBackend(enum.Enum):
    CPU = "cpu"
    TRITON = "triton"


class CPUAttentionImpl:
    pass


class UnquantizedFusedMoEMethod:
    def __init__(self, be):
        self.unquantized_backend = be


def _custom_op(name, path):
    from vllm.model_executor.custom_op import CustomOp

    cls = type(f"Fake_{name}", (CustomOp,), {"name": name, "forward_native": lambda self, x: x})
    m = object.__new__(cls)
    torch.nn.Module.__init__(m)
    m._forward_method = getattr(m, path)
    return m


def _model(attn="CPU_ATTN", moe=_MoeBackend.CPU):
    root = torch.nn.Module()
    for i in range(2):
        layer = torch.nn.Module()
        att = torch.nn.Module()
        att.attn_backend, att.impl = _Backend(attn), CPUAttentionImpl()
        layer.add_module("attn", att)
        experts = torch.nn.Module()
        experts.moe_config = object()
        experts.quant_method = UnquantizedFusedMoEMethod(moe)
        experts.local_num_experts, experts.intermediate_size_per_partition = 8, 64
        layer.add_module("experts", experts)
        layer.add_module("norm", _custom_op("rms_norm", "forward_cpu"))
        layer.add_module("act", _custom_op("silu_and_mul", "forward_native"))
        root.add_module(f"l{i}", layer)
    return root


def _cfg(enabled=("rms_norm",), disabled=("silu_and_mul",)):
    return NS(compilation_config=NS(enabled_custom_ops=set(enabled), disabled_custom_ops=set(disabled),
                                    custom_ops=["none", "+rms_norm"]),
              kernel_config=NS(moe_backend="auto", enable_jit_warmup=True))


@pytest.fixture(scope="module")
def reg():
    from r9k.registry import load_registry

    return load_registry()


def test_read_model_lists_choices_per_layer_kind():
    ch = report.read_model(_model(), _cfg())
    assert ch["layers"]["attention"] == {"CPU_ATTN": {"layers": 2, "first": "l0.attn", "impl": "CPUAttentionImpl"}}
    moe = ch["layers"]["moe"]["CPU"]
    assert moe["layers"] == 2 and moe["method"] == "UnquantizedFusedMoEMethod"
    assert ch["custom_ops"]["rms_norm"] == {"layers": 2, "path": "forward_cpu", "first": "l0.norm", "enabled": True}
    assert ch["custom_ops"]["silu_and_mul"]["enabled"] is False
    assert "not used" in ch["moe_tuned_config"]["backend CPU"]["source"]  # the CPU MoE reads no Triton config


def test_requested_vs_chosen_and_the_flip(reg, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_ATTN_SPLIT_KV", "0")
    ch = report.read_model(_model(), _cfg())
    rs = resolve(reg, "cpu-smoke", env={})  # CUSTOM_OP_RMS_NORM="+", VLLM_CPU_ATTN_SPLIT_KV=0
    rows = {r["knob"]: r for r in report.choices_compare(rs, ch, _cfg())}
    assert rows["CUSTOM_OP_RMS_NORM"]["state"] == "applied" and rows["CUSTOM_OP_RMS_NORM"]["layer"] == "custom-op"
    sk = rows["VLLM_CPU_ATTN_SPLIT_KV"]
    assert sk["state"] == "applied" and sk["chosen"].startswith("0 ") and "CPU_ATTN (2 layer(s))" in sk["note"]
    # flipped: the same choices no longer match
    flipped = resolve(reg, "cpu-smoke", env={}, sets={"CUSTOM_OP_RMS_NORM": "-", "VLLM_CPU_ATTN_SPLIT_KV": "1"})
    rows = {r["knob"]: r for r in report.choices_compare(flipped, ch, _cfg())}
    assert rows["CUSTOM_OP_RMS_NORM"]["state"] == "mismatch"
    assert rows["VLLM_CPU_ATTN_SPLIT_KV"]["state"] == "mismatch"  # the server's environment says 0
    # an op the model does not have: unverified, not applied
    other = resolve(reg, "cpu-smoke", env={}, sets={"CUSTOM_OP_GELU_AND_MUL": "-"})
    rows = {r["knob"]: r for r in report.choices_compare(other, ch, _cfg())}
    assert rows["CUSTOM_OP_GELU_AND_MUL"]["state"] == "unverified"


def test_a_backend_vllm_did_not_choose_is_a_mismatch(reg):
    ch = report.read_model(_model(attn="CPU_ATTN", moe=_MoeBackend.CPU), _cfg())
    rs = resolve(reg, "cpu-smoke", env={}, sets={"ATTENTION_BACKEND": "FLEX_ATTENTION", "MOE_BACKEND": "triton"})
    rows = {r["knob"]: r for r in report.choices_compare(rs, ch, _cfg())}
    assert rows["ATTENTION_BACKEND"]["state"] == "mismatch" and rows["ATTENTION_BACKEND"]["chosen"] == "CPU_ATTN"
    assert rows["MOE_BACKEND"]["state"] == "mismatch"
    ch = report.read_model(_model(moe=_MoeBackend.TRITON), _cfg())
    rows = {r["knob"]: r for r in report.choices_compare(rs, ch, _cfg())}
    assert rows["MOE_BACKEND"]["state"] == "applied"


def test_strict_refuses_a_choice_vllm_did_not_make(reg, monkeypatch):
    import r9k.plugin as plugin

    rs = resolve(reg, "cpu-smoke", env={}, sets={"CUSTOM_OP_RMS_NORM": "-"}, strict=True)
    monkeypatch.setattr(report, "_active", NS(rs=rs, hash=rs.hash))
    runner = NS(model=_model(), vllm_config=_cfg())
    with pytest.raises(StartupError) as exc:
        report.on_model_built(runner)
    assert any("error[not-chosen]: CUSTOM_OP_RMS_NORM" in ln for ln in exc.value.lines)
    assert report.choices_current()["mismatches"]  # recorded before the refusal
    rs = resolve(reg, "cpu-smoke", env={}, sets={"CUSTOM_OP_RMS_NORM": "-"})  # not strict: recorded, serves
    monkeypatch.setattr(report, "_active", NS(rs=rs, hash=rs.hash))
    report.on_model_built(runner)
    assert report.choices_current()["mismatches"][0]["knob"] == "CUSTOM_OP_RMS_NORM"


def test_the_hook_wraps_load_model_once(monkeypatch):
    seen = []
    monkeypatch.setattr(report, "on_model_built", seen.append)

    class Runner:
        def load_model(self):
            self.model = "m"

    class Sub(Runner):
        def load_model(self):
            super().load_model()

    mod = NS(GPUModelRunner=Runner, CPUModelRunner=Sub)
    report._wrap_runner(mod, "GPUModelRunner")
    report._wrap_runner(mod, "CPUModelRunner")
    report._wrap_runner(mod, "CPUModelRunner")  # idempotent
    r = Sub()
    r.load_model()
    assert seen == [r]


def test_tuned_config_sources(tmp_path, monkeypatch):
    f = tmp_path / "tuned_cpu.json"
    f.write_text("{}")
    a, b = ModuleType("r9k.kernels.fake_a"), ModuleType("r9k.kernels.fake_b")
    a.TUNED_FILE, b.TUNED_FILE = str(f), str(tmp_path / "tuned_h200.json")
    monkeypatch.setitem(sys.modules, a.__name__, a)
    monkeypatch.setitem(sys.modules, b.__name__, b)
    t = report.r9k_tuned()
    assert t["fake_a"]["source"] == "tuned file" and t["fake_a"]["device"] == "cpu"
    assert t["fake_b"]["source"].startswith("default rules") and t["fake_b"]["file"] is None
    # vLLM's Triton MoE config: its own lookup (the user folder first)
    got = report.tuned_moe_config(8, 64, None)
    assert got["source"].startswith("default rules")
    (tmp_path / got["file_name"]).write_text("{}")
    monkeypatch.setenv("VLLM_TUNED_CONFIG_FOLDER", str(tmp_path))
    got = report.tuned_moe_config(8, 64, None)
    assert got["source"] == "tuned file" and got["file"] == str(tmp_path / got["file_name"])


def test_the_launch_snapshot_carries_the_switches(reg, monkeypatch):
    """Every process of a launch (engine core, workers) reads the carried manifest: the same rows."""
    from r9k.registry import manifest

    monkeypatch.setenv("VLLM_CPU_ATTN_SPLIT_KV", "0")
    rs = resolve(reg, "cpu-smoke", env={})
    light = manifest.from_carrier(manifest.carrier(manifest.from_resolved(rs), "s"))[0]
    ch = report.read_model(_model(), _cfg())
    assert report.choices_compare(light, ch, _cfg()) == report.choices_compare(rs, ch, _cfg())
    assert {r["knob"] for r in report.choices_compare(light, ch, _cfg())} == {"CUSTOM_OP_RMS_NORM", "VLLM_CPU_ATTN_SPLIT_KV"}


def test_the_v2_model_runner_is_hooked_where_vllm_imports_it(monkeypatch):
    """vLLM 0.26 (Qwen2-MoE) and 0.32/0.33 on GPUs run the V2 runner (``vllm.v1.worker.gpu.model_runner``); 0.34
    has no other. Its module imported after install_hooks gets a wrapped load_model, as the V1 modules do."""
    from r9k.plugin import install

    calls = []
    monkeypatch.setattr(install, "HOOKS", NS(add=lambda mod, cb: calls.append((mod, cb))))
    monkeypatch.setattr(report, "HOOKS", install.HOOKS)
    report.install_choice_hooks()
    hooked = dict(calls)
    assert "vllm.v1.worker.gpu.model_runner" in hooked and "vllm.v1.worker.gpu_model_runner" in hooked

    class V2:
        def load_model(self, load_dummy_weights=False, *a, **k):
            self.model = "m"

    seen = []
    monkeypatch.setattr(report, "on_model_built", seen.append)
    hooked["vllm.v1.worker.gpu.model_runner"](NS(GPUModelRunner=V2))
    r = V2()
    r.load_model(load_dummy_weights=True)
    assert seen == [r] and getattr(V2.load_model, "_r9k_choices", False)


def test_a_fused_variant_whose_layer_class_the_model_lacks_is_named_and_strict_refuses_it(reg, monkeypatch):
    """vLLM 0.26's Qwen2-MoE builds its router as a ReplicatedLinear: R9K_ROUTER=r9k then installs in no layer.
    The start says so (one line), and strict mode refuses to serve (error[not-installed])."""
    import r9k.plugin as plugin
    from r9k.plugin import dispatch
    from r9k.registry.manifest import Impl

    plan = NS(state=Impl.FUSED, pluggable=True, op="router_gemm", layers=0, knob="R9K_ROUTER", value="r9k",
              adapter=NS(vllm_class="GateLinear"), extension_point="pluggable_layer:gate_linear")
    monkeypatch.setattr(dispatch, "get_table", lambda: NS(plans={"router": plan}))
    emitted = []
    monkeypatch.setattr(report, "emit", lambda level, ln: emitted.append(ln))
    runner = NS(model=_model(), vllm_config=_cfg())
    for strict in (False, True):
        rs = resolve(reg, "cpu-smoke", env={}, strict=strict)
        monkeypatch.setattr(report, "_active", NS(rs=rs, hash=rs.hash))
        if not strict:
            report.on_model_built(runner)
            assert any("NOT INSTALLED R9K_ROUTER=r9k: the model built no GateLinear layer" in ln for ln in emitted)
            assert report.choices_current()["not_installed"]
        else:
            with pytest.raises(StartupError) as exc:
                report.on_model_built(runner)
            assert exc.value.lines[0].startswith("error[not-installed]: R9K_ROUTER=r9k")
    plan.layers = 1  # one layer asked for it: nothing to say
    rs = resolve(reg, "cpu-smoke", env={})
    monkeypatch.setattr(report, "_active", NS(rs=rs, hash=rs.hash))
    report.on_model_built(runner)
    assert report.choices_current()["not_installed"] == []
