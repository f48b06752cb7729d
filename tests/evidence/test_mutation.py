"""Mutation test of the kernel gates: a deliberately wrong copy of each fused kernel must fail its gate.

Each mutant changes one term of a kernel (a 1% error in an epilogue, a rounding mode, a copied value) while
the module is imported (:mod:`r9k.r9kctl.evidence.mutate`; nothing on disk changes), then runs the variant's
declared gate tests through the gate runner (``r9kctl gate``'s, without recording) under the Triton CPU
interpreter, stopping at the first failure. A mutant passes this test only if its gate *fails* with a test
failure (not an import error: a mutation whose text no longer occurs in the kernel is reported as such).
"""
from __future__ import annotations

import ast
import importlib.util
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from r9k.registry import envvars
from r9k.registry import ledger as L
from r9k.registry import load_registry

E2E_MINUTES = 2  # the mutants' gate runs: 146 s under load 5-10 on 2026-12-01: tests/conftest.py runs it early (no server; slow)

# Checked without importing them: importing triton here, before the kernels' TRITON_INTERPRET is set, would
# change how other tests in this process run the kernels.
pytestmark = pytest.mark.skipif(not (importlib.util.find_spec("torch") and importlib.util.find_spec("triton")),
                                reason="needs torch and triton")

TK = "r9k.kernels.{}.triton_kernel"

# variant, kernel module (a folder's triton_kernel, or a full module name), old text, new text (every
# occurrence is replaced)
MUTANTS = [
    ("router_gemm", "r9k.kernels._triton.skinny_gemm", "    y = to_bf16(acc, INTERPRET)\n", "    y = to_bf16(acc * 1.01, INTERPRET)\n"),
    ("moe_fused_routing", "router", "wv = tl.where(den > 0.0, wv / den, 0.0)",
     "wv = tl.where(den > 0.0, wv / den * 1.01, 0.0)"),
    # the fused kernel's sigmoid term (_sigmoid itself is in hc_mix/elementwise.py, shared with the stock path)
    ("hc_decode_mix", "hc_mix", "return _sigmoid(g) * xv", "return 1.01 * _sigmoid(g) * xv"),
    ("hc_fp8_decode", "hc_mix", "return _sigmoid(g) * xv", "return 1.01 * _sigmoid(g) * xv"),
    ("fp8_block_linears", "fp8_block", "to_bf16(acc, INTERPRET), mask=out_mask)",
     "to_bf16(acc * 1.01, INTERPRET), mask=out_mask)"),
    ("fp8_block_fused_act_quant", "fp8_block", "q = to_e4m3(x * r[:, None], INTERPRET)",
     "q = to_e4m3(x * r[:, None] * 1.01, INTERPRET)"),
    ("qsa_indexer_glue", "r9k.kernels._triton.norm_rope", "rne_bf16(o1).to(tl.bfloat16)",
     "rne_bf16(o1 * 1.01).to(tl.bfloat16)"),
    ("fused_qk_norm_rope", "qk_rope", "tl.store(g_ptr + t * s_g + h * D + d, gv, mask=md)",
     "tl.store(g_ptr + t * s_g + h * D + d, gv * 1.01, mask=md)"),
    # the GEMM's epilogue (kernels/shared_expert/blocks.py: the building blocks; on the CPU the stock path
    # runs the torch emulation, so the mutant changes the fused path only there)
    ("shared_expert_fused", "r9k.kernels.shared_expert.blocks", "rne_bf16(res).to(tl.bfloat16), mask=omask)",
     "rne_bf16(res * 1.01).to(tl.bfloat16), mask=omask)"),
    ("hc_combine_norm_fused", "hc_norm", "y = rne_bf16((x * r) * (1.0 + w))", "y = rne_bf16((x * r) * (1.01 + w))"),
    ("gdn_spec_decode_core", "gdn_decode", "rne_bf16(O * rr[:, None] * w[None, :] * g)",
     "rne_bf16(O * rr[:, None] * w[None, :] * g * 1.01)"),
]

