"""Speculative-decode batches for the GDN gate tests and benchmark (imported by tests and bench only)."""
from __future__ import annotations

import itertools
import math

import torch


def make_batch(seed, device, lens, acc, Hk=4, Hv=12, D=128, S=4, tail=0, padded=(), state_dtype=torch.float32,
               extra_slots=3, gate="sigmoid", pools=1):
    """A batch of len(lens) sequences with lens[n] candidates each, acc[n] accepted from the previous step.

    Sequence n candidate t uses slot ``1 + n*S + t`` (slot 0 is never read or written); sequences in ``padded``
    get slot 0 everywhere; ``tail`` graph-padding rows follow the last sequence; ``extra_slots`` unreferenced
    slots at the end. The inputs are strided views as in serving. ``pools`` > 1: that many state pools."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    N = len(lens)
    T = sum(lens) + tail
    qkv_w = 2 * Hk * D + Hv * D

    def rnd(*shape, scale=1.0):
        return torch.randn(*shape, generator=g) * scale

    conv = rnd(T, qkv_w + 64).to(torch.bfloat16).to(device)  # padded rows: mixed_qkv rows are strided
    qkvz = rnd(T, qkv_w + Hv * D).to(torch.bfloat16).to(device)
    ba = rnd(T, 2 * Hv, scale=1.5).to(torch.bfloat16).to(device)
    cu = torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32, device=device)
    idx = torch.zeros(N, S, dtype=torch.int32)
    for n in range(N):
        if n not in padded:
            idx[n] = torch.arange(1 + n * S, 1 + (n + 1) * S, dtype=torch.int32)
    num_slots = 1 + N * S + extra_slots
    states = [(rnd(num_slots, Hv, D, D, scale=0.05)).to(state_dtype).to(device) for _ in range(pools)]
    A_log = torch.log(torch.rand(Hv, generator=g) * 15 + 1).to(device)
    dt_bias = rnd(Hv, scale=0.5).to(device)
    w = (1.0 + rnd(D, scale=0.1)).to(torch.bfloat16).to(device)
    kw = dict(mixed_qkv=conv[:, :qkv_w], z=qkvz[:, qkv_w:], b=ba[:, :Hv], a=ba[:, Hv:], A_log=A_log,
              dt_bias=dt_bias, norm_weight=w, state=states[0], cu_seqlens=cu,
              num_accepted=torch.tensor(acc, dtype=torch.int32, device=device), state_indices=idx.to(device),
              num_k_heads=Hk, num_v_heads=Hv, head_k_dim=D, head_v_dim=D, eps=1e-6, gate=gate,
              scale=1.0 / math.sqrt(D))
    return kw, states


def written_slots(kw) -> set[int]:
    """Slots the step must write: idx[n, t] > 0 for t < len(n), in non-padding sequences."""
    cu = kw["cu_seqlens"].tolist()
    idx = kw["state_indices"].tolist()
    acc = kw["num_accepted"].tolist()
    out = set()
    for n in range(len(idx)):
        if idx[n][acc[n] - 1] <= 0:
            continue
        for t in range(cu[n + 1] - cu[n]):
            if idx[n][t] > 0:
                out.add(idx[n][t])
    return out


def active_rows(kw) -> torch.Tensor:
    """Bool [T]: rows that belong to a non-padding sequence."""
    T = kw["mixed_qkv"].shape[0]
    cu = kw["cu_seqlens"].tolist()
    idx = kw["state_indices"].tolist()
    acc = kw["num_accepted"].tolist()
    m = torch.zeros(T, dtype=torch.bool)
    for n in range(len(idx)):
        if idx[n][acc[n] - 1] > 0:
            m[cu[n]:cu[n + 1]] = True
    return m
