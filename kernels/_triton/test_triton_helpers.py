"""Tests of the shared Triton helpers: vLLM's own kernels as the decode step's stock (launch structure and
agreement with the independent references), tuned configs chosen by device name. CPU: the interpreter."""
from __future__ import annotations

from pathlib import Path

import pytest

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
