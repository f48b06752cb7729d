"""eval record end to end against a local OpenAI-compatible server (stdlib http.server, see conftest)."""
from __future__ import annotations

import json
import random

import pytest

from r9k.r9kctl.evidence import dataset as D
from r9k.r9kctl.evidence import mcnemar, results
from r9k.r9kctl.evidence.record import record


def test_record_end_to_end_then_compare(fake_server, tmp_path, capsys, eval_cli):
    ds = fake_server.dataset
    rng = random.Random()
    wrong_a = set(rng.sample([q.id for q in ds.questions], 4))
    fake_server.wrong_prompts = {fake_server.prompt_of[i] for i in wrong_a}
    fake_server.delay_s = 0.01  # give overlapping requests, were there any, a chance to be seen
    out_a = tmp_path / "a.jsonl"
    rc = eval_cli(["eval", "record", "--url", fake_server.url, "--dataset", "arith-smoke", "--out", str(out_a),
               "--quiet"])
    assert rc == 0
    assert f"{len(ds) - 4}/{len(ds)} correct" in capsys.readouterr().out
    rf = results.load(out_a)
    assert rf.header["dataset_sha256"] == ds.sha256() and rf.header["model"] == "fake-model"
    assert rf.header["params"]["concurrency"] == 1
    assert [r.id for r in rf.results.values()] == [q.id for q in ds.questions]
    assert {i for i, r in rf.results.items() if not r.correct} == wrong_a
    assert fake_server.max_in_flight == 1
    assert all(r["temperature"] == 0.0 and r["model"] == "fake-model" for r in fake_server.requests)
    right_q = next(q for q in ds.questions if q.id not in wrong_a)
    got = rf.results[right_q.id]
    assert got.output.endswith(f"#### {right_q.answer}") and got.extra["extracted"] == right_q.answer
    wrong_q = next(q for q in ds.questions if q.id in wrong_a)
    assert rf.results[wrong_q.id].extra["extracted"] == str(int(wrong_q.answer) + 1)

    assert "server_r9k" not in rf.header  # this server has no /r9k/status route

    # A second run that gets a different set wrong; compare pairs them question by question. This time
    # the server reports its active set, as one with the plugin does; the header keeps it.
    fake_server.r9k_status = {"profile": "cpu-smoke", "hash": "0123456789ab", "tp": 1, "agree": True,
                              "processes": {}}
    wrong_b = set(rng.sample([q.id for q in ds.questions], 3))
    fake_server.wrong_prompts = {fake_server.prompt_of[i] for i in wrong_b}
    out_b = tmp_path / "b.jsonl"
    record(ds, fake_server.url + "/v1/", out_b, progress=None)
    assert results.load(out_b).header["server_r9k"]["hash"] == "0123456789ab"
    cmp = mcnemar.compare(results.load(out_a), results.load(out_b))
    assert cmp.b_server["profile"] == "cpu-smoke" and cmp.a_server is None
    assert "B: cpu-smoke @ 0123456789ab" in cmp.format_text()
    assert cmp.b == len(wrong_b - wrong_a) and cmp.c == len(wrong_a - wrong_b)
    assert cmp.identical == len(ds) - len(wrong_a ^ wrong_b)


def test_record_retries_and_resumes(fake_server, tmp_path):
    ds = fake_server.dataset
    out = tmp_path / "r.jsonl"
    fake_server.fail_next = 1  # a 503 first: the client retries
    seen = []

    class Stop(Exception):
        pass

    def stop_after_five(qid, ok):
        seen.append(qid)
        if len(seen) == 5:
            raise Stop

    with pytest.raises(Stop):
        record(ds, fake_server.url, out, progress=None, on_result=stop_after_five)
    assert len(results.load(out).results) == 5
    # Simulate a torn last line from a killed run; resume drops it and asks that question again.
    with out.open("a") as fh:
        fh.write('{"id": "arith-006", "corr')
    n_before = len(fake_server.requests)
    record(ds, fake_server.url, out, progress=None, resume=True)
    rf = results.load(out)
    assert list(rf.results) == [q.id for q in ds.questions]
    assert len(fake_server.requests) - n_before == len(ds) - 5
    assert rf.correct == len(ds)
    # Resuming a file made from another question set is refused.
    other = D.Dataset("other", ds.questions[:3], "mem")
    with pytest.raises(results.ResultFileError, match="another question set"):
        record(other, fake_server.url, out, progress=None, resume=True)


def test_completions_api_and_limit(fake_server, tmp_path):
    ds = fake_server.dataset
    out = tmp_path / "c.jsonl"
    record(ds, fake_server.url, out, api="completions", limit=6, keep_output=False, progress=None)
    rf = results.load(out)
    assert rf.n == 6 and rf.correct == 6
    assert all(r.output is None and len(r.output_sha256) == 64 for r in rf.results.values())
    assert all("prompt" in r for r in fake_server.requests)


def test_dataset_formats_and_graders(tmp_path):
    gsm = tmp_path / "gsm.jsonl"
    gsm.write_text(json.dumps({"question": "2 + 2?", "answer": "Two and two.\n#### 4"}) + "\n"
                   + json.dumps({"question": "Half of 1,000?", "answer": "#### 500"}) + "\n")
    ds = D.load_dataset(gsm)
    assert [q.id for q in ds.questions] == ["gsm8k-0000", "gsm8k-0001"]
    q0, q1 = ds.questions
    assert D.grade(q0, "so 2+2 is\n#### 4")[0]
    assert D.grade(q1, "The answer is 500.")[0]
    assert D.grade(q1, "#### 1,000 / 2 = 500")[0] is False  # the number right after #### counts
    assert D.grade(q1, "It is $500.00")[0]
    assert not D.grade(q1, "no idea")[0]
    he = tmp_path / "he.jsonl"
    he.write_text(json.dumps({"task_id": "HumanEval/0", "prompt": "def add(a, b):\n", "entry_point": "add",
                              "canonical_solution": "    return a + b\n",
                              "test": "def check(f):\n    assert f(2, 3) == 5\n"}) + "\n")
    (hq,) = D.load_dataset(he).questions
    with pytest.raises(D.DatasetError, match="--execute-code"):
        D.grade(hq, "```python\ndef add(a, b):\n    return a + b\n```")
    assert D.grade(hq, "```python\ndef add(a, b):\n    return a + b\n```", execute_code=True)[0]
    assert D.grade(hq, "    return a + b\n", execute_code=True)[0]
    assert not D.grade(hq, "```python\ndef add(a, b):\n    return a - b\n```", execute_code=True)[0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "prompt": "p", "answer": "1"}\n{"id": "x", "prompt": "q", "answer": "2"}\n')
    with pytest.raises(D.DatasetError, match="duplicate question id 'x'"):
        D.load_dataset(bad)
    # The fingerprint follows the questions, not the file's formatting.
    spaced = tmp_path / "spaced.jsonl"
    spaced.write_text("\n".join(json.dumps(json.loads(l), indent=None, separators=(", ", ":  "))
                                for l in gsm.read_text().splitlines()) + "\n\n")
    assert D.load_dataset(spaced).sha256() == ds.sha256()


def test_unreachable_server_is_a_clear_error(tmp_path, capsys, free_port):
    port = free_port  # nothing listens there
    from r9k.r9kctl.evidence import record as R

    client = R.Client(R.api_base(f"http://127.0.0.1:{port}"), retries=1)
    with pytest.raises(R.ServerError, match="failed after 2 attempts"):
        client.models()