# Mutants of a gate's stock reference (the op's stock path), one for every op of the op table (kernels/*/__init__.py,
# read without importing it): the gate checks the stock path against the declared semantics too, so a wrong stock
# path fails the gate instead of loosening the fused kernel's bound (router_gemm's 1.5x err_stock) unseen. Op ->
# (variant, module, old text, new text); the old text is in the stock function itself
# (test_every_stock_reference_has_a_mutant).
STOCK_MUTANTS = {
    "hc_combine_norm": ("hc_combine_norm_fused", "r9k.kernels.hc_norm.reference",
                        "g = 2.0 * torch.sigmoid(inj.float() / hc)", "g = 2.02 * torch.sigmoid(inj.float() / hc)"),
    "router_gemm": ("router_gemm", "r9k.kernels.router.reference", "    y = F.linear(x, w)\n",
                    "    y = F.linear(x, w) * 1.01\n"),
    "moe_route": ("moe_fused_routing", "r9k.kernels.router.reference", "    p = torch.softmax(logits.float(), dim=-1)\n",
                  "    p = torch.softmax(logits.float(), dim=-1) * 1.01\n"),
    "fp8_block_linear": ("fp8_block_fused_act_quant", "r9k.kernels.fp8_block.triton_kernel",
                         "qa[m0:m1], sa[m0:m1], w_q", "qa[m0:m1], sa[m0:m1] * 1.01, w_q"),
    "gdn_decode": ("gdn_spec_decode_core", "r9k.kernels.gdn_decode.reference",
                   "    y = y.to(torch.bfloat16)\n    return into(out, y)",
                   "    y = (y * 1.01).to(torch.bfloat16)\n    return into(out, y)"),
    "hc_mix": ("hc_decode_mix", "r9k.kernels.hc_mix.reference", "    buf = F.linear(xn, w_down)\n",
               "    buf = F.linear(xn, w_down) * 1.01\n"),
    "hc_mix_fp8": ("hc_fp8_decode", "r9k.kernels.hc_mix.reference", "    buf = _w8a16(xn, down_q, down_s)\n",
                   "    buf = _w8a16(xn, down_q, down_s) * 1.01\n"),
    "qk_norm_rope": ("fused_qk_norm_rope", "r9k.kernels.qk_rope.reference",
                     "    q = gemma_rmsnorm(q.view(T, hq, D), q_weight, eps)\n",
                     "    q = gemma_rmsnorm(q.view(T, hq, D), q_weight, eps) * 1.01\n"),
    "qsa_glue": ("qsa_indexer_glue", "r9k.kernels.qsa_glue.reference", "    y = gemma_rmsnorm(x, weight, eps)\n",
                 "    y = gemma_rmsnorm(x, weight, eps) * 1.01\n"),
    "shared_expert": ("shared_expert_fused", "r9k.kernels.shared_expert.reference", "g = torch.sigmoid(gl)",
                      "g = 1.01 * torch.sigmoid(gl)"),
}

# The same machinery with a mutation that changes nothing: the gate must pass.
CONTROL = ("qsa_indexer_glue", "r9k.kernels._triton.norm_rope", "rne_bf16(o1).to(tl.bfloat16)",
           "rne_bf16(o1).to(tl.bfloat16)")


#: The all-reduce variants' gates run their schedules in spawned gloo ranks (worker processes that import the
#: module afresh), which this harness's in-process mutation cannot reach; their gate file checks itself against
#: a broken codec (``test_bound_catches_a_broken_codec``) and every schedule against stock in the ranks. Not
#: mutated here (a limitation, notes/evidence.md), and only while their gates stay in that one file.
SPAWNED_RANKS = ("r9k.kernels.allreduce", "kernels/allreduce/test_allreduce.py::")


