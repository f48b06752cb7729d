"""Paired serving benchmarks of profiles (``r9kctl bench serve --profiles stock,tp4-default``).

For env knobs nothing else does this: vLLM's ``bench sweep`` varies only command-line flags. Here every
profile is first validated (a profile that fails validation stops the run before anything is launched); then
the run goes in interleaved rounds, A B, A B, ... (``--repeats`` rounds): in each round every profile's server
is started in turn with ``r9kctl launch --profile P -- --port PORT`` (so it runs exactly what a user's launch
runs), driven by vLLM's own client, ``vllm bench serve`` (random prompts of a fixed input and output length,
``--ignore-eos``, one seed per round shared by all profiles, so round ``r`` sends the same prompts to every
profile), at each concurrency, and stopped. A drift of the machine over the run (heat, other load) thus falls
on every profile alike. From vLLM's result files:

* TTFT p50 / p90 and TPOT p50 / p90 (ms), output tokens/s, per profile and concurrency: the median over the
  rounds, and the run-to-run spread (max - min over the rounds, in % of the median);
* the ratio of each profile to the first one (the baseline) at the same concurrency, paired by round (the same
  prompts, adjacent in time): the geometric mean of the per-round ratios with a 95% t-interval over the rounds
  (the rounds are the independent units), and the A/A floor: the largest change of the baseline between its
  own consecutive rounds, i.e. what one more start of the same profile moves a figure by. The verdict says
  "no detectable difference" when the CI includes 1, "within the A/A floor" when the CI excludes 1 but the
  change is no larger than that floor, else better or worse by the change.

``--plot FILE.png`` draws output tok/s and TPOT p50 against concurrency (matplotlib, when installed);
``--release-records`` prints the figures as ``[[bench]]`` records (registry ``BenchRecord``) for a release.
"""
from __future__ import annotations

import functools
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from ...registry import fileio
from .. import netclient
from ..decode_step import report

# (key in our summary, key in vLLM's result JSON, label, unit, higher is better)
METRICS = [
    ("ttft_p50", "p50_ttft_ms", "TTFT p50", "ms", False),
    ("ttft_p90", "p90_ttft_ms", "TTFT p90", "ms", False),
    ("tpot_p50", "p50_tpot_ms", "TPOT p50", "ms", False),
    ("tpot_p90", "p90_tpot_ms", "TPOT p90", "ms", False),
    ("out_tok_s", "output_throughput", "output", "tok/s", True),
]


@dataclass
class BenchSettings:
    concurrency: list[int]
    repeats: int = 3
    num_prompts: int = 32
    input_len: int = 128
    output_len: int = 64
    warmups: int = 1
    port: int = 18300
    start_timeout_s: float = 900.0
    run_timeout_s: float = 900.0
    seed: int = 0
    serve_args: list[str] = field(default_factory=list)


@dataclass
class Measurement:
    profile: str
    concurrency: int
    repeat: int
    metrics: dict[str, float]
    file: str


class BenchError(RuntimeError):
    pass


def launch_command(profile: str, port: int, serve_args: list[str]) -> list[str]:
    return [sys.executable, "-m", "r9k.r9kctl.cli", "launch", "--profile", profile, "--", "--port", str(port), *serve_args]


def _get(url: str, timeout: float = 5.0) -> Optional[dict]:
    """The JSON object at ``url`` (bounded: :mod:`r9k.r9kctl.netclient`), or None."""
    try:
        return netclient.get_json(url, timeout_s=timeout, max_bytes=1 << 20)
    except (OSError, ValueError):
        return None


def start(profile: str, port: int, log: Path, serve_args: list[str]) -> subprocess.Popen:
    fh = fileio.open_for_writing(log, what="log file")
    return subprocess.Popen(launch_command(profile, port, serve_args), stdout=fh, stderr=subprocess.STDOUT,
                            start_new_session=True)  # its own process group: stopped as a whole


