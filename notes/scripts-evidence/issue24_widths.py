"""Issue 24: how wide the derived ranges of the two gates are at the real shapes (CPU, stock/reference values; no
kernel runs). python notes/scripts-evidence/issue24_widths.py [SEEDS] (repository root, .venv; default 5)"""
import itertools, os, sys
os.environ.setdefault("TRITON_INTERPRET", "1")
import torch
from r9k.kernels._testing import bf16_ulp
from r9k.kernels.hc_mix import reference as href, test_hc_mix as th
from r9k.kernels.qsa_glue import reference as qref, test_qsa_glue as tq

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5
G, R = th.REAL, th.REAL["R"]


def share(m):
    return f"{m.double().mean().item():.2%}"


for s in range(N):
    g = torch.Generator().manual_seed(s)
    xn, wd, wu = th._inputs(16, G["HD"], R, G["ND"], g, "cpu")
    p = href.prepare_hc_fp8(wd, wu)
    lo, hi = (t[:, :R + 4] for t in th._dot_range(xn, p[0], p[1]))
    v = (lo + hi) / 2
    nv = ((th._rn_bf16(hi) - th._rn_bf16(lo)) / bf16_ulp(v)).round() + 1
    buf, _ = href.hc_mix_fp8(xn, *p)
    glo, ghi = th._dot_range(buf[:, :R], p[2], p[3])
    gv = (glo + ghi) / 2
    gn = ((th._rn_bf16(ghi) - th._rn_bf16(glo)) / bf16_ulp(gv)).round() + 1
    ylo, yhi = th._mix_range(xn, th._rn_bf16(glo), th._rn_bf16(ghi))
    yn = ((th._rn_bf16(yhi) - th._rn_bf16(ylo)) / bf16_ulp((ylo + yhi) / 2)).round() + 1
    print(f"hc seed {s}: down GEMM bound / ulp(exact) median {((hi - v) / bf16_ulp(v)).median().item():.3g}, "
          f"bf16 values allowed median {nv.median().item():.0f} max {nv.max().item():.0f}; up GEMM bound / ulp median "
          f"{((ghi - gv) / bf16_ulp(gv)).median().item():.3g}, 1 value allowed on {share(gn == 1)}; block input: 1 value "
          f"on {share(yn == 1)}, max {yn.max().item():.0f}", flush=True)
    tq._counter = itertools.count()
    kw, _ = tq._case(s, 333, 4, 256, 64, "1d", strided=False)
    nlo, nhi = tq._normed_range(kw)
    bmin, bmax = tq._stock_rope_bounds(kw, nlo, nhi)
    stock = qref.gemma_norm_rope(**kw)
    wide = (bmax - bmin) / bf16_ulp(stock)
    print(f"qsa seed {s} (dims 256-64, 333 x 4 rows): normed values with 2 allowed bf16 values {share(nlo != nhi)}; "
          f"outputs with more than one allowed value {share(bmax > bmin)}, widest {wide.max().item():.3g} ulp of stock; "
          f"norm bound {tq._norm_rel_bound(256):.3g} relative", flush=True)
