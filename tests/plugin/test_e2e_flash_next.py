"""End to end on vLLM's CPU backend: a Flash-Next checkpoint served, every Flash-Next fusion running in it.

``r9kctl launch --profile cpu-flash-next`` (the tiny transformers ``Qwen4ExpForCausalLM`` checkpoint, served
by the plugin's build of the architecture, r9k.plugin.models.flash_next) with tp4-default's kernel variants
that this backend can run:

1. ``/r9k/status``: each variant's op runs in exactly the layers the checkpoint's config implies (hc combine +
   norm and the fp8 hc mix in all 9 hyper-connection modules, the GDN core in the 3 linear-attention layers,
   the q/k norm + rope in the QSA layer, router GEMM and shared expert in every MoE), its kernel ran (fused
   calls > 0); R9K_HC_MIX's bf16 mix is on but every module reports it kept because the fp8 path takes
   precedence (as at TP4 in the original).
2. The same profile with those variants at stock: nothing installed, no kernel call, and the greedy output
   within the adapters test's bound (test_e2e_adapters.compare: logprob differences <= 0.25 nats while the
   tokens agree; a first differing token only where stock's top-2 margin is a near-tie).
3. The stock launch (vLLM's own layers and its GatedResidual) against an independent reference: transformers'
   own ``Qwen4ExpForCausalLM`` on the same checkpoint, in-process, with the same rule as 2: while the greedy
   ids agree, the chosen token's logprob within ``LOGPROB_BOUND`` nats of the reference's; where they first
   differ, the reference's top-2 margin below twice that (a bf16 near-tie). This checks the plugin's
   architecture (layer order, stream broadcast, final mixer, QSA as dense attention inside the indexer budget,
   weight mapping), not only the kernels: a wrong piece moves logprobs by nats, not hundredths (measured in
   notes/flash-next.md).

Slow (two vLLM starts): marked ``e2e``.
"""
from __future__ import annotations

import json
import urllib.request

import pytest

from .test_e2e_adapters import LOGPROB_BOUND, PROMPTS, compare, non_stock, serve
from .test_e2e_cpu_smoke import Server, base_env, post

pytestmark = pytest.mark.e2e
pytest.importorskip("vllm")

PROFILE = "cpu-flash-next"
MAX_TOKENS = 6


def expected() -> tuple[dict[str, list[str]], dict[str, tuple[list[str], str]]]:
    """op -> layers that run it; op -> (layers that keep vLLM's path, reason), from the recipe's config."""
    from r9k.plugin.models import tiny_flash_next

    kinds = tiny_flash_next.CONFIG["layer_types"]
    n = len(kinds)
    hc = [f"model.layers.{i}.{w}_hyper_connection" for i in range(n) for w in ("attn", "mlp")]
    hc.append("model.hyper_connection_mixer")
    run = {"router_gemm": [f"model.layers.{i}.mlp.gate" for i in range(n)],
           "shared_expert": [f"model.layers.{i}.mlp.shared_expert" for i in range(n)],
           "gdn_decode": [f"model.layers.{i}.linear_attn" for i in range(n) if kinds[i] == "linear_attention"],
           "qk_norm_rope": [f"model.layers.{i}.self_attn" for i in range(n) if kinds[i] == "indexed_attention"],
           "hc_combine_norm": hc, "hc_mix_fp8": hc}
    return run, {"hc_mix": (hc, "takes precedence")}