def wait_ready(proc: subprocess.Popen, port: int, timeout_s: float, log: Path) -> str:
    """The served model's id, once ``/v1/models`` answers; BenchError if the server dies or times out."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise BenchError(f"the server exited with status {proc.returncode} before answering ({log}):\n{tail}")
        d = _get(f"http://127.0.0.1:{port}/v1/models")
        data = d.get("data") if d else None
        if data and isinstance(data, list) and isinstance(data[0], dict) and isinstance(data[0].get("id"), str):
            return data[0]["id"]
        time.sleep(2)
    raise BenchError(f"the server did not answer /v1/models within {timeout_s:.0f} s ({log})")


def stop(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def client_command(port: int, model: str, c: int, s: BenchSettings, seed: int, result_dir: Path,
                   name: str) -> list[str]:
    vllm = Path(sys.executable).parent / "vllm"
    return [str(vllm), "bench", "serve", "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}",
            "--endpoint", "/v1/completions", "--model", model, "--tokenizer", model,
            "--dataset-name", "random", "--random-input-len", str(s.input_len),
            "--random-output-len", str(s.output_len), "--num-prompts", str(s.num_prompts),
            "--max-concurrency", str(c), "--num-warmups", str(s.warmups), "--seed", str(seed), "--ignore-eos",
            "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,90", "--disable-tqdm",
            "--save-result", "--result-dir", str(result_dir), "--result-filename", name]


def read_result(path: Path) -> dict[str, float]:
    d = json.loads(path.read_text())
    if d.get("failed"):
        raise BenchError(f"{path}: {d['failed']} of {d.get('completed', 0) + d['failed']} requests failed "
                         f"(first error: {next((e for e in d.get('errors', []) if e), '?')})")
    missing = [k for _, k, *_ in METRICS if k not in d]
    if missing:
        raise BenchError(f"{path}: vLLM's result has no {', '.join(missing)}")
    return {ours: float(d[theirs]) for ours, theirs, *_ in METRICS}


class Servers:
    """How a round starts, waits for and stops a profile's server (a test passes a fake one)."""

    start = staticmethod(start)
    wait_ready = staticmethod(wait_ready)
    stop = staticmethod(stop)


