"""Tests of the shared Triton helpers: vLLM's own kernels as the decode step's stock (launch structure and
agreement with the independent references), tuned configs chosen by device name. CPU: the interpreter."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from .._testing import rel_l2
from . import tuned, vllm_peer
from .common import INTERPRETED

ok, why = vllm_peer.available()
needs_peer = pytest.mark.skipif(not ok, reason=f"vLLM's sources not here: {why}")


def _need_triton(device):
    if not (device == "cuda" or INTERPRETED):
        pytest.skip("no Triton platform: no CUDA device and TRITON_INTERPRET was not set at import")


def _count(fn):
    from .launches import LaunchCounter

    with LaunchCounter() as c:
        out = fn()
    return c, out


@needs_peer
def test_vllm_gdn_core_is_one_recurrence_and_one_norm_launch(device, seed):
    _need_triton(device)
    from ..gdn_decode import reference
    from ..gdn_decode._cases import make_batch

    kw, st = make_batch(seed, device, [4, 2, 3], [3, 1, 2], Hk=2, Hv=4, D=32, S=4)
    k_ref, k_peer = dict(kw, state=st[0].clone()), dict(kw, state=st[0].clone())
    y_ref = reference.gdn_spec_decode_core(**k_ref)
    c, y = _count(lambda: vllm_peer.gdn_core(**k_peer))
    assert sorted(c.triton) == ["fused_sigmoid_gating_delta_rule_update_kernel", "layer_norm_fwd_kernel"], c.triton
    assert sum(c.triton.values()) == 2
    # the interpreter truncates vLLM's bf16 stores (the project's kernels round on the bits): a few e-3
    assert rel_l2(y, y_ref) < (1e-2 if INTERPRETED else 3e-3)
    assert rel_l2(k_peer["state"], k_ref["state"]) < 1e-5


@needs_peer
@pytest.mark.parametrize("combine", [True, False])
def test_vllm_hc_combine_norm_is_one_launch(combine, device, rng):
    _need_triton(device)
    from .._testing import randn
    from ..hc_norm import reference

    M, hd = 3, 256
    res = randn((M, 4 * hd), rng, device)
    blk = randn((M, hd), rng, device) if combine else None
    inj = randn((M, 8), rng, device)[:, 2:6] if combine else None
    w = randn((4 * hd,), rng, device, scale=0.1)
    c, (o, y) = _count(lambda: vllm_peer.hc_combine_norm(res, blk, inj, w, 1e-6, 4))
    assert sum(c.triton.values()) == 1 and sum(c.aten.values()) == 0, (c.triton, c.aten)
    o64, y64 = reference.hc_combine_norm_fp64(res, blk, inj, w, 1e-6, 4)
    assert rel_l2(o, o64) < 1e-2 and rel_l2(y, y64) < 1e-2


@needs_peer
def test_vllm_hc_mix_is_two_gemms_and_vllms_two_launches(device, rng):
    """The hc mix's stock (vLLM's unfused path): cuBLAS down, vLLM's _hc_silu_kernel written into the lora columns,
    cuBLAS up, vLLM's _hc_gate_mix; same contract as the op table's stock (buf's lora columns SiLU'd, injection
    logits raw) and within the gate's bound of the fp64 mix."""
    _need_triton(device)
    from .._testing import randn
    from ..hc_mix import reference

    M, hd, lora, hc = 3, 128, 64, 4
    xn = randn((M, hc * hd), rng, device)
    w_down = randn((lora + hc + 12, hc * hd), rng, device, scale=(hc * hd) ** -0.5)
    w_up = randn((hc * hd, lora), rng, device, scale=lora ** -0.5)
    c, (buf, block) = _count(lambda: vllm_peer.hc_mix(xn, w_down, w_up, lora_rank=lora, hc_count=hc))
    assert dict(c.triton) == {"_hc_silu_kernel": 1, "_hc_gate_mix_kernel": 1}, c.triton
    assert sum(c.aten.values()) == 2, c.aten  # the two GEMMs
    raw = (xn.double() @ w_down.double().t())
    a = raw[:, :lora] / hc
    assert rel_l2(buf[:, :lora], a * torch.sigmoid(a)) < 1e-2  # SiLU'd in place (a missing store fails here)
    assert rel_l2(buf[:, lora:], raw[:, lora:]) < 1e-2
    assert rel_l2(block, reference.mix_fp64(xn, buf[:, :lora], w_up, hc_count=hc)) < 1e-2
    sb, sblk = reference.hc_mix(xn, w_down, w_up, lora_rank=lora, hc_count=hc)
    assert rel_l2(buf, sb) < 1e-2 and rel_l2(block, sblk) < 1e-2


