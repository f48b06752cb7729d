#!/usr/bin/env python3
"""The served comparison on the GPU (``bash scripts/gpu.sh serve``; notes/gpu-serve.md): a fused profile and its
stock twin, each started with ``r9kctl launch --profile P --strict``, both up at once on the one GPU and driven in
turn: ``/r9k/status`` of each, token agreement on the same greedy prompts, rounds interleaved A/B (TPOT at 1
request, output tok/s at each concurrency, the paired ratio with a 95 % t interval), ``/r9k/status`` again; last
the fused profile with the shared-expert kernel mutated to return zeros, which the self-check must refuse.

Writes ``summary.json``, ``summary.txt`` and the servers' log tails into ``--out``. Standard library only (the
image's Python), plus scipy for the t quantile when present.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from r9k.r9kctl.evidence.serve_bench import stop  # SIGTERM to the launch's process group, SIGKILL after 30 s

PROMPTS = ["The quick brown fox", "A router picks two experts for every token", "Kernels are checked against",
           "The capital of France is", "Numbers: 0 1 2 3", "Once upon a time there was", "Hello world! How are",
           "The server reports which implementation"]
ZEROS = [{"module": "r9k.kernels.shared_expert.triton_kernel",
          "old": "    return mxfp4_gemm(aq, as_, w.w2_packed, w.w2_scales, gate=g, out=out)\n",
          "new": "    return mxfp4_gemm(aq, as_, w.w2_packed, w.w2_scales, gate=g, out=out).zero_()\n"}]


ERRORS: list[str] = []  # every failed request: "port P: <error> <the server's answer>"


def say(*a):
    print(*a, flush=True)


PROFILES_DIR: list[str] = []  # --profiles-dir for every launch: the profiles made for the card present, if any


def for_this_card(profiles: list[str]) -> dict[str, str]:
    """The profiles to serve on the GPU present: each one itself when its ``platform`` is this card's, else one
    that extends it (``<name>-<card>``, in a temporary ``--profiles-dir``) with platform ``cuda`` (a strict launch
    then counts the gate records scripts/gpu.sh just made on this card) and this card's memory."""
    import torch

    from r9k.registry import provenance
    from r9k.registry import load_registry

    name = torch.cuda.get_device_name(0)
    plat = provenance.platform_name(provenance.normalize_device(name))
    gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    reg = load_registry()
    out, folder = {}, None
    for prof in profiles:
        p = reg.profiles[prof]
        if (p.platform or "") == plat:
            out[prof] = prof
            continue
        folder = folder or Path(tempfile.mkdtemp(prefix="r9k-card-"))
        new = f"{prof}-{plat.split('-', 1)[-1]}"
        (folder / f"{new}.toml").write_text(
            f'description = "{prof} on the GPU present ({name}); written by scripts/gpu_serve.py"\n'
            f'extends = "{prof}"\nplatform = "cuda"\n\n[hardware]\ngpus = 1\n'
            f'memory_gib_per_gpu = {gib:.1f}\nname = "{name}"\n')
        out[prof] = new
        say(f"{prof} is for {p.platform}; this GPU is {name} ({plat}): serving {new}, which extends it")
    if folder is not None:
        PROFILES_DIR[:] = ["--profiles-dir", str(folder)]
    return out


