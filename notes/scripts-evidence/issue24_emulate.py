"""Issue 24, on the CPU: the two gate checks (old rule of commit 4e97c0b, derived rule now) applied at the real
shapes to *emulated* kernels that round where the fused kernels round but sum in another order, as a GPU may:

* hc_mix_fp8: the down GEMM as 16 split-K partials (640 terms each, the H200 tuning), each accumulated in steps
  of 16 products (an MMA's k) whose fp32 result is rounded toward zero (tensor cores truncate), the partials
  summed in split order, the scale applied once, bf16; hc_silu in fp32; the up GEMM in the same way (R = 320);
  sigmoid, the stream-ordered sum and 1/4 in fp32, bf16.
* qsa_glue: the norm's sum of squares accumulated sequentially in fp32 (torch's CPU reduction sums in vector
  lanes, another order), then stock's rounding points (bf16 norm, bf16 rope products, bf16 sum).

    python notes/scripts-evidence/issue24_emulate.py [SEEDS [HC_SEEDS]]   # repository root, .venv; default 200

Not a measurement of the GPU: it shows whether each rule accepts outputs that differ from the reference only
by a legitimate fp32 order / rounding-mode difference, at the gate's shapes and seeds."""
import itertools, os, sys, time
os.environ.setdefault("TRITON_INTERPRET", "1")
import torch

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
N_HC = int(sys.argv[2]) if len(sys.argv) > 2 else N  # the hc case costs ~1.5 s of CPU a check
sys.argv = sys.argv[:1]
from r9k.kernels.conftest import _poison
from r9k.kernels.hc_mix import reference as href, test_hc_mix as th, triton_kernel as hk
from r9k.kernels.qsa_glue import reference as qref, test_qsa_glue as tq, triton_kernel as qk


from issue24_old_rules import old_rules, outcome as _outcome  # noqa: E402 (this folder is on sys.path when run as a script)

oh, oq = old_rules()


def trunc32(v):
    """fp64 -> fp32 rounded toward zero."""
    f = v.float()
    over = f.double().abs() > v.abs()
    return torch.where(over, torch.nextafter(f, torch.zeros_like(f)), f)


def emul_dot(a, q, s, split=16, k=16):
    """s * sum_k a q: split-K partials, each accumulated k products at a time (each k-block's sum exact, then
    added to the fp32 partial and truncated toward zero), the partials summed in split order in fp32."""
    M, K = a.shape
    N = q.shape[0]
    step = -(-K // split)
    pad = (-K) % k
    a64 = torch.nn.functional.pad(a.double(), (0, pad)).view(M, -1, k)
    q64 = torch.nn.functional.pad(q.double(), (0, pad)).view(N, -1, k)
    blocks = torch.einsum("mbj,nbj->bmn", a64, q64)  # [K/k, M, N], exact (fp64, <= 16 products of 12 bits)
    acc = torch.zeros(M, N, dtype=torch.float32)
    per = step // k
    for s0 in range(0, blocks.shape[0], per):
        part = torch.zeros(M, N, dtype=torch.float32)
        for b in range(s0, min(s0 + per, blocks.shape[0])):
            part = trunc32(part.double() + blocks[b])
        acc = acc + part
    return acc * s[None, :]


def emul_hc(xn, dq, ds, uq, us, out_buf=None, out_block=None, *, lora_rank=320, hc_count=4):
    R = lora_rank
    buf = emul_dot(xn, dq, ds).to(torch.bfloat16)
    a = buf[:, :R].float() * 0.25
    buf[:, :R] = (a / (1.0 + torch.exp(-a))).to(torch.bfloat16)
    g = emul_dot(buf[:, :R], uq, us, split=1).to(torch.bfloat16)
    y = href.hc_gate_mix_torch(xn, g)
    if out_buf is not None:
        out_buf.copy_(buf)
        buf = out_buf
    if out_block is not None:
        out_block.copy_(y)
        y = out_block
    return buf, y


def emul_qsa(x, weight, positions=None, cos_sin_cache=None, eps=1e-6, mrope_section=None, mrope_interleaved=True,
             out=None):
    xf = x.float()
    ss = torch.cumsum(xf * xf, dim=-1)[..., -1:]  # sequential fp32 sum
    r = torch.rsqrt(ss / x.shape[-1] + eps)
    y = ((xf * r) * (1.0 + weight.float())).to(torch.bfloat16)
    if positions is not None:
        y = qref.apply_rope(y, positions, cos_sin_cache, mrope_section, mrope_interleaved, truncate_mrope=True)
    if out is not None:
        out.copy_(y)
        return out
    return y


def outcome(fn, seed):
    return _outcome(fn, seed, 110)


def gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


hk.hc_mix_fp8 = emul_hc
qk.gemma_norm_rope = emul_qsa
cases = [
    ("hc_mix_fp8[16-False] (emulated kernel)", lambda m: lambda s: m._check_fp8(16, th.REAL, "cpu", gen(s), _poison, False)),
]
assert 640 % 16 == 0 and 320 % 16 == 0  # split-K slices and the lora hold whole k-blocks


def qsa(m):
    def f(s):
        m._counter = itertools.count()
        m._check(*m._case(s, 333, 4, 256, 64, "1d", strided=False))
    return f


cases.append(("qsa_glue dims[256-64] (emulated kernel)", qsa))
print("torch", torch.__version__, flush=True)
for name, mk in cases:
    t0 = time.time()
    n = N_HC if "hc" in name else N
    old = [(s, r) for s in range(n) if (r := outcome(mk(oh if "hc" in name else oq), s))]
    new = [(s, r) for s in range(n) if (r := outcome(mk(th if "hc" in name else tq), s))]
    print(f"{name}: seeds 0..{n - 1}: old rule fails {len(old)} of {n} {[s for s, _ in old][:20]} {old[:1]}; derived rule fails "
          f"{len(new)} {new[:2]} ({time.time() - t0:.0f} s)", flush=True)
