"""bisect: planning between shipped profiles, the search over synthetic per-step results, and an end-to-end
run that launches a small OpenAI-compatible server per step (its answers depend on the step's knobs)."""
from __future__ import annotations

import json
import math
import random
import sys
import textwrap
from pathlib import Path

import pytest

from r9k.r9kctl import cli
from r9k.r9kctl.evidence import bisect as B
from r9k.r9kctl.evidence.results import QuestionResult, dump
from r9k.registry import load_registry


@pytest.fixture(scope="module")
def reg():
    return load_registry()


class SyntheticModel:
    """Per-question correctness and outputs as a function of a step's knob values.

    hurts:   knob -> (value, set of question indices that become wrong at that value)
    changes: knob -> (value, set of question indices whose output text changes, correctness kept)
    """

    def __init__(self, n, hurts=None, changes=None, seed=None):
        rng = random.Random(seed)
        self.n = n
        self.base_wrong = set(rng.sample(range(n), n // 20))
        self.ids = [f"q{rng.randrange(10**8)}-{i}" for i in range(n)]
        self.hurts = hurts or {}
        self.changes = changes or {}
        self.evaluated: list[str] = []

    def write(self, d: Path, step: str) -> None:
        self.evaluated.append(step)
        m = json.loads((d / "manifests" / f"{step}.json").read_text())
        env = {item["knob"]: item["value"] for item in m["values"].values()}
        wrong = set(self.base_wrong)
        changed: set[int] = set()
        for knob, (val, qs) in self.hurts.items():
            if env.get(knob) == val:
                wrong |= qs
                changed |= qs
        for knob, (val, qs) in self.changes.items():
            if env.get(knob) == val:
                changed |= qs
        recs = [QuestionResult(qid, i not in wrong, output=f"out {i}" + (" *" if i in changed else ""))
                for i, qid in enumerate(self.ids)]
        dump(d / "results" / f"{step}.jsonl", {"dataset": "synthetic"}, recs)


def drive(d: Path, model: SyntheticModel, max_steps=40):
    for _ in range(max_steps):
        plan, st = B.status(d)
        if st.done:
            return plan, st
        model.write(d, st.next_step)
    raise AssertionError("bisect did not conclude")


def test_plan_round2_vs_tp4_default(reg, tmp_path):
    # The v0.2.0 notes: R9K_ROUTER / R9K_QSA_GLUE / R9K_HC_MIX = stock restores round-2 numerics (of v0.2.0):
    # round2-numerics is v0.2.0 with the trio at stock, so against tp4-default the plan holds the trio and every
    # later change of numerics: the fp8 hc GEMMs of v0.3.1 / v0.3.2 and this project's combine + norm.
    plan = B.make_plan(reg, "round2-numerics", "tp4-default")
    assert plan.tp == 4
    knobs = {k: (g.good[k], g.bad[k]) for g in plan.groups for k in g.knobs}
    assert all(knobs[k] == ("stock", "r9k") for k in ("R9K_HC_MIX", "R9K_QSA_GLUE", "R9K_ROUTER"))
    assert knobs["R9K_HC_FP8_DECODE"] == ("0", "1") and knobs["R9K_HC_FP8_DOWN"] == ("0", "1")
    assert knobs["R9K_HC_COMBINE_NORM"] == ("stock", "r9k")
    B.write_plan(reg, plan, tmp_path)
    last = f"p{len(plan.groups)}"
    ends = {s: json.loads((tmp_path / "manifests" / f"{s}.json").read_text()) for s in ("p0", last)}
    ends["p3"] = ends[last]
    assert ends["p0"]["values"]["hc_decode_mix"]["value"] == "stock"
    assert ends["p3"]["values"]["hc_decode_mix"]["value"] == "r9k"
    from r9k.registry.resolve import resolve

    # The last step is exactly the bad profile: same resolved hash.
    assert ends["p3"]["hash"] == resolve(reg, "tp4-default", env={}).hash
    assert ends["p0"]["hash"] == resolve(reg, "round2-numerics", env={}).hash


@pytest.mark.parametrize("culprit", ["R9K_QSA_GLUE", "R9K_ROUTER", "R9K_HC_MIX"])
def test_binary_search_names_the_knob(reg, tmp_path, culprit):
    plan = B.make_plan(reg, "round2-numerics", "tp4-default")
    B.write_plan(reg, plan, tmp_path)
    rng = random.Random()
    model = SyntheticModel(400, hurts={culprit: ("r9k", set(rng.sample(range(400), 20)))})
    plan, st = drive(tmp_path, model)
    assert [plan.groups[i].knobs for i in st.culprits] == [[culprit]]
    assert len(model.evaluated) <= 2 + math.ceil(math.log2(len(plan.groups)))


def test_binary_search_over_the_whole_stack(reg, tmp_path):
    # stock -> tp4-default: every shipped default differs; knobs that require each other move together.
    plan = B.make_plan(reg, "stock", "tp4-default", tp=4)
    groups = {k: i for i, g in enumerate(plan.groups) for k in g.knobs}
    assert groups["R9K_AR4"] == groups["R9K_AR4_BITS"]  # ar4_bits requires ar4_compressed
    assert groups["R9K_ROUTER"] != groups["R9K_HC_MIX"]
    B.write_plan(reg, plan, tmp_path)
    rng = random.Random()
    culprit = rng.choice(sorted(groups))
    target = plan.groups[groups[culprit]]
    value = target.bad[culprit]
    model = SyntheticModel(600, hurts={culprit: (value, set(rng.sample(range(600), 30)))})
    plan, st = drive(tmp_path, model)
    assert st.culprits == [groups[culprit]], (culprit, st.message)
    assert len(model.evaluated) <= 2 + math.ceil(math.log2(len(plan.groups)))


def test_each_mode_finds_several_and_outputs_criterion(reg, tmp_path):
    rng = random.Random()
    plan = B.make_plan(reg, "round2-numerics", "tp4-default", mode="each")
    B.write_plan(reg, plan, tmp_path / "each")
    model = SyntheticModel(400, hurts={"R9K_QSA_GLUE": ("r9k", set(rng.sample(range(400), 20))),
                                       "R9K_HC_MIX": ("r9k", set(rng.sample(range(400), 20)))})
    plan, st = drive(tmp_path / "each", model)
    assert sorted(k for i in st.culprits for k in plan.groups[i].knobs) == ["R9K_HC_MIX", "R9K_QSA_GLUE"]
    # Outputs criterion: the router changes output text without changing correctness.
    plan = B.make_plan(reg, "round2-numerics", "tp4-default", criterion="outputs")
    B.write_plan(reg, plan, tmp_path / "out")
    model = SyntheticModel(200, changes={"R9K_ROUTER": ("r9k", set(rng.sample(range(200), 15)))})
    plan, st = drive(tmp_path / "out", model)
    assert [plan.groups[i].knobs for i in st.culprits] == [["R9K_ROUTER"]]
    # Under the default criterion the same results show nothing to bisect.
    plan = B.make_plan(reg, "round2-numerics", "tp4-default")
    B.write_plan(reg, plan, tmp_path / "none")
    model.evaluated.clear()
    plan, st = drive(tmp_path / "none", model)
    assert st.done and st.culprits == [] and "nothing to bisect" in st.message


def test_plan_refusals(reg):
    with pytest.raises(B.BisectError, match="nothing to bisect"):
        B.make_plan(reg, "tp4-default", "tp4-default")
    with pytest.raises(B.BisectError, match="unknown profile"):
        B.make_plan(reg, "tp4-default", "no-such-profile")


SERVER = r'''
"""Stand-in for a launch: serves the shipped question set; with R9K_HC_MIX=r9k it gets 8 questions wrong."""
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from r9k.r9kctl.evidence.dataset import load_dataset

ds = load_dataset("arith-smoke")
answers = {q.prompt: q.answer for q in ds.questions}
wrong = {q.prompt for q in ds.questions[::3]} if os.environ.get("R9K_HC_MIX") == "r9k" else set()
assert os.environ["R9K_MANIFEST"].endswith(".json")

class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def _send(self, body):
        data = json.dumps(body).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(data))); self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self._send({"data": [{"id": "stand-in"}]})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"]
        ans = int(answers[prompt]) + (1 if prompt in wrong else 0)
        self._send({"choices": [{"message": {"content": f"#### {ans}"}}], "usage": {}})

HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


def test_end_to_end_run_with_a_launch_command(reg, tmp_path, capsys, free_port):
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    d = tmp_path / "bisect"
    assert cli.main(["bisect", "plan", "--good", "round2-numerics", "--bad", "tp4-default", "--dir", str(d),
                     "--dataset", "arith-smoke"]) == 0
    assert "R9K_HC_MIX: stock -> r9k" in capsys.readouterr().out
    rc = cli.main(["bisect", "run", "--dir", str(d), "--port", str(free_port), "--ready-timeout", "60",
                   "--url-template", "http://127.0.0.1:{port}", "--launch", f"{sys.executable} {script} {{port}}"])
    out = capsys.readouterr().out
    assert rc == 0, out
    import re

    m = re.search(r"verdict: first bad step p(\d+); it switched group (\d+): R9K_HC_MIX: stock -> r9k", out)
    assert m and int(m.group(1)) == int(m.group(2)) + 1, out
    assert cli.main(["bisect", "status", "--dir", str(d), "--format", "json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["done"] and st["culprits"] == [["R9K_HC_MIX"]]
    step = int(m.group(1))
    assert st["verdicts"][f"p{step}"]["bad"] and not st["verdicts"][f"p{step - 1}"]["bad"]
