"""QSA on the CPU backend (r9k.plugin.models.qsa): the indexer's top-k group selection and sparse attention,
through its cache copy addressed by vLLM's slot mapping and block table, against an independent reference
written the way transformers' ``Qwen4ExpTextQSAIndexer`` does it (a loop over query rows, visible tokens,
complete groups, pooled keys, top-k, tail) followed by plain masked attention. Within the budget the result is
dense causal attention; beyond it, tokens are left out and the output differs from dense. The glue op (stock or
fused) gives the same selection, and its counter moves only when fused."""
from __future__ import annotations

import math
import os
from types import SimpleNamespace

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

H, KV, D, IH, ID, R, BS = 4, 2, 64, 2, 64, 4, 16


def _state(budget: int, fused: bool, seed: int):
    from r9k.kernels import ops
    from r9k.kernels.qsa_glue import reference as glue_ref
    from r9k.plugin.models import qsa

    g = torch.Generator().manual_seed(seed)
    norm = lambda: SimpleNamespace(weight=(torch.randn(ID, generator=g) * 0.2).to(torch.bfloat16))  # noqa: E731
    cache = glue_ref.rope_cos_sin_cache(16, 512, 1e7).to(torch.bfloat16)
    op = ops.get("qsa_glue")
    return qsa.QsaState("model.layers.3.self_attn", "model.layers.3.self_attn.attn", BS, H, KV, D, D ** -0.5,
                        IH, ID, R, budget, norm(), norm(), cache, 1e-6, op.fused if fused else op.stock, fused)


def _reference(st, q, k, v, idx_qk, pos):
    """transformers' selection loop (one request, all rows) and masked attention, in fp32."""
    S = q.shape[0]
    idh = IH * ID
    from r9k.kernels.qsa_glue import reference as glue_ref

    glue = glue_ref.gemma_norm_rope  # the stock glue, also for the fused op's state (equal within its gate)
    iq = glue(idx_qk[:, :idh].view(S, IH, ID), st.q_norm.weight, pos, st.cos_sin, st.eps)
    raw = idx_qk[:, idh:]
    keep = torch.zeros(S, S, dtype=torch.bool)
    for p in range(S):
        visible = torch.arange(p + 1)
        nb = visible.numel() // R
        chosen = torch.tensor([], dtype=torch.long)
        if nb:
            blocks = visible[: nb * R].view(nb, R)
            pooled = raw[blocks.flatten()].view(nb, R, ID).float().mean(1).to(raw.dtype)
            key = glue(pooled[:, None], st.k_norm.weight, blocks[:, 0], st.cos_sin, st.eps)[:, 0]
            scores = torch.relu(iq[p].float() @ key.float().T).sum(0) / math.sqrt(ID)
            top = scores.topk(min(st.topk, nb)).indices
            chosen = blocks[top].flatten()
        keep[p, torch.cat([chosen, visible[nb * R:]])] = True
    qh = q.view(S, H, D).float()
    kh = k.view(S, KV, D).float().repeat_interleave(H // KV, 1)
    vh = v.view(S, KV, D).float().repeat_interleave(H // KV, 1)
    logits = torch.einsum("thd,shd->hts", qh, kh) * D ** -0.5
    w = torch.softmax(logits.masked_fill(~keep[None], float("-inf")), -1)
    return torch.einsum("hts,shd->thd", w, vh).reshape(S, -1).to(torch.bfloat16), keep


def _serve(st, q, k, v, idx_qk, pos, monkeypatch, chunks):
    """The op's forward over a request fed in chunks (prefill, then decode steps), blocks scattered."""
    import vllm.forward_context as fc

    S = q.shape[0]
    nblk = -(-S // BS)
    table = torch.tensor([[7, 2, 11, 5, 9, 3][:nblk]])
    out = []
    a = 0
    for b in chunks:
        p = pos[a:b]
        slots = table[0, p // BS] * BS + p % BS
        md = SimpleNamespace(num_actual_tokens=b - a, slot_mapping=slots, query_start_loc=torch.tensor([0, b - a]),
                             seq_lens=torch.tensor([b]), block_table=table)
        monkeypatch.setattr(fc, "get_forward_context",
                            lambda md=md: SimpleNamespace(attn_metadata={st.attn_name: md}))
        out.append(st.forward(q[a:b], k[a:b], v[a:b], idx_qk[a:b], p))
        a = b
    return torch.cat(out)


@pytest.mark.parametrize("fused", [False, True])
def test_selection_and_sparse_attention_match_the_reference_within_and_beyond_the_budget(monkeypatch, seed, fused):
    from r9k.plugin import report

    g = torch.Generator().manual_seed(seed)
    S = 70
    q = (torch.randn(S, H * D, generator=g)).to(torch.bfloat16)
    k = (torch.randn(S, KV * D, generator=g)).to(torch.bfloat16)
    v = (torch.randn(S, KV * D, generator=g)).to(torch.bfloat16)
    idx_qk = (torch.randn(S, (IH + 1) * ID, generator=g)).to(torch.bfloat16)
    pos = torch.arange(S)
    report.reset()
    for budget in (32, 512):
        st = _state(budget, fused, seed)
        got = _serve(st, q, k, v, idx_qk, pos, monkeypatch, chunks=[45, 46, 47, 60, 61, S])
        want, keep = _reference(st, q, k, v, idx_qk, pos)
        err = (got.float() - want.float()).abs().max().item()
        assert err <= 2 ** -7 * want.float().abs().max().item(), (budget, err)
        if budget == 512:  # every group kept: dense causal attention
            assert torch.equal(keep, torch.ones(S, S, dtype=torch.bool).tril())
        else:  # beyond 32 tokens rows leave tokens out, and the output is not dense attention's
            assert keep.sum(1).max().item() == 32 + R - 1 and (keep.sum(1) < torch.arange(1, S + 1)).any()
            dense, _ = _reference(_state(512, fused, seed), q, k, v, idx_qk, pos)
            assert (dense.float() - got.float()).abs().max() > 10 * err
    calls = report.calls("qsa_glue")
    assert (calls > 0) == fused, calls
    report.reset()


def test_a_slot_mapping_that_does_not_follow_the_block_table_is_refused(monkeypatch, seed):
    import vllm.forward_context as fc

    st = _state(32, False, seed)
    t = 3
    md = SimpleNamespace(num_actual_tokens=t, slot_mapping=torch.tensor([0, 1, 2]) + 5 * BS,
                         query_start_loc=torch.tensor([0, t]), seq_lens=torch.tensor([t]),
                         block_table=torch.tensor([[4]]))
    monkeypatch.setattr(fc, "get_forward_context", lambda: SimpleNamespace(attn_metadata={st.attn_name: md}))
    z = torch.zeros(t, KV * D, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="slot mapping does not follow its block table"):
        st.forward(torch.zeros(t, H * D, dtype=torch.bfloat16), z, z, torch.zeros(t, 3 * ID, dtype=torch.bfloat16),
                   torch.arange(t))