@needs_peer
def test_vllm_qsa_prepare_on_the_decode_batch(device, rng):
    """vLLM's one-launch QSA prepare on the metadata ``qsa_decode_caches`` builds for a uniform decode batch does
    what its unfused path does: the main q/k norm + rotary (the qk_rope reference), the gate copied, K and V in
    their slots' rows, the indexer q and the completed group's pooled key normed and roped (the qsa_glue
    reference, 64 rotary dims as vLLM), the raw keys in the ring; nothing else written."""
    _need_triton(device)
    if INTERPRETED:
        pytest.skip("Triton's interpreter rejects vLLM's qsa_prepare (a tl.where over bool masks: 'mask has "
                    "unsupported dtype'); the test runs on the GPU (scripts/gpu.sh gates kernels/_triton)")
    from .._testing import randn
    from ..qk_rope import reference as qk
    from ..qsa_glue import reference as gl

    R, S, N, grp, hq, hkv, D, ih, idd, page = 2, 4, 32, 4, 2, 1, 256, 2, 128, 16
    T, G = R * S, N // grp
    c = vllm_peer.qsa_decode_caches(R, S, N, grp, idd, page, hkv, D, device, gen=rng)
    kv0, ck0 = c["kv"].clone(), c["ckeys"].clone()
    qkv = randn((T, 2 * (hq + hkv) * D), rng, device)
    ix = randn((T, (ih + 1) * idd), rng, device)
    wiq, wik, wq, wk = (randn((n,), rng, device, scale=0.1) for n in (idd, idd, D, D))
    rope = gl.rope_cos_sin_cache(idd // 2, N, 1e7, device)
    cnt, (mq, mg, iq) = _count(lambda: vllm_peer.qsa_prepare(ix, qkv, c, rope, wiq, wik, wq, wk, 1e-6, ih, grp))
    assert dict(cnt.triton) == {"_qsa_prepare_kernel": 1}, cnt.triton
    pos = c["positions"]
    q_ref, k_ref, g_ref = qk.qk_norm_rope_gate(qkv, wq, wk, pos, rope, hq, hkv, D, 1e-6)
    assert rel_l2(mq.reshape(T, -1), q_ref) < 2e-2 and torch.equal(mg.reshape(T, -1), g_ref)
    rows = c["kv"].view(-1, hkv, 2 * D)
    assert rel_l2(rows[c["slots"], :, :D].reshape(T, -1), k_ref) < 2e-2
    assert torch.equal(rows[c["slots"], :, D:].reshape(T, -1), qkv[:, (2 * hq + hkv) * D:])
    untouched = torch.ones(rows.shape[0], dtype=torch.bool, device=rows.device)
    untouched[c["slots"]] = False
    assert torch.equal(rows[untouched], kv0.view(-1, hkv, 2 * D)[untouched])
    iq_ref = gl.gemma_norm_rope(ix[:, : ih * idd].reshape(T, ih, idd), wiq, positions=pos, cos_sin_cache=rope,
                                eps=1e-6)
    assert rel_l2(iq, iq_ref) < 1e-2
    raw = ix[:, ih * idd:]
    pooled = raw.float().view(R, S // grp, grp, idd).mean(2).to(torch.bfloat16).reshape(-1, 1, idd)
    kn = gl.gemma_norm_rope(pooled, wik, positions=pos.view(R, S)[:, 0].contiguous(), cos_sin_cache=rope, eps=1e-6)
    assert rel_l2(c["ckeys"][:, G - 1], kn.view(R, idd)) < 1e-2
    assert torch.equal(c["ckeys"][:, : G - 1], ck0[:, : G - 1])
    assert torch.equal(c["ring"].view(-1, idd)[c["state_slots"]], raw)


def test_peer_missing_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("R9K_VLLM_SRC", str(tmp_path))
    vllm_peer.load.cache_clear()
    try:
        assert vllm_peer.source_root() is None
        with pytest.raises(vllm_peer.PeerUnavailable, match="R9K_VLLM_SRC"):
            vllm_peer.load("hc")
    finally:
        vllm_peer.load.cache_clear()


def test_tuned_configs_by_device_name(monkeypatch, tmp_path):
    assert tuned.slug("NVIDIA H200") == "h200"
    assert tuned.slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    fp8 = str(Path(__file__).resolve().parents[1] / "fp8_block")
    monkeypatch.setenv("R9K_TUNED_DEVICE", "h200")
    assert tuned.tuned_path(fp8).endswith("fp8_block/tuned_h200.json")
    assert tuned.load(fp8)  # the H200's file exists
    monkeypatch.setenv("R9K_TUNED_DEVICE", "some-other-gpu")
    assert tuned.load(fp8) == {}  # no file: every kernel falls back to its default rule
