"""r9kctl bench serve: profiles validated before anything starts; a short paired run on the tiny CPU model.

The e2e test launches two profiles of the tiny Qwen2-MoE model in turn through ``r9kctl launch`` and drives
each with vLLM's own ``vllm bench serve`` (2 repeats, 2 prompts of 16 tokens in / 4 out, concurrency 1,
``--enforce-eager``): most of its time is the two vLLM starts.
"""
from __future__ import annotations

import importlib.util
import json
import textwrap

import pytest

from r9k.r9kctl import cli
from r9k.registry import envvars

E2E_MINUTES = 3  # its wall time in the CI rehearsal of 2026-12-01 (168 s): tests/conftest.py runs it early

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
    assert b["out_tok_s_ratio"] == 2.0  # paired by repeat: 200/100 and 100/50, not 150/75 by chance


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
            "--repeats", "2", "--num-prompts", "2", "--input-len", "16", "--output-len", "4", "--warmups", "0",
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
    assert rows["cpu-smoke"]["repeats"] == 2 and rows["cpu-smoke"]["out_tok_s"] > 0
    assert rows["cpu-smoke"]["out_tok_s_ratio"] > 0 and "tpot_p90_spread_pct" in rows["cpu-smoke"]
    assert len(list(out.glob("cpu-smoke-c1-r*.json"))) == 2  # vLLM's own result files
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
