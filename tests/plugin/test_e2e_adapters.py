"""End to end on vLLM's CPU backend: every adapter of plugin/layers/ runs in a served model.

For each ``cpu-*`` profile of a tiny model (``cpu-qwen2-moe``: router GEMM, fused routing, shared expert;
``cpu-qwen3-next``: those plus the GDN decode core and the gated attention's q/k norm + rope):

1. ``r9kctl launch --profile P --strict`` (see :func:`strict_flag` for stale gate records) starts real vLLM (this project's kernels under Triton's CPU
   interpreter); the test sends greedy completions (the prompts in one request: one decode batch) and reads
   ``/r9k/status``: every non-stock variant is installed, its op's layers are exactly the ones the model's
   config says it has (e.g. the GDN core in the linear-attention layers, the q/k rope in the full-attention
   ones), none kept vLLM's path, and its kernel ran (``calls["fused"] > 0``).
2. The same profile with all those variants at stock (one launch, ``--set KNOB=stock`` for each): no op
   installed, no kernel call, a different torch.compile cache directory (the knobs reach vLLM's compile-cache
   key), and the same greedy output within the stated bound (below).

The bound. The kernels compute what vLLM computes but not bit for bit: fp32 instead of bf16 softmax weights
in the routing, one rounding instead of two in the q/k norm + rope, fp32 recurrence order in the GDN core,
and (the largest) the shared-expert kernel's per-row fp8 activation quant (unit test: a few % of that
expert's output; tests/plugin/test_layers.py). So the test compares the two runs token by token: while the
greedy tokens agree, the chosen token's logprob may differ by at most ``LOGPROB_BOUND`` nats; where they
first differ, the stock run's top-2 margin there must be below ``2 * LOGPROB_BOUND`` (a near-tie that a
perturbation within the bound can flip); positions after a flip are not compared (the contexts differ).

Slow (four vLLM starts): marked ``e2e``. Uses the helpers of test_e2e_cpu_smoke.py.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from servers import launch_profile
from .test_e2e_cpu_smoke import R9KCTL, Server, base_env, compile_dirs, post, wait_healthy

pytestmark = pytest.mark.e2e
E2E_MINUTES = 4  # its wall time in the CI rehearsal of 2026-12-01 (230 s and 70 s): tests/conftest.py runs it early
pytest.importorskip("vllm")

REPO = Path(__file__).resolve().parents[2]
PROMPTS = ["The quick brown fox", "Once upon a time", "The capital of France is"]
MAX_TOKENS = 6
#: nats; see the module docstring. Measured in the run recorded in notes/adapters.md: see there.
LOGPROB_BOUND = 0.3
PROFILES = ["cpu-qwen2-moe", "cpu-qwen3-next"]
#: vLLM arguments per profile. cpu-qwen2-moe runs eager (both launches, so the comparison is like for like)
#: to keep CI's e2e part short: its three ops also run in cpu-qwen3-next, compiled, where torch.compile keeps
#: every op of this project opaque.
EXTRA_ARGS = {"cpu-qwen2-moe": ["--enforce-eager"], "cpu-qwen3-next": []}


def expected_layers(profile: str) -> dict[str, list[str]]:
    """op -> the layer names the model's own config implies (the recipe of plugin/tiny_model.py)."""
    from r9k.plugin import tiny_model

    name = tomllib.loads((REPO / "profiles" / f"{profile}.toml").read_text())["model_path"].split(":", 1)[1]
    cfg = tiny_model.CONFIG if name == "qwen2-moe" else tiny_model.QWEN3_NEXT_CONFIG
    n = cfg["num_hidden_layers"]
    kinds = cfg.get("layer_types") or ["full_attention"] * n
    out = {"router_gemm": [f"model.layers.{i}.mlp.gate" for i in range(n)],
           "moe_route": [f"model.layers.{i}.mlp.experts" for i in range(n)],
           "shared_expert": [f"model.layers.{i}.mlp.shared_expert" for i in range(n)]}
    if name == "qwen3-next":
        out["gdn_decode"] = [f"model.layers.{i}.linear_attn" for i in range(n) if kinds[i] == "linear_attention"]
        out["qk_norm_rope"] = [f"model.layers.{i}.self_attn" for i in range(n) if kinds[i] == "full_attention"]
    return out


