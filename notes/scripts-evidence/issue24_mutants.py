"""Issue 24: source mutants of the two kernels against their gates under the Triton interpreter (the machinery
of tests/evidence/test_mutation.py, one pytest run per mutant, two at a time). Run: python notes/scripts-evidence/issue24_mutants.py"""
import sys, time
from concurrent.futures import ThreadPoolExecutor
sys.path.insert(0, "tests/evidence")
from test_mutation import _run_mutant, MUTANTS, CONTROL
from r9k.registry import load_registry
SG = "r9k.kernels._triton.skinny_gemm"
HK = "r9k.kernels.hc_mix.triton_kernel"
QK = "r9k.kernels.qsa_glue.triton_kernel"
mine = [m for m in MUTANTS if m[0] in ("hc_fp8_decode", "qsa_indexer_glue")] + [
    ("hc_fp8_decode", SG, "        acc = acc * sc[None, :]\n", "        acc = acc\n"),  # down scale dropped
    ("hc_fp8_decode", HK, "        acc = acc * sc[None, :]\n", "        acc = acc\n"),  # up scale dropped
    ("hc_fp8_decode", SG, "    y = to_bf16(acc, INTERPRET)\n", "    y = to_bf16(acc * 1.01, INTERPRET)\n"),
    ("hc_fp8_decode", HK, "y = ((t0 + t1) + t2) + t3", "y = ((t0 + t1) + t2) + t2"),  # a stream's term twice
    ("qsa_indexer_glue", QK, "o1 = _round_prod(y1 * cos, TRUNC) - _round_prod(y2 * sin, TRUNC)",
     "o1 = _round_prod(y1 * cos, TRUNC) + _round_prod(y2 * sin, TRUNC)"),  # rope sign
    ("qsa_indexer_glue", QK, "x2 = tl.load(x_row + HALF + j, mask=mj", "x2 = tl.load(x_row + HALF + j + 1, mask=mj"),  # off by one
    ("qsa_indexer_glue", QK, "w1 = 1.0 + tl.load(w_ptr + d", "w1 = 1.0 + 0.0 * tl.load(w_ptr + d"),  # weight dropped (pass-through dims)
    ("qsa_indexer_glue", QK, "r = tl.math.rsqrt(tl.sum(x * x, axis=0) / D + eps)", "r = tl.math.rsqrt(tl.sum(x * x, axis=0) / (D - 1) + eps)"),  # mean over D-1
    CONTROL,
    ("hc_fp8_decode", HK, "y = ((t0 + t1) + t2) + t3", "y = ((t0 + t1) + t2) + t3"),  # control
]
reg = load_registry()
t0 = time.time()
with ThreadPoolExecutor(max_workers=2) as pool:
    res = list(pool.map(lambda m: _run_mutant(reg, m), mine))
for m, r in zip(mine, res):
    print(("OK (gate failed, or control passed)" if r is None else "PROBLEM: " + r.splitlines()[0][:300]), "|", m[0], m[1].split(".")[-1], repr(m[3][:70]))
print(f"{time.time() - t0:.0f} s")