def greedy_ids(port: int) -> list[tuple[list[int], list[float]]]:
    """Greedy token ids of each prompt and the logprob of each chosen token."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30) as r:
        model = json.loads(r.read())["data"][0]["id"]
    out = []
    for p in PROMPTS:
        res = post(port, "/v1/completions", {"model": model, "prompt": p, "max_tokens": MAX_TOKENS,
                                             "temperature": 0, "logprobs": 1, "return_tokens_as_token_ids": True})
        lp = res["choices"][0]["logprobs"]
        out.append(([int(t.split(":", 1)[1]) for t in lp["tokens"]], lp["token_logprobs"]))
    return out


def reference_ids(model_dir: str) -> list[tuple[list[int], list[float], list[float]]]:
    """transformers' greedy continuation of each prompt, the logprob of each chosen token and the top-2
    margin (nats) at each position."""
    import torch
    from transformers import AutoTokenizer, Qwen4ExpForCausalLM

    tok = AutoTokenizer.from_pretrained(model_dir)
    m = Qwen4ExpForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
    out = []
    for p in PROMPTS:
        ids = tok(p, return_tensors="pt").input_ids
        with torch.no_grad():
            seq = m.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False)
            logp = torch.log_softmax(m(seq).logits[0, ids.shape[1] - 1:-1].float(), dim=-1)
        top2 = logp.topk(2, dim=-1).values
        out.append((seq[0, ids.shape[1]:].tolist(), top2[:, 0].tolist(), (top2[:, 0] - top2[:, 1]).tolist()))
    return out


def test_flash_next_serves_with_every_fusion_and_matches_stock_and_transformers(tmp_path, monkeypatch):
    env = base_env(tmp_path)
    monkeypatch.setenv("R9K_CACHE_DIR", env["R9K_CACHE_DIR"])  # the launches' tiny model, for the reference
    run, kept = expected()
    variants = non_stock(PROFILE)
    assert {op for op, _ in variants.values()} == set(run) | set(kept), variants
    started: list[Server] = []
    try:
        out_on, st, srv, t_up, _ = serve(env, tmp_path, PROFILE, "on", started)
        ops = st.get("ops") or {}
        for op, layers in run.items():
            o = ops.get(op)
            assert o is not None, f"op {op} reported no layers: {sorted(ops)}\n{srv.text()[-3000:]}"
            assert sorted(o["installed_layers"]) == sorted(layers), (op, o)
            assert not o["kept_layers"], (op, o["kept_layers"])
            assert o["calls"].get("fused", 0) > 0, (op, o["calls"])
        for op, (layers, why) in kept.items():
            o = ops[op]
            assert not o["installed_layers"] and not o["calls"].get("fused"), (op, o)
            (reason, names), = o["kept_layers"].items()
            assert why in reason and sorted(names) == sorted(layers), (op, o)
        print(f"{PROFILE}: up in {t_up:.0f} s; calls per op:", {op: o["calls"] for op, o in sorted(ops.items())})

        sets = [f"{k}={stock}" for k, (_op, stock) in sorted(variants.items())]
        out_stock, st2, _, _, ids_stock = serve(env, tmp_path, PROFILE, "stock", started, *sets, extra=greedy_ids)
        for op in set(run) | set(kept):
            o = (st2.get("ops") or {}).get(op) or {"installed_layers": [], "calls": {}}
            assert not o["installed_layers"] and not o["calls"].get("fused"), (op, o)
        worst = compare(out_on, out_stock)
        print(f"{PROFILE}: largest logprob difference fused vs stock {worst:.4f} nats")

        from r9k.plugin import tiny_model

        ref = reference_ids(str(tiny_model.model_dir("flash-next")))
        worst_ref = 0.0
        for p, (got, got_lp), (want, want_lp, margins) in zip(PROMPTS, ids_stock, ref):
            print(f"{p!r}: vLLM stock {got}, transformers {want}, reference margins {[round(x, 3) for x in margins]}")
            for i, (a, b) in enumerate(zip(got, want)):
                if a != b:
                    assert margins[i] < 2 * LOGPROB_BOUND, (p, i, got, want, margins)
                    break
                d = abs(got_lp[i] - want_lp[i])
                worst_ref = max(worst_ref, d)
                assert d <= LOGPROB_BOUND, (p, i, got_lp[i], want_lp[i])
        print(f"{PROFILE}: largest logprob difference vLLM stock vs transformers {worst_ref:.4f} nats")
    finally:
        for s in started:
            if s.proc.poll() is None:
                s.stop()