def non_stock(profile: str) -> dict[str, tuple[str, str]]:
    """knob -> (op, stock value) for every variant the profile moves off stock (from the registry)."""
    from r9k.registry import load_registry

    reg = load_registry()
    knobs = tomllib.loads((REPO / "profiles" / f"{profile}.toml").read_text())["knobs"]
    by_knob = {v.knob: v for v in reg.variants.values()}
    def text(val) -> str:  # a TOML value as the string the knob is set to (true -> "1", 0 -> "0")
        return str(int(val)) if isinstance(val, bool) else str(val)

    return {k: (by_knob[k].implementation.op, by_knob[k].stock) for k, val in knobs.items()
            if text(val) != by_knob[k].stock and by_knob[k].vllm is None}  # vLLM's own switches: kept in both


def greedy(port: int) -> list[dict]:
    """The prompts as one request (one decode batch from the first step: with the fused kernels under the Triton
    interpreter a step costs about the same for one row as for three, and prompts sent apart join the batch a
    step or two late), greedy, with the top-2 logprobs of each position; then the logprob of every prompt token
    given the ones before it (``echo``), again one request. Tokens come as ``token_id:<id>``
    (``return_tokens_as_token_ids``): ``top_logprobs`` is a dict keyed by the token, and as text two tokens that
    decode alike (the tiny byte-level vocabulary has many that decode to ``''``: incomplete UTF-8) are one key,
    so the top 2 would read as one entry and the margin as infinite."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30) as r:
        model = json.loads(r.read())["data"][0]["id"]

    def choices(**body) -> list[dict]:
        res = post(port, "/v1/completions", {"model": model, "prompt": PROMPTS, "temperature": 0, **body})
        got = sorted(res["choices"], key=lambda c: c["index"])
        assert [c["index"] for c in got] == list(range(len(PROMPTS))), res
        return got

    out = [c["logprobs"] for c in choices(max_tokens=MAX_TOKENS, seed=0, logprobs=2, return_tokens_as_token_ids=True)]
    for o, c in zip(out, choices(max_tokens=1, echo=True, logprobs=0), strict=True):
        o["prompt_logprobs"] = c["logprobs"]["token_logprobs"][1:-1]
    return out


def status(port: int, env: dict) -> dict:
    """``/r9k/status`` once the workers' counters have been flushed (they stop changing)."""
    last = None
    for _ in range(20):
        res = subprocess.run(R9KCTL + ["status", "--url", f"http://127.0.0.1:{port}", "--format", "json"], env=env,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        data = json.loads(res.stdout)
        if last is not None and data.get("ops") == last.get("ops"):
            return data
        last = data
        time.sleep(1.5)
    return last


def compare(on: list[dict], stock: list[dict]) -> float:
    """The bounded-difference check of the module docstring; returns the largest logprob difference."""
    worst = 0.0
    for p, a, b in zip(PROMPTS, on, stock):
        for i, (ta, tb) in enumerate(zip(a["tokens"], b["tokens"])):
            if ta == tb:
                d = abs(a["token_logprobs"][i] - b["token_logprobs"][i])
                worst = max(worst, d)
                assert d <= LOGPROB_BOUND, (p, i, ta, a["token_logprobs"][i], b["token_logprobs"][i])
                continue
            top = sorted(b["top_logprobs"][i].values(), reverse=True)
            assert len(top) >= 2, (p, i, b["top_logprobs"][i])  # logprobs=2: two distinct tokens
            margin = top[0] - top[1]
            assert margin < 2 * LOGPROB_BOUND, (f"{p!r}: token {i} differs ({ta!r} vs stock {tb!r}) where stock's "
                                                f"top-2 margin is {margin:.3f} nats (no near-tie): stock's top "
                                                f"{b['top_logprobs'][i]}, ours {a['top_logprobs'][i]}")
            print(f"{p!r}: greedy tokens differ from position {i} on (stock margin {margin:.3f} nats)")
            break
    return worst


def strict_flag(env: dict, profile: str, sets: tuple[str, ...]) -> list[str]:
    """``["--strict"]``, unless the only thing --strict refuses is a stale gate-ledger record (the gate
    ledger's freshness is the evidence tooling's business, re-recorded by ``r9kctl gate``; the adapters are
    what this test checks): then the launch runs without it, and the test says so. Any other strict
    refusal (a variant that falls back, an error) fails the test."""
    argv = R9KCTL + ["--plain", "validate", "--profile", profile, "--strict"]
    for s in sets:
        argv += ["--set", s]
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    if res.returncode == 0:
        return ["--strict"]
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if "error[" in ln or "warning[" in ln]
    assert lines and all("warning[gate]" in ln for ln in lines), res.stdout + res.stderr
    print(f"{profile}: launching without --strict: only stale gate records refuse it:", *lines, sep="\n  ")
    return []