def run(profiles: list[str], s: BenchSettings, out_dir: Path, say: Callable[[str], None] = print,
        runner: Callable[..., Any] = subprocess.run, servers: Any = Servers) -> list[Measurement]:
    """Interleaved rounds: round r starts each profile's server in turn (A B, A B, ...), drives it at every
    concurrency with the seed of round r, and stops it, so slow drift of the machine (thermal, other load)
    falls on every profile alike instead of on whichever ran last."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[Measurement] = []
    for r in range(s.repeats):
        for prof in profiles:
            tag = f"[round {r + 1}/{s.repeats} {prof}]"
            log = out_dir / f"server-{prof}-r{r}.log"
            say(f"{tag} starting: {' '.join(launch_command(prof, s.port, s.serve_args)[1:])} (log {log})")
            t0 = time.monotonic()
            proc = servers.start(prof, s.port, log, s.serve_args)
            try:
                model = servers.wait_ready(proc, s.port, s.start_timeout_s, log)
                say(f"{tag} ready in {time.monotonic() - t0:.0f} s: {model}")
                for c in s.concurrency:
                    name = f"{prof}-c{c}-r{r}.json"
                    client_log = out_dir / f"client-{prof}-c{c}-r{r}.log"
                    cmd = client_command(s.port, model, c, s, s.seed + r, out_dir, name)
                    with fileio.open_for_writing(client_log, what="log file") as fh:
                        rc = runner(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=s.run_timeout_s).returncode
                    if rc != 0 or not (out_dir / name).is_file():
                        raise BenchError(f"vllm bench serve exited with status {rc} ({client_log})")
                    m = read_result(out_dir / name)
                    results.append(Measurement(prof, c, r, m, str(out_dir / name)))
                    say(f"{tag} c={c}: output {m['out_tok_s']:.1f} tok/s, "
                        f"TTFT p50 {m['ttft_p50']:.1f} ms, TPOT p50 {m['tpot_p50']:.2f} ms")
            finally:
                servers.stop(proc)
    return results


CONFIDENCE = 0.95


def ratio_ci(pairs: list[tuple[float, float]], confidence: float = CONFIDENCE) -> Optional[dict]:
    """The paired ratio a / b over rounds: geometric mean with a t-interval on the log ratios (rounds are the
    independent units: one server start of each profile, the same prompts); lo/hi None with one round."""
    logs = [math.log(a / b) for a, b in pairs if a > 0 and b > 0]
    if not logs:
        return None
    from scipy.stats import t as student_t

    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return {"ratio": math.exp(mean), "lo": None, "hi": None, "rounds": 1}
    half = float(student_t.ppf((1 + confidence) / 2, len(logs) - 1)) * statistics.stdev(logs) / math.sqrt(len(logs))
    return {"ratio": math.exp(mean), "lo": math.exp(mean - half), "hi": math.exp(mean + half), "rounds": len(logs)}


def aa_floor_pct(vals_by_round: dict[int, float]) -> Optional[float]:
    """The A/A floor: the largest change (in %) of the baseline between its own consecutive rounds, i.e. what
    one more start of the same profile moves a figure by here; None with fewer than two rounds."""
    rs = sorted(vals_by_round)
    ch = [abs(vals_by_round[r] / vals_by_round[q] - 1) for q, r in zip(rs, rs[1:]) if vals_by_round[q]]
    return 100 * max(ch) if ch else None


def verdict(ci: Optional[dict], floor_pct: Optional[float], higher_is_better: bool) -> str:
    if ci is None:
        return "no ratio (a zero figure)"
    if ci["lo"] is None:
        return "one round: no CI (--repeats 2 or more)"
    if ci["lo"] <= 1 <= ci["hi"]:
        return f"no detectable difference ({100 * CONFIDENCE:.0f}% CI includes 1)"
    change = 100 * (ci["ratio"] - 1)
    if floor_pct is not None and abs(change) <= floor_pct:
        return f"within the A/A floor (CI excludes 1, but {abs(change):.1f}% <= {floor_pct:.1f}%)"
    better = (change > 0) == higher_is_better
    return f"{'better' if better else 'worse'} by {abs(change):.1f}%"


def summarize(ms: list[Measurement], profiles: list[str]) -> dict:
    """{"rows": [{profile, concurrency, repeats, <metric>: median, <metric>_spread_pct, <metric>_ratio,
    <metric>_ratio_lo/_hi (CI over paired rounds), <metric>_aa_floor_pct (the baseline's), <metric>_verdict}]}"""
    rows = []
    conc = sorted({m.concurrency for m in ms})
    base = profiles[0]
    for c in conc:
        base_by_round = {b.repeat: b for b in ms if b.profile == base and b.concurrency == c}
        for p in profiles:
            mine = [m for m in ms if m.profile == p and m.concurrency == c]
            if not mine:
                continue
            row: dict[str, Any] = {"profile": p, "concurrency": c, "repeats": len(mine)}
            for key, _, _, _, higher in METRICS:
                vals = [m.metrics[key] for m in mine]
                med = statistics.median(vals)
                row[key] = med
                row[f"{key}_min"], row[f"{key}_max"] = min(vals), max(vals)
                row[f"{key}_spread_pct"] = 100 * (max(vals) - min(vals)) / med if med else 0.0
                if p != base:
                    floor = aa_floor_pct({r: b.metrics[key] for r, b in base_by_round.items()})
                    ci = ratio_ci([(m.metrics[key], base_by_round[m.repeat].metrics[key]) for m in mine
                                   if m.repeat in base_by_round])
                    row[f"{key}_ratio"] = ci and ci["ratio"]
                    row[f"{key}_ratio_lo"], row[f"{key}_ratio_hi"] = (ci["lo"], ci["hi"]) if ci else (None, None)
                    row[f"{key}_aa_floor_pct"] = floor
                    row[f"{key}_verdict"] = verdict(ci, floor, higher)
            rows.append(row)
    return {"profiles": profiles, "baseline": base, "confidence": CONFIDENCE, "rows": rows}


def render(summary: dict, s: BenchSettings) -> str:
    base = summary["baseline"]
    head = (f"vllm bench serve: random prompts, {s.input_len} in / {s.output_len} out tokens, {s.num_prompts} "
            f"prompts a run, {s.repeats} interleaved round(s) (each round starts every profile once, in turn); "
            f"median over rounds, spread = (max - min) / median; ratio = profile / {base} (paired by round)")
    cols = ["conc", "profile"] + [f"{lab} {unit}" for _, _, lab, unit, _ in METRICS]
    table = [cols]
    ratios = [["conc", "profile", "metric", "ratio", f"{100 * summary.get('confidence', CONFIDENCE):.0f}% CI",
               "A/A floor", "verdict"]]
    for r in summary["rows"]:
        cells = [str(r["concurrency"]), r["profile"]]
        for key, _, lab, unit, _ in METRICS:
            cell = f"{r[key]:.2f} ±{r[key + '_spread_pct']:.0f}%"
            if r.get(key + "_ratio") is not None:
                cell += f" ({r[key + '_ratio']:.2f}x)"
                lo, hi, floor = r[key + "_ratio_lo"], r[key + "_ratio_hi"], r[key + "_aa_floor_pct"]
                ratios.append([str(r["concurrency"]), r["profile"], f"{lab} {unit}", f"{r[key + '_ratio']:.3f}x",
                               "-" if lo is None else f"[{lo:.3f}, {hi:.3f}]",
                               "-" if floor is None else f"±{floor:.1f}%", r[key + "_verdict"]])
            cells.append(cell)
        table.append(cells)
    lines = [head, ""] + _columns(table)
    if len(ratios) > 1:
        lines += ["", f"ratio to {base}: geometric mean over the paired rounds, t-interval over rounds; A/A floor: "
                      f"the largest change of {base} between its own consecutive rounds", ""] + _columns(ratios)
    return "\n".join(lines)


def _columns(table: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]


def plot(summary: dict, path: Path) -> Optional[str]:
    """Write the PNG; None when done, else why not (matplotlib missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'r9k-stack[bench]')"
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, (key, label) in zip(axes, [("out_tok_s", "output tok/s"), ("tpot_p50", "TPOT p50 (ms)"),
                                       ("ttft_p50", "TTFT p50 (ms)")]):
        for p in summary["profiles"]:
            rows = [r for r in summary["rows"] if r["profile"] == p]
            xs = [r["concurrency"] for r in rows]
            ys = [r[key] for r in rows]
            err = [[r[key] - r[key + "_min"] for r in rows], [r[key + "_max"] - r[key] for r in rows]]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=p)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(label)
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("r9kctl bench serve (vllm bench serve), median over repeats, bars: min to max over repeats")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def release_records(summary: dict, config: str, platform: str, command: str, s: BenchSettings) -> list[dict]:
    """``[[bench]]`` records (BenchRecord fields): one per profile, concurrency and metric."""
    return [{"config": config, "metric": f"serve {label} c={r['concurrency']}", "value": round(r[key], 3),
             "unit": unit, "stack": "ours", "platform": platform, "method": "r9kctl-bench",
             "setting": f"profile {r['profile']}", "command": command,
             "source": f"r9kctl bench serve: vllm bench serve, random {s.input_len}/{s.output_len} "
                       f"tokens, {s.num_prompts} prompts, median of {r['repeats']} "
                       f"(spread {r[key + '_spread_pct']:.1f}%)"}
            for r in summary["rows"] for key, _, label, unit, _ in METRICS]


records_toml = functools.partial(report.records_toml, keys=("config", "metric", "value", "unit", "stack", "platform",
                                                            "method", "setting", "command", "source"))