def test_every_fused_kernel_has_a_mutant():
    """Every variant with gate tests and a kernel of its own is mutated here (a new kernel needs a mutant)."""
    reg = load_registry()
    gated = {vid for vid, v in reg.variants.items()
             if L.declared_tests(v) and getattr(v.implementation, "module", None)}
    module, tests = SPAWNED_RANKS
    spawned = {vid for vid in gated if reg.variants[vid].implementation.module == module}
    for vid in spawned:
        assert all(t.startswith(tests) for t in L.declared_tests(reg.variants[vid])), vid
    gated -= spawned
    assert gated <= {m[0] for m in MUTANTS}, f"no mutant for {sorted(gated - {m[0] for m in MUTANTS})}"


def _stock_references() -> dict:
    """Op -> (variant, stock module, the stock function's source) from every ``register(KernelOp(...))`` of
    kernels/*/__init__.py, by reading the files (nothing imported)."""
    root = Path(__file__).resolve().parents[2] / "kernels"
    out = {}
    for init in sorted(root.glob("*/__init__.py")):
        for node in ast.walk(ast.parse(init.read_text())):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "KernelOp"):
                continue
            kw = {k.arg: k.value for k in node.keywords}
            stock = kw["stock"]
            assert isinstance(stock, ast.Attribute) and isinstance(stock.value, ast.Name), ast.dump(stock)
            mod = f"r9k.kernels.{init.parent.name}.{stock.value.id}"
            tree = ast.parse(src := (init.parent / f"{stock.value.id}.py").read_text())
            fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == stock.attr)
            out[kw["name"].value] = (kw["variant"].value, mod, ast.get_source_segment(src, fn))
    return out


def test_every_stock_reference_has_a_mutant():
    """Every op's stock reference is mutated here, in the stock function itself, and its gate must catch it (a new
    op needs a stock mutant too); the all-reduce's stock runs in spawned ranks (SPAWNED_RANKS)."""
    refs = _stock_references()
    assert len(refs) >= 11, sorted(refs)
    spawned = {op for op, (_, mod, _) in refs.items() if mod.startswith(SPAWNED_RANKS[0] + ".")}
    assert spawned == {"allreduce"}, spawned
    missing = set(refs) - spawned - set(STOCK_MUTANTS)
    assert not missing, f"no stock mutant for {sorted(missing)}"
    for op, (variant, module, old, new) in STOCK_MUTANTS.items():
        want_variant, want_module, source = refs[op]
        assert (variant, module) == (want_variant, want_module), op
        assert old in source and old != new, f"{op}: the mutant's text is not in {module}'s stock function"


def _run_mutant(reg, mutant):
    from r9k.r9kctl.evidence import gate as G

    variant, kernel, old, new = mutant
    module = kernel if kernel.startswith("r9k.") else TK.format(kernel)
    env = {envvars.MUTATE.name: json.dumps([{"module": module, "old": old, "new": new}]),
           "PYTEST_PLUGINS": "r9k.r9kctl.evidence.mutate", "TRITON_INTERPRET": "1"}
    run = G.run(reg, G.plan(reg, names=[variant]), record=False, pytest_args=["-x"], timeout_s=240, env=env)
    (rec,) = run.records
    errors = {n: o for n, o in rec.outcomes.items() if o in (L.ERROR, L.NOT_FOUND)}
    if errors or run.collect_errors:
        return f"{variant}: the mutant did not load: {run.collect_errors or errors}\n{run.log[-1500:]}"
    failed = [n for n, o in rec.outcomes.items() if o == L.FAILED]
    if old == new:  # the control: the harness itself must leave a correct kernel passing
        return f"control {variant}: the unmutated kernel failed {failed}\n{run.log[-1500:]}" if failed else None
    if not failed:
        return f"{variant}: its gate passed a kernel with {new!r} ({rec.outcomes})"
    return None


def test_mutants_fail_their_gates():
    """All mutants, two pytest runs at a time (each one pytest process, stopping at its first failure)."""
    reg = load_registry()
    with ThreadPoolExecutor(max_workers=2) as pool:
        problems = [p for p in pool.map(lambda m: _run_mutant(reg, m), MUTANTS + list(STOCK_MUTANTS.values()) + [CONTROL]) if p]
    assert not problems, "\n".join(problems)
