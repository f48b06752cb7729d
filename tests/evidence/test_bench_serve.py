"""r9kctl bench serve: profiles validated before anything starts; a short paired run on the tiny CPU model.

The e2e test launches two profiles of the tiny Qwen2-MoE model in turn through ``r9kctl launch`` and drives
each with vLLM's own ``vllm bench serve`` (2 repeats, 2 prompts of 16 tokens in / 4 out, concurrency 1,
``--enforce-eager``): most of its time is the two vLLM starts.
"""
from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import textwrap
from pathlib import Path

import pytest

from r9k.r9kctl import cli
from r9k.registry import envvars

E2E_MINUTES = 4  # two vLLM starts (one round): 168 s on 2026-12-01 (two rounds, four starts: 756 s at load 10-12): tests/conftest.py runs it early

PROFILE = textwrap.dedent("""\
    description = "cpu-smoke with the router at stock (the pair of cpu-smoke in the bench serve test)"
    extends = "cpu-smoke"
    [knobs]
    R9K_ROUTER = "stock"
    """)


def test_a_profile_that_fails_validation_stops_before_any_launch(tmp_path, monkeypatch, capsys):
    prof = tmp_path / "profiles"
    prof.mkdir()
    (prof / "broken.toml").write_text('description = "x"\nextends = "cpu-smoke"\n[knobs]\nR9K_ROUTER = "nonsense"\n')
    monkeypatch.setenv(envvars.PROFILES_DIR.name, str(prof))
    out = tmp_path / "out"
    assert cli.main(["bench", "serve", "--profiles", "cpu-smoke,broken", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "profile 'broken' fails validation; nothing launched" in err and "R9K_ROUTER" in err
    assert not out.exists()  # no server log, nothing started
    assert cli.main(["bench", "serve", "--profiles", "cpu-smoke,cpu-smoke"]) == 2
    assert "names a profile twice" in capsys.readouterr().err


def test_summary_pairs_by_repeat():
    from r9k.r9kctl.evidence.serve_bench import Measurement, summarize

    def m(p, r, tok):
        return Measurement(p, 1, r, {"ttft_p50": 10, "ttft_p90": 12, "tpot_p50": 1000 / tok, "tpot_p90": 1100 / tok,
                                     "out_tok_s": tok}, "x")

    s = summarize([m("a", 0, 100), m("a", 1, 50), m("b", 0, 200), m("b", 1, 100)], ["a", "b"])
    a, b = s["rows"]
    assert a["out_tok_s"] == 75 and a["out_tok_s_spread_pct"] == pytest.approx(100 * 50 / 75)
    assert b["out_tok_s_ratio"] == pytest.approx(2.0)  # paired by repeat: 200/100 and 100/50, not 150/75 by chance


@pytest.mark.e2e
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_bench_serve_two_cpu_profiles(tmp_path, monkeypatch, capsys, free_port):
    prof = tmp_path / "profiles"
    prof.mkdir()
    (prof / "cpu-smoke-stock-router.toml").write_text(PROFILE)
    monkeypatch.setenv(envvars.PROFILES_DIR.name, str(prof))
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    out = tmp_path / "out"
    args = ["bench", "serve", "--profiles", "cpu-smoke-stock-router,cpu-smoke", "--concurrency", "1",
            "--repeats", "1", "--num-prompts", "2", "--input-len", "16", "--output-len", "4", "--warmups", "0",
            "--port", str(free_port), "--out", str(out), "--start-timeout", "400"]
    plot = importlib.util.find_spec("matplotlib") is not None
    # --enforce-eager for both launches (after --, as a user passes vLLM arguments): this checks the command's
    # mechanics, not compiled speed, and skips two ~35 s torch.compile traces of the suite's time
    argv = args + (["--plot", str(out / "p.png")] if plot else []) + ["--", "--enforce-eager"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    assert "conc  profile" in text and "cpu-smoke-stock-router" in text and "x)" in text
    summary = json.loads((out / "summary.json").read_text())
    rows = {r["profile"]: r for r in summary["rows"]}
    assert rows["cpu-smoke"]["repeats"] == 1 and rows["cpu-smoke"]["out_tok_s"] > 0
    assert rows["cpu-smoke"]["out_tok_s_ratio"] > 0 and "tpot_p90_spread_pct" in rows["cpu-smoke"]
    assert len(list(out.glob("cpu-smoke-c1-r*.json"))) == 1  # vLLM's own result file
    # one round: each profile started once (the rounds' interleaving, the paired CI and the A/A floor are
    # checked on stand-in servers below; each round here is two more vLLM starts, ~3 minutes each on 2 cores)
    assert len(list(out.glob("server-*-r*.log"))) == 2
    if plot:
        assert (out / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_release_records_are_bench_records():
    import tomllib

    from r9k.r9kctl.evidence.serve_bench import BenchSettings, Measurement, records_toml, release_records, summarize
    from r9k.registry.schema import BenchRecord

    ms = [Measurement("stock", 4, 0, {"ttft_p50": 10, "ttft_p90": 12, "tpot_p50": 9, "tpot_p90": 11,
                                      "out_tok_s": 300}, "x")]
    recs = release_records(summarize(ms, ["stock"]), "fn_tp4", "h200", "r9kctl bench serve --profiles stock",
                           BenchSettings(concurrency=[4]))
    parsed = tomllib.loads(records_toml(recs))["bench"]
    assert len(parsed) == 5 and all(BenchRecord(**r) for r in parsed)
    assert {r["metric"] for r in parsed} >= {"serve output c=4", "serve TPOT p50 c=4"}


# ------------------------------------------------------------------------------------------------ interleaved rounds

class _FakeServers:
    """Records the order servers start in; the 'model' a server serves is its profile's name."""

    def __init__(self):
        self.events = []

    def start(self, profile, port, log, serve_args):
        self.events.append(("start", profile))
        return profile

    def wait_ready(self, proc, port, timeout_s, log):
        return proc

    def stop(self, proc):
        self.events.append(("stop", proc))


def _fake_runner(tok_s):
    """A stand-in for ``vllm bench serve``: writes vLLM's result file with output tok/s = tok_s(profile, seed)."""
    def runner(cmd, stdout, stderr, timeout):
        arg = dict(zip(cmd, cmd[1:]))
        tok = tok_s(arg["--model"], int(arg["--seed"]))
        res = {"p50_ttft_ms": 10.0, "p90_ttft_ms": 12.0, "p50_tpot_ms": 1000 / tok, "p90_tpot_ms": 1100 / tok,
               "output_throughput": tok, "completed": 2, "failed": 0}
        (Path(arg["--result-dir"]) / arg["--result-filename"]).write_text(json.dumps(res))
        return subprocess.CompletedProcess(cmd, 0)
    return runner


def test_rounds_interleave_the_profiles(tmp_path):
    from r9k.r9kctl.evidence.serve_bench import BenchSettings, run

    fake = _FakeServers()
    ms = run(["a", "b"], BenchSettings(concurrency=[1, 4], repeats=3), tmp_path, say=lambda m: None,
             runner=_fake_runner(lambda p, seed: 100.0), servers=fake)
    assert [e for e in fake.events if e[0] == "start"] == [("start", p) for p in "ababab"]
    assert fake.events[:2] == [("start", "a"), ("stop", "a")]  # one server at a time
    assert [(m.profile, m.repeat, m.concurrency) for m in ms][:4] == [("a", 0, 1), ("a", 0, 4), ("b", 0, 1),
                                                                        ("b", 0, 4)]


def test_drift_cancels_in_the_paired_ratio_and_the_ci_is_a_t_interval(tmp_path):
    """The machine slows by 10% a round; B is 1.18x, 1.22x, 1.20x of A in the same round. Interleaved and paired
    by round, the ratio is the geometric mean of the three, with the t-interval over rounds (t(0.975, 2) =
    4.303); the A/A floor is A's own round-to-round change, 10%; the verdict names the direction."""
    from r9k.r9kctl.evidence.serve_bench import BenchSettings, render, run, summarize

    b_over_a = [1.18, 1.22, 1.20]

    def tok_s(profile, r):
        a = 100.0 * 0.9 ** r
        return a if profile == "a" else a * b_over_a[r]

    s = BenchSettings(concurrency=[1], repeats=3)
    summary = summarize(run(["a", "b"], s, tmp_path, say=lambda m: None, runner=_fake_runner(tok_s),
                            servers=_FakeServers()), ["a", "b"])
    b = summary["rows"][1]
    logs = [math.log(x) for x in b_over_a]
    mean, sd = sum(logs) / 3, math.sqrt(sum((x - sum(logs) / 3) ** 2 for x in logs) / 2)
    assert b["out_tok_s_ratio"] == pytest.approx(math.exp(mean))
    assert b["out_tok_s_ratio_lo"] == pytest.approx(math.exp(mean - 4.303 * sd / math.sqrt(3)), rel=1e-4)
    assert b["out_tok_s_ratio_hi"] == pytest.approx(math.exp(mean + 4.303 * sd / math.sqrt(3)), rel=1e-4)
    assert b["out_tok_s_aa_floor_pct"] == pytest.approx(10.0)  # A drops 10% a round
    assert b["out_tok_s_verdict"] == "better by 20.0%"
    assert b["tpot_p50_verdict"] == "better by 16.7%"  # TPOT: lower is better; 1/1.2 = 0.833
    text = render(summary, s)
    assert "95% CI" in text and "A/A floor" in text and "better by 20.0%" in text and "±10.0%" in text


@pytest.mark.parametrize("b_over_a, expect", [
    ([1.04, 1.05, 1.06], "within the A/A floor"),  # the CI excludes 1, but A moves by 10% between its own rounds
    ([0.90, 1.12, 1.00], "no detectable difference"),  # the CI includes 1
])
def test_a_change_below_the_aa_floor_or_a_ci_over_1_is_no_verdict(tmp_path, b_over_a, expect):
    from r9k.r9kctl.evidence.serve_bench import BenchSettings, run, summarize

    def tok_s(profile, r):
        a = 100.0 * 0.9 ** r
        return a if profile == "a" else a * b_over_a[r]

    summary = summarize(run(["a", "b"], BenchSettings(concurrency=[1], repeats=3), tmp_path, say=lambda m: None,
                            runner=_fake_runner(tok_s), servers=_FakeServers()), ["a", "b"])
    assert summary["rows"][1]["out_tok_s_verdict"].startswith(expect)


def test_one_round_gives_a_ratio_without_ci(tmp_path):
    from r9k.r9kctl.evidence.serve_bench import BenchSettings, run, summarize

    summary = summarize(run(["a", "b"], BenchSettings(concurrency=[1], repeats=1), tmp_path, say=lambda m: None,
                            runner=_fake_runner(lambda p, r: 100.0 if p == "a" else 150.0),
                            servers=_FakeServers()), ["a", "b"])
    b = summary["rows"][1]
    assert b["out_tok_s_ratio"] == pytest.approx(1.5) and b["out_tok_s_ratio_lo"] is None
    assert "no CI" in b["out_tok_s_verdict"] and b["out_tok_s_aa_floor_pct"] is None
