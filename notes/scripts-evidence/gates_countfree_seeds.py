"""The count-free gate checks (2026-12-02: hc_norm's out, qk_rope, qsa_glue) over fresh seeds at the GPU's real
shapes, plus the seed that failed CI under the old count rule; each case prints failures / seeds and the time.
Run on the device from the repository root: python3 notes/scripts-evidence/gates_countfree_seeds.py [se] [N]
(``se``: only the shared expert's staged check)."""
import itertools, sys, time, torch
ARGS = sys.argv[1:]
N = int(ARGS[-1]) if ARGS and ARGS[-1].isdigit() else 200
sys.argv = sys.argv[:1]
from r9k.kernels.hc_norm import test_hc_norm as hn
from r9k.kernels.qk_rope import test_qk_rope as qk
from r9k.kernels.qsa_glue import test_qsa_glue as tq
from r9k.kernels.shared_expert import test_shared_expert as se
from r9k.kernels.conftest import _poison


def hc_norm(M):
    def f(seed):
        g = torch.Generator(device="cuda"); g.manual_seed(seed)
        hn._check(M, 2560, g, "cuda", _poison, shared=False, strided=True, combine=True)
    return f


def qk_rope(T, hq):
    return lambda seed: qk._check(qk._case(seed, "cuda", T, hq, 1), seed, _poison)


def qsa(T):
    def f(seed):
        tq._counter = itertools.count()
        tq._check(*tq._case(seed, T, 4, 128, 32, "1d"))
        tq._check(*tq._case(seed, T, 4, 128, 64, "mrope", sections=(11, 11, 10)))
    return f


def shared_expert(M, I):
    def f(seed):
        g = torch.Generator().manual_seed(seed)
        W = se._weights(g, "cuda", 2560, I)
        se._gate_check(se._draws(g, "cuda", M, 2560), W, seed, _poison)
    return f


cases = [("hc_norm M=1", hc_norm(1), [1289983731]), ("hc_norm M=64", hc_norm(64), []),
         ("qk_rope T=64 TP4", qk_rope(64, 6), []), ("qk_rope T=1 TP2", qk_rope(1, 12), []),
         ("qsa_glue T=64", qsa(64), []),
         ("shared_expert M=4 TP4", shared_expert(4, 160), []), ("shared_expert M=64 TP2", shared_expert(64, 320), [])]
if ARGS and ARGS[0] == "se":  # the shared expert's staged check only (added after the first H200 call)
    cases = cases[-2:]
for name, fn, extra in cases:
    t0 = time.time(); fails = []
    for s in extra + list(range(N)):
        try:
            fn(s)
        except AssertionError as e:
            fails.append((s, str(e).splitlines()[0][:160]))
    print(f"{name}: {len(fails)} of {N + len(extra)} seeds fail ({time.time() - t0:.0f} s)", fails[:4], flush=True)
