"""eval compare: the release notes' McNemar numbers from constructed per-question files, and refusals."""
from __future__ import annotations

import json
import pytest

from r9k.r9kctl import cmd_eval
from r9k.r9kctl.evidence import mcnemar, results
from r9k.r9kctl.evidence.results import ResultFileError


def test_v020_release_note_5_vs_1(tmp_path, build_pair):
    # v0.2.0: 800-question CoT eval, new default 97.50% (780/800), 5 / 1 discordant, "p = 0.22".
    pa, pb = build_pair(tmp_path, both=775, b=5, c=1, neither=19)
    cmp = mcnemar.compare(results.load(pa), results.load(pb))
    assert (cmp.b, cmp.c, cmp.n) == (5, 1, 800)
    assert cmp.a_correct == 780
    assert cmp.p_value == pytest.approx(0.21875, abs=1e-12)  # 2 * (1 + 6) / 64, exact
    assert f"{cmp.p_value:.2f}" == "0.22"


def test_v031_release_note_7_vs_8(tmp_path, build_pair):
    # v0.3.1 gate: v0.3.0 defaults 95.75% (1,263) vs v0.3.1 defaults 95.83% (1,264) of 1,319,
    # 7 vs 8 discordant, p = 1.00, 25.5% identical outputs.
    pa, pb = build_pair(tmp_path, both=1256, b=7, c=8, neither=48, identical=336)
    cmp = mcnemar.compare(results.load(pa), results.load(pb))
    assert (cmp.a_correct, cmp.b_correct, cmp.n) == (1263, 1264, 1319)
    assert f"{100 * cmp.a_accuracy:.2f} {100 * cmp.b_accuracy:.2f}" == "95.75 95.83"
    assert (cmp.b, cmp.c) == (7, 8)
    assert cmp.p_value == pytest.approx(1.0, abs=1e-12)
    assert cmp.identical == 336 and f"{100 * cmp.identical_share:.1f}" == "25.5"
    lo, hi = cmp.diff_ci
    assert lo < cmp.diff < hi and lo < 0 < hi  # no detectable difference: the interval straddles 0


def test_other_recorded_gates():
    # Further pairs quoted in the original stack's records (releases.toml, knob catalog).
    quoted = {(5, 8): 0.58, (0, 2): 0.50, (5, 7): 0.77, (6, 5): 1.00, (14, 16): 0.86, (4, 5): 1.0, (14, 13): 1.00}
    for (b, c), p in quoted.items():
        assert round(mcnemar.mcnemar_exact_p(b, c), 2) == p, (b, c)
    assert mcnemar.mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar.mcnemar_exact_p(0, 10) == pytest.approx(2 / 1024)


def test_newcombe_interval():
    # Newcombe (1998), paired example (a): 36 / 12 / 2 / 0, theta = 0.2, method 10 interval 0.0569 to 0.3404.
    lo, hi = mcnemar.paired_diff_ci(36, 2, 12, 0)
    assert (round(lo, 4), round(hi, 4)) == (0.0569, 0.3404)
    # Mirrored table, mirrored interval; wider at 99% than at 95%.
    assert mcnemar.paired_diff_ci(36, 12, 2, 0) == pytest.approx((-hi, -lo))
    lo99, hi99 = mcnemar.paired_diff_ci(36, 2, 12, 0, confidence=0.99)
    assert lo99 < lo and hi99 > hi


def test_mismatched_sets_refused(tmp_path, build_pair):
    pa, pb = build_pair(tmp_path, both=40, b=3, c=2, neither=5)
    lines = pb.read_text().splitlines()
    dropped = json.loads(lines[7])["id"]
    pb.write_text("\n".join(lines[:7] + lines[8:]) + "\n")
    with pytest.raises(ResultFileError, match=r"question sets differ.*only in A \(1\): " + dropped):
        mcnemar.compare(results.load(pa), results.load(pb))
    # Same size, one id swapped for another.
    pb.write_text("\n".join(lines[:7] + [json.dumps({"id": "stranger", "correct": True})] + lines[8:]) + "\n")
    with pytest.raises(ResultFileError, match="only in B \\(1\\): stranger"):
        mcnemar.compare(results.load(pa), results.load(pb))