def launch(env: dict, tmp: Path, profile: str, name: str, *sets: str) -> tuple[Server, int]:
    return launch_profile(env, tmp, profile, name, *sets, flags=strict_flag(env, profile, sets),
                          vllm_args=EXTRA_ARGS.get(profile, []))


def serve(env: dict, tmp: Path, profile: str, name: str, started: list, *sets: str, extra=None, with_greedy=True):
    """One launch: start, wait for /health, the greedy prompts (unless ``with_greedy`` is false; then None) and
    ``extra(port)`` if given, the status, stop.
    Returns (greedy outputs, status, server, seconds to /health, what ``extra`` returned)."""
    t0 = time.time()
    srv, port = launch(env, tmp, profile, name, *sets)
    started.append(srv)
    wait_healthy(srv, port)
    t_up = time.time() - t0
    out = greedy(port) if with_greedy else None
    more = extra(port) if extra is not None else None
    st = status(port, env)
    srv.stop()
    return out, st, srv, t_up, more


@pytest.mark.parametrize("profile", PROFILES)
def test_every_variant_of_the_profile_runs_in_served_vllm_and_matches_stock(profile, tmp_path):
    env = base_env(tmp_path)
    expect = expected_layers(profile)
    variants = non_stock(profile)
    assert variants, profile
    started: list[Server] = []
    try:
        out_on, st, srv, t_up, _ = serve(env, tmp_path, profile, "on", started)
        ops = st.get("ops") or {}
        for knob, (op, _stock) in variants.items():
            assert st["values"][knob] != _stock, (knob, st["values"])
            o = ops.get(op)
            assert o is not None, f"{knob}: op {op} reported no layers: {sorted(ops)}\n{srv.text()[-3000:]}"
            assert sorted(o["installed_layers"]) == sorted(expect[op]), (op, o)
            assert not o["kept_layers"], (op, o["kept_layers"])
            assert o["calls"].get("fused", 0) > 0, (op, o["calls"])
        print(f"{profile}: up in {t_up:.0f} s; calls per op:", {op: o["calls"] for op, o in sorted(ops.items())})

        sets = [f"{k}={stock}" for k, (_op, stock) in sorted(variants.items())]
        t1 = time.time()
        out_stock, st2, srv2, _, _ = serve(env, tmp_path, profile, "stock", started, *sets)
        for knob, (op, stock) in variants.items():
            assert st2["values"][knob] == stock
            o = (st2.get("ops") or {}).get(op) or {"installed_layers": [], "calls": {}}
            assert not o["installed_layers"] and not o["calls"].get("fused"), (op, o)
        d1, d2 = compile_dirs(srv.text()), compile_dirs(srv2.text())
        if d1 and d2:  # torch.compile ran: the graph-affecting knobs are part of vLLM's compile-cache key
            assert d1.isdisjoint(d2), (d1, d2)
        worst = compare(out_on, out_stock)
        # the same contexts in both launches (the prompts): no greedy path that could part on a near-tie, so
        # every position is within the bound (a kernel that is really wrong cannot hide behind a near-tie)
        pd = [abs(x - y) for a, b in zip(out_on, out_stock) for x, y in zip(a["prompt_logprobs"], b["prompt_logprobs"],
                                                                          strict=True)]
        print(f"{profile}: prompt-token logprobs, largest difference {max(pd):.4f} nats over {len(pd)} positions")
        assert pd and max(pd) <= LOGPROB_BOUND, pd
        print(f"{profile}: stock launch {time.time() - t1:.0f} s; greedy on: {[o['tokens'] for o in out_on]}; "
              f"stock: {[o['tokens'] for o in out_stock]}; largest logprob difference {worst:.4f} nats")
    finally:
        for s in started:
            if s.proc.poll() is None:
                s.stop()