def launch(profile: str, port: int, log: Path, env_extra: dict | None = None, hook: Path | None = None):
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env_extra or {}))
    if hook is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(hook)] + [p for p in [env.get("PYTHONPATH")] if p])
    argv = [sys.executable, "-m", "r9k.r9kctl.cli", *PROFILES_DIR, "launch", "--profile", profile, "--strict", "--",
            "--port", str(port), "--host", "127.0.0.1"]
    f = log.open("w")
    return subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def get(url: str, timeout: float = 10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def wait_up(proc, port: int, timeout: float) -> bool:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            return False
        try:
            if get(f"http://127.0.0.1:{port}/health", 2)[0] == 200:
                return True
        except Exception:  # noqa: BLE001
            pass
        time.sleep(1)
    return False


def model_id(port: int) -> str:
    return json.loads(get(f"http://127.0.0.1:{port}/v1/models")[1])["data"][0]["id"]


def complete(port: int, model: str, prompt, max_tokens: int, stream: bool, ignore_eos: bool = True) -> dict:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
            "ignore_eos": ignore_eos, "stream": stream, "return_token_ids": True}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    stamps, ids, text = [], [], ""
    try:
        r = urllib.request.urlopen(req, timeout=300)
    except Exception as exc:  # noqa: BLE001 - an HTTP error's body says what the server refused
        body = exc.read().decode(errors="replace")[:400] if hasattr(exc, "read") else ""
        ERRORS.append(f"port {port}: {type(exc).__name__}: {exc} {body}".strip())
        return {"text": "", "ids": [], "tokens": 0, "tpot": None, "ttft": None, "t": time.perf_counter() - t0,
                "error": ERRORS[-1]}
    with r:
        if not stream:
            d = json.loads(r.read())
            c = d["choices"][0]
            return {"text": c.get("text", ""), "ids": c.get("token_ids"), "tokens": d["usage"]["completion_tokens"],
                    "t": time.perf_counter() - t0}
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            c = json.loads(line[5:])["choices"][0]
            n = len(c.get("token_ids") or []) or (1 if c.get("text") else 0)
            if n:
                stamps += [time.perf_counter()] * n
                ids += c.get("token_ids") or []
                text += c.get("text", "")
    return {"text": text, "ids": ids, "tokens": len(stamps), "ttft": stamps[0] - t0 if stamps else None,
            "tpot": (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else None,
            "t": time.perf_counter() - t0}


def load_run(port: int, model: str, conc: int, n_req: int, max_tokens: int, prompt_len: int, seed: int) -> dict:
    """``n_req`` streamed requests, ``conc`` in flight: output tok/s over the wall time, TPOT per request."""
    rnd = random.Random(seed)
    words = "the a router expert token kernel server model layer state value key query cache graph".split()
    prompts = [" ".join(rnd.choice(words) for _ in range(prompt_len)) for _ in range(n_req)]
    out, lock, it = [], threading.Lock(), iter(prompts)

    def worker():
        while True:
            with lock:
                p = next(it, None)
            if p is None:
                return
            r = complete(port, model, p, max_tokens, stream=True)
            with lock:
                out.append(r)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(conc)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    toks = sum(r["tokens"] for r in out)
    tpots = [r["tpot"] for r in out if r["tpot"] is not None]
    errors = sum(1 for r in out if r.get("error"))
    return {"tok_s": toks / wall, "tokens": toks, "wall_s": wall, "errors": errors,
            "tpot_ms": 1e3 * statistics.median(tpots) if tpots else float("nan")}


def t_interval(xs: list[float]) -> tuple[float, float, float]:
    m = statistics.mean(xs)
    if len(xs) < 2:
        return m, float("nan"), float("nan")
    try:
        from scipy.stats import t as student

        q = float(student.ppf(0.975, len(xs) - 1))
    except Exception:  # noqa: BLE001 - the two-sided 95 % quantiles for 2..10 samples
        q = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}.get(
            len(xs) - 1, 2.0)
    h = q * statistics.stdev(xs) / len(xs) ** 0.5
    return m, m - h, m + h


def compact(st: dict) -> dict:
    """One /r9k/status in short: per op the layers installed / kept and the calls by path, the applied-vs-requested
    mismatches, vLLM's per-layer choices (its layer kinds)."""
    vc = st.get("vllm_choices") or {}
    return {"ops": {op: {"installed": o.get("installed"), "kept": o.get("kept"), "calls": o.get("calls")}
                    for op, o in (st.get("ops") or {}).items()},
            "applied_mismatches": len((st.get("applied") or {}).get("mismatches") or []),
            "applied_rows": len((st.get("applied") or {}).get("rows") or []),
            "choices_layers": {k: sorted(v) for k, v in (vc.get("layers") or {}).items()},
            "choices_mismatches": len(vc.get("mismatches") or []), "strict": st.get("strict"),
            "error": st.get("error")}


def broken_kernel(a, logs: Path, summary: dict) -> None:
    """The fused profile with the shared-expert kernel made to return zeros: the self-check must refuse it."""
    hook = Path(tempfile.mkdtemp())
    (hook / "sitecustomize.py").write_text("import r9k.r9kctl.evidence.mutate  # noqa: F401 - test-only\n")
    from r9k.registry import envvars

    log = logs / "broken.log"
    t0 = time.time()
    p = launch(a.fused, 8200, log, {envvars.MUTATE.name: json.dumps(ZEROS)}, hook)
    served = wait_up(p, 8200, a.start_timeout)
    stop(p)
    text = log.read_text(errors="replace")
    lines = [ln for ln in text.splitlines() if "error[self-check]: op" in ln]
    checks = [ln[-300:] for ln in text.splitlines() if "self-check" in ln or "mutat" in ln][:20]
    summary["broken_kernel"] = {"served": served, "returncode": p.returncode, "refused": not served and bool(lines),
                                "lines": lines[:3], "self_check_lines": checks, "seconds": round(time.time() - t0, 1)}
    say("broken kernel:", json.dumps(summary["broken_kernel"])[:600])
    summary["broken_kernel"]["tail"] = text.splitlines()[-40:]


