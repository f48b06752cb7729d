"""Declared once: the variants' TOML names module, op, gate tests and extension point; the op table
(``r9k.kernels.ops``: the kernel folders it discovers, each op's ``fused_values``), the adapter table
(``registry/adapters.toml``) and the plugin's install code are checked against it here, and the check
itself is shown to fail for each kind of missing piece."""
from __future__ import annotations

import importlib

import pytest

from r9k.registry.availability import declaration_problems, load_adapters


@pytest.fixture(scope="module")
def op_table():
    from r9k.kernels import ops

    return ops.load_all()


def _legal(v) -> set[str]:
    return set(v.choices) if v.choices else ({"0", "1"} if v.type == "bool" else set())


def test_every_declared_module_op_gate_test_and_adapter_exists(registry, op_table):
    adapters = load_adapters()
    assert adapters.problems == []
    assert declaration_problems(registry.variants, adapters, op_table=op_table) == []


def test_the_op_table_is_the_tomls(registry, op_table):
    from r9k.kernels import ops

    declared = {v.implementation.op: v for v in registry.variants.values() if v.implementation.op}
    assert set(op_table) == set(declared), "an op without a variant, or a variant naming no registered op"
    import importlib

    # a kernel folder no variant serves yet says why (kernels/<op>/__init__.py: NOT_SERVED), and registers no op
    unserved = {m for m in ops.discover() if getattr(importlib.import_module(m), "NOT_SERVED", None)}
    assert all(len(importlib.import_module(m).NOT_SERVED) > 20 for m in unserved)
    assert set(ops.discover()) - unserved == {v.implementation.module for v in declared.values()}
    assert not unserved & {v.implementation.module for v in registry.variants.values()}
    for name, kop in op_table.items():
        v = declared[name]
        assert kop.variant == v.id
        # the fused values are every legal value but the stock one ("off")
        assert set(kop.fused_values) == _legal(v) - {v.stock, ""}, name


def test_every_adapter_exists_in_vllm_and_here(op_table):
    adapters = load_adapters()
    assert adapters.adapters, "at least the router GEMM's adapter"
    for ep, a in adapters.adapters.items():
        vmod = importlib.import_module(a.vllm_module)
        assert hasattr(vmod, a.vllm_class), f"{ep}: vLLM has no {a.vllm_module}.{a.vllm_class}"
        mod, _, attr = a.adapter.partition(":")
        obj = getattr(importlib.import_module(mod), attr)
        if a.install == "register_oot":
            assert isinstance(obj, type) and issubclass(obj, getattr(vmod, a.vllm_class)), ep
        else:
            assert callable(obj), ep
        for op in a.ops:
            assert op in op_table, f"{ep} runs op {op}, which the op table lacks"
    from r9k.plugin import install

    assert install.layers() == {ep: (a.vllm_module, a.vllm_class, a.adapter) for ep, a in adapters.adapters.items()}


@pytest.mark.parametrize("defect, field, expected", [
    ("module", {"module": "r9k.kernels.does_not_exist"}, "does not exist"),
    ("op", {"op": "no_such_op"}, "not in the op table"),
    ("gate", None, "no test"),
    ("adapter", {"extension_point": "pluggable_layer:no_such_layer"}, "has no entry"),
])
def test_the_check_fails_for_each_missing_piece(registry, op_table, defect, field, expected):
    v = registry.variants["router_gemm"]
    if defect == "gate":
        bad = v.model_copy(update={"gate": v.gate.model_copy(update={"tests": [
            "kernels/router/test_router.py::test_no_such_gate"]})})
    else:
        bad = v.model_copy(update={"implementation": v.implementation.model_copy(update=field)})
    problems = declaration_problems({"router_gemm": bad}, load_adapters(), op_table=op_table)
    assert problems and all(p[0] == "router_gemm" for p in problems)
    assert any(expected in p[2] for p in problems), problems


def test_an_adapter_whose_module_is_missing_is_found(tmp_path, registry):
    text = (load_adapters().path.read_text()
            .replace("r9k.plugin.layers.gate_linear:R9kGateLinear", "r9k.plugin.layers.nothing_here:X"))
    (tmp_path / "adapters.toml").write_text(text)
    bad = load_adapters(tmp_path / "adapters.toml")
    problems = declaration_problems({"router_gemm": registry.variants["router_gemm"]}, bad)
    assert any("adapter module r9k.plugin.layers.nothing_here does not exist" in p[2] for p in problems)