def test_same_ids_different_question_set_refused(tmp_path, build_pair):
    pa, _ = build_pair(tmp_path, both=10, b=1, c=1, neither=2, seed=7, dataset_sha="a" * 64)
    (tmp_path / "x").mkdir()
    _, pb = build_pair(tmp_path / "x", both=10, b=1, c=1, neither=2, seed=7, dataset_sha="b" * 64)
    with pytest.raises(ResultFileError, match="different question sets"):
        mcnemar.compare(results.load(pa), results.load(pb))


def test_bad_files_refused(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"id": "1", "correct": true}\n{"id": 1, "correct": false}\n')
    with pytest.raises(ResultFileError, match="duplicate question id '1'"):
        results.load(p)
    p.write_text('{"id": "1", "correct": "yes"}\n')
    with pytest.raises(ResultFileError, match=r"r.jsonl:1: 'correct' of '1' must be true or false"):
        results.load(p)
    p.write_text('{"id": "1", "correct": true, "output": "x", "output_sha256": "00"}\n')
    with pytest.raises(ResultFileError, match="does not match"):
        results.load(p)


def test_identical_share_needs_outputs(tmp_path):
    pa, pb = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    pa.write_text("".join(json.dumps({"id": i, "correct": i % 3 > 0}) + "\n" for i in range(30)))
    pb.write_text("".join(json.dumps({"id": str(i), "correct": i % 4 > 0}) + "\n" for i in range(30)))
    cmp = mcnemar.compare(results.load(pa), results.load(pb))
    assert cmp.identical is None and "n/a" in cmp.format_text()
    # i%3>0 and i%4==0 -> b; i%3==0 and i%4>0 -> c
    assert (cmp.b, cmp.c) == (sum(1 for i in range(30) if i % 3 and not i % 4),
                              sum(1 for i in range(30) if not i % 3 and i % 4))