def table_of(rows: list[dict], fused: str, stock: str, concs: list[int], rounds: int) -> list[dict]:
    """Per concurrency: medians over the rounds and the paired ratios (round r of fused over stock's), mean and
    95 % t interval."""
    table = []
    for c in concs:
        def pick(prof, key):
            return [next(x[key] for x in rows if x["round"] == r and x["profile"] == prof and x["conc"] == c)
                    for r in range(rounds)]
        fs, ss = pick(fused, "tok_s"), pick(stock, "tok_s")
        ft, st_ = pick(fused, "tpot_ms"), pick(stock, "tpot_ms")
        table.append({"conc": c, "fused_tok_s": statistics.median(fs), "stock_tok_s": statistics.median(ss),
                      "ratio": t_interval([f / s for f, s in zip(fs, ss)]), "fused_tpot_ms": statistics.median(ft),
                      "stock_tpot_ms": statistics.median(st_),
                      "tpot_speedup": t_interval([s / f for f, s in zip(ft, st_)])})
    return table


def format_table(table: list[dict], date: str, a) -> list[str]:
    lines = [f"served A/B on {date}: {a.fused} vs {a.stock}, {a.rounds} rounds interleaved, "
             f"{a.max_tokens} output tokens a request, greedy, prompt {a.prompt_len} words",
             f"{'conc':>4} {'fused tok/s':>12} {'stock tok/s':>12} {'ratio [95% CI]':>24} {'TPOT fused':>11} "
             f"{'TPOT stock':>11} {'stock/fused TPOT [95% CI]':>28}"]
    for t in table:
        r, q = t["ratio"], t["tpot_speedup"]
        lines.append(f"{t['conc']:>4} {t['fused_tok_s']:>12.1f} {t['stock_tok_s']:>12.1f} "
                     f"{r[0]:>8.3f} [{r[1]:.3f}, {r[2]:.3f}] {t['fused_tpot_ms']:>9.3f}ms {t['stock_tpot_ms']:>9.3f}ms "
                     f"{q[0]:>12.3f} [{q[1]:.3f}, {q[2]:.3f}]")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fused", default="gpu-qwen2-moe")
    ap.add_argument("--stock", default="gpu-qwen2-moe-stock")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/r9k-gpu-out"))
    ap.add_argument("--logs", default=os.environ.get("LOGS", "/tmp/r9k-gpu-logs"))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--concurrency", default="1,4,8,16")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--start-timeout", type=float, default=420)
    ap.add_argument("--skip-broken", action="store_true", help="skip the broken-kernel start")
    a = ap.parse_args()
    out, logs = Path(a.out), Path(a.logs)
    for d in (out, logs):
        d.mkdir(parents=True, exist_ok=True)
    import torch

    card = for_this_card([a.fused, a.stock])
    a.fused, a.stock = card[a.fused], card[a.stock]
    summary: dict = {"fused": a.fused, "stock": a.stock, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "gpu": torch.cuda.get_device_name(0), "request_errors": ERRORS}

    def save():
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))

    role = {a.stock: "stock", a.fused: "fused"}
    ports = {a.fused: 8100, a.stock: 8101}  # 2. both up, one after the other (vLLM's memory profiling of a
    procs, t0, rc = {}, time.time(), 1      # starting server reads the device's free memory: one start at a time)
    try:
        for prof, port in ports.items():
            procs[prof] = launch(prof, port, logs / f"{prof}.log")
            ok = wait_up(procs[prof], port, a.start_timeout)
            summary.setdefault("up", {})[prof] = {"up": ok, "seconds": round(time.time() - t0, 1)}
            if not ok:
                say(f"{prof} did not come up (rc {procs[prof].poll()}); its log's tail:")
                say("\n".join((logs / f"{prof}.log").read_text(errors="replace").splitlines()[-40:]))
                save()
                return 1
        say("both up in", round(time.time() - t0, 1), "s")
        for prof in ports:  # which model runner vLLM instantiated, its compile and graph lines, the choices table
            text = (logs / f"{prof}.log").read_text(errors="replace").splitlines()
            summary.setdefault("log_lines", {})[prof] = [ln[-300:] for ln in text if any(
                k in ln for k in ("Model Runner", "model runner", "CUDA graph", "cudagraph", "torch.compile",
                                  "Graph capturing", "init engine", "Compil", "compil", "autotun", "warm",
                                  "vLLM chose", "MISMATCH", "self-check", "r9k: "))][:80]
        models = {prof: model_id(port) for prof, port in ports.items()}

        statuses: dict = {}

        def status(tag):  # status.json: {"fused-start": ..., "stock-start": ..., "fused-end": ..., ...}
            for prof, port in ports.items():
                try:
                    st = json.loads(get(f"http://127.0.0.1:{port}/r9k/status", 30)[1])
                except Exception as exc:  # noqa: BLE001
                    st = {"error": f"{type(exc).__name__}: {exc}"}
                statuses[f"{role[prof]}-{tag}"] = st
                summary.setdefault("status", {})[f"{role[prof]}-{tag}"] = compact(st)
                say(f"status {prof} {tag}:", json.dumps(compact(st), default=str)[:1500])
            (out / "status.json").write_text(json.dumps(statuses, indent=1, default=str))
        status("start")

        agree = []  # 2. the same greedy prompts
        for pr in PROMPTS:
            r = {prof: complete(port, models[prof], pr, 32, stream=False, ignore_eos=True)
                 for prof, port in ports.items()}
            f, s = r[a.fused], r[a.stock]
            fi, si = f["ids"] or list(f["text"]), s["ids"] or list(s["text"])
            first_diff = next((i for i, (x, y) in enumerate(zip(fi, si)) if x != y), None)
            agree.append({"prompt": pr, "same": fi == si, "first_diff": first_diff, "n": min(len(fi), len(si)),
                          "common_prefix": first_diff if first_diff is not None else min(len(fi), len(si))})
        summary["agreement"] = {"prompts": len(agree), "identical": sum(x["same"] for x in agree),
                                "prefix_tokens": sum(x["common_prefix"] for x in agree),
                                "tokens": sum(x["n"] for x in agree), "per_prompt": agree}
        say("agreement:", summary["agreement"]["identical"], "of", len(agree), "identical;",
            summary["agreement"]["prefix_tokens"], "of", summary["agreement"]["tokens"], "tokens before a difference")
        save()

        concs = [int(c) for c in a.concurrency.split(",")]  # 4. interleaved rounds
        for prof, port in ports.items():  # warm-up at every concurrency (graphs of each batch size)
            for c in concs:
                load_run(port, models[prof], c, c, 16, a.prompt_len, 0)
        rows = []
        for rnd in range(a.rounds):
            for prof in (a.fused, a.stock):  # A/B/A/B
                for c in concs:
                    n = max(3, 2 * c)
                    r = load_run(ports[prof], models[prof], c, n, a.max_tokens, a.prompt_len, 1000 * rnd + c)
                    rows.append({"round": rnd, "profile": prof, "conc": c, **r})
                    say(f"round {rnd} {prof:<22} c={c:<3} {r['tok_s']:9.1f} tok/s  TPOT {r['tpot_ms']:.3f} ms"
                        + (f"  {r['errors']} failed request(s)" if r["errors"] else ""))
        summary["rows"] = rows
        summary["table"] = table = table_of(rows, a.fused, a.stock, concs, a.rounds)
        status("end")
        save()
        lines = format_table(table, summary["date"], a) + [f"GPU: {summary['gpu']}; failed requests: {len(ERRORS)}"]
        lines += [f"  {e[:300]}" for e in ERRORS[:5]]
        (out / "summary.txt").write_text("\n".join(lines) + "\n")
        say("\n".join(lines))
        rc = 0
    finally:
        for p in procs.values():
            stop(p)
        for prof in ports:
            lg = logs / f"{prof}.log"
            if lg.exists():
                (out / f"{role[prof]}.log.tail").write_text(
                    "\n".join(lg.read_text(errors="replace").splitlines()[-150:]))
        save()
    if not a.skip_broken:  # last, so that a slow start of it cannot eat the served comparison's time
        broken_kernel(a, logs, summary)
        save()
    return rc


if __name__ == "__main__":
    sys.exit(main())