def test_cli_compare_json_and_refusal(tmp_path, capsys, build_pair, eval_cli):
    pa, pb = build_pair(tmp_path, both=775, b=5, c=1, neither=19, identical=200)
    assert eval_cli(["eval", "compare", str(pa), str(pb), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["b"], d["c"], d["n"]) == (5, 1, 800)
    assert d["p_value"] == pytest.approx(0.21875)
    assert d["identical_share"] == pytest.approx(0.25)
    assert d["diff_ci"][0] < d["diff"] < d["diff_ci"][1]
    assert eval_cli(["eval", "compare", str(pa), str(pb)]) == 0
    out = capsys.readouterr().out
    assert "b = 5" in out and "c = 1" in out and "p = 0.2188" in out and "no detectable difference" in out
    # A significantly worse candidate exits 1 (unless --no-fail).
    pa, pb = build_pair(tmp_path, both=80, b=12, c=0, neither=8)
    assert eval_cli(["eval", "compare", str(pa), str(pb)]) == 1
    assert eval_cli(["eval", "compare", str(pa), str(pb), "--no-fail"]) == 0
    capsys.readouterr()
    pb.write_text("\n".join(pb.read_text().splitlines()[:-3]) + "\n")
    assert eval_cli(["eval", "compare", str(pa), str(pb)]) == 2
    assert "refusing to compare: question sets differ" in capsys.readouterr().err


def test_minimum_detectable_difference_is_what_the_test_detects():
    """The MDD is checked against the exact test itself: at the MDD's split the rejection rate reaches the power
    (by direct summation over the binomial), just below it does not."""
    from scipy.stats import binom

    n, d = 1319, 15  # the v0.3.1 gate: 15 discordant of 1,319
    mdd = mcnemar.minimum_detectable_difference(n, d)
    pi = (mdd * n / d + 1) / 2
    region = [k for k in range(d + 1) if mcnemar.mcnemar_exact_p(k, d - k) < 0.05]
    power = lambda p: sum(binom.pmf(k, d, p) for k in region)  # noqa: E731
    assert power(pi) >= 0.8 > power(pi - 1e-3)
    assert 0.005 < mdd < 0.012  # under a point: the 0.08-point difference of that gate was far below it
    # fewer than 6 discordant: nothing is detectable at alpha 0.05; more discordance needs a larger difference
    assert mcnemar.min_discordant(0.05) == 6
    assert mcnemar.minimum_detectable_difference(800, 5) is None
    assert mcnemar.minimum_detectable_difference(n, 100) > mdd


def test_compare_states_its_mdd_and_the_aa_floor(tmp_path, capsys, build_pair):
    pa, pb = build_pair(tmp_path, both=1256, b=7, c=8, neither=48)
    assert cmd_eval.run(_args(pa, pb)) == 0
    out = capsys.readouterr().out
    assert "detectable     at n = 1319, 15 discordant (1.1%), alpha 0.05, power 80%: differences of 0.7" in out
    # A/A: two runs of one profile; 15 discordant, not significant: the floor
    assert cmd_eval.run(_args(pa, pb, aa=True)) == 0
    out = capsys.readouterr().out
    assert "run-to-run floor 15/1319 discordant (1.14%" in out and "no significant run-to-run difference" in out
    # A/A that differs significantly: not reproducible, exit 1
    (tmp_path / "x").mkdir()
    qa, qb = build_pair(tmp_path / "x", both=1256, b=15, c=0, neither=48)
    assert cmd_eval.run(_args(qa, qb, aa=True)) == 1
    assert "not reproducible" in capsys.readouterr().out
    # A vs B with a second run of A: both discordances side by side
    assert cmd_eval.run(_args(pa, pb, floor=str(pa))) == 0
    out = capsys.readouterr().out
    assert "floor (A/A2)   0/1319 discordant" in out and "A/B            15/1319" in out


def test_aa_refuses_two_different_profiles(tmp_path, capsys, build_pair):
    pa, pb = build_pair(tmp_path, both=10, b=1, c=1, neither=2)
    for p, prof, h in ((pa, "stock", "aaaa"), (pb, "tp4-default", "bbbb")):
        lines = p.read_text().splitlines()
        head = json.loads(lines[0])
        head["server_r9k"] = {"profile": prof, "hash": h}
        p.write_text("\n".join([json.dumps(head)] + lines[1:]) + "\n")
    assert cmd_eval.run(_args(pa, pb, aa=True)) == 2
    err = capsys.readouterr().err
    assert "error[aa]: not an A/A pair" in err and "stock @ aaaa" in err and err.count("\n") == 1


def _args(a, b, **kw):
    import argparse

    base = dict(eval_cmd="compare", a=str(a), b=str(b), format="text", confidence=0.95, alpha=0.05, power=0.8,
                no_fail=False, into=None, config=None, eval_name=None, baseline_label=None, baseline_release=None,
                note=None, aa=False, floor=None)
    base.update(kw)
    return argparse.Namespace(**base)


def test_a_ci_that_excludes_0_beside_no_detectable_difference_says_the_verdict_follows_p(tmp_path, capsys,
                                                                                         build_pair, eval_cli):
    """b = 0, c = 5 of 100: the exact p is 0.0625 (no rejection at 0.05) while Newcombe's 95% CI,
    [+0.07, +11.12] points, excludes 0; the output says which decides, and why."""
    pa, pb = build_pair(tmp_path, both=85, b=0, c=5, neither=10)
    assert eval_cli(["eval", "compare", str(pa), str(pb)]) == 0
    out = capsys.readouterr().out
    assert "no detectable difference" in out
    assert "the verdict follows the exact McNemar p = 0.0625" in out and "excludes 0" in out
    assert "no difference is established" in out
    assert eval_cli(["eval", "compare", str(pa), str(pb), "--format", "json"]) == 0
    assert "excludes 0" in json.loads(capsys.readouterr().out)["verdict_basis"]
    # where they agree, it says so
    pa, pb = build_pair(tmp_path, both=775, b=5, c=1, neither=19)
    assert eval_cli(["eval", "compare", str(pa), str(pb)]) == 0
    assert "the verdict follows the exact McNemar p = 0.2188 (alpha 0.05); the 95% CI" in capsys.readouterr().out
