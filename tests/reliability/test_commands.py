"""Corpus, part 3: the command line. Options whose values form a closed set (with did-you-mean), commands
that cannot do their job (no GPU, nothing listening), and every other file a command reads (results,
status files, plans, JUnit XML, keymaps, release files given to --into) broken in each way."""
from __future__ import annotations

import json
import os

import pytest

from .harness import REPO, Case, case_id, check
from .test_files import REG

X = "x"  # the scratch folder of the tree

RESULT = "\n".join([json.dumps({"r9k_eval": 1, "label": "corpus"})]
                   + [json.dumps({"id": f"q{i}", "correct": i % 3 != 0}) for i in range(12)]) + "\n"


def _options():
    for argv, contains in [
        (["list", "--category", "fusionn"], "did you mean fusion?"),
        (["list", "--category", "kernels"], "did you mean kernel?"),
        (["list", "--status", "on"], "default-on"),
        (["list", "--status", "opt_in"], "did you mean opt-in?"),
        (["list", "--area", "decod"], "did you mean decode?"),
        (["list", "--tp", "3"], "--tp"),
        (["list", "--tp", "0"], "--tp"),
        (["list", "--tp", "-4"], "--tp"),
        (["resolve", "-p", "tp4-default", "--tp", "3"], "TP 2, 4"),
        (["resolve", "-p", "tp4-default", "--tp", "0"], "positive"),
        (["resolve", "-p", "tp4-default", "--tp", "-1"], "positive"),
        (["resolve", "-p", "27b-tp2", "--tp", "4"], "TP 2"),
        (["validate", "-p", "tp4-default", "--tp", "3"], "TP 2, 4"),
        (["validate", "-p", "tp4-default", "--tp", "0"], "positive"),
        (["validate", "--all", "--tp", "3"], "--tp 3"),
        (["launch", "-p", "tp4-default", "--tp", "3", "--dry-run"], "TP 2, 4"),
        (["launch", "-p", "tp4-default", "--tp", "0", "--dry-run"], "positive"),
        (["gate", "--profile", "tp4-default", "--tp", "0", "--dry-run"], "positive"),
        (["gate", "--profile", "tp4-default", "--tp", "3", "--status"], "TP 2, 4"),
        (["bisect", "plan", "--good", "stock", "--bad", "tp4-defualt", "--dir", "{T}/x/bisect"], "did you mean"),
        (["bisect", "plan", "--good", "stok", "--bad", "tp4-default", "--dir", "{T}/x/bisect"], "did you mean stock?"),
        (["bisect", "plan", "--good", "stock", "--bad", "tp4-default", "--tp", "3", "--dir", "{T}/x/bisect"], "TP"),
        (["bisect", "plan", "--good", "stock", "--bad", "tp4-default", "--alpha", "2", "--dir", "{T}/x/bisect"],
         "--alpha"),
        (["tui", "--profile", "nope"], "--profile 'nope'"),
        (["tui", "--profile", "tp4-defualt"], "did you mean tp4-default?"),
        (["tui", "--tp", "3"], "TP 2, 4"),
        (["tui", "--tp", "0"], "positive"),
        (["bench", "decode-step", "--requests", "1,x"], "--requests"),
        (["bench", "decode-step", "--requests", "0"], "--requests"),
        (["bench", "decode-step", "--context", "100"], "--context"),
        (["bench", "decode-step", "--context", "-16"], "--context"),
        (["bench", "decode-step", "--replays", "0"], "--replays"),
        (["bench", "decode-step", "--ablate-requests", "8"], "--ablate-requests"),
        (["status", "--url", "http://127.0.0.1:9", "--timeout", "0"], "--timeout"),
        (["show", "R9K_ROUTR"], "did you mean R9K_ROUTER?"),
        (["resolve", "-p", "tp4-defualt"], "did you mean tp4-default?"),
        (["validate", "-p", "nope"], "nope"),
        (["resolve", "-p", "tp4-default", "--set", "R9K_ROUTER"], "KNOB=VALUE"),
        (["resolve", "-p", "tp4-default", "--set", "R9K_ROUTR=r9k"], "did you mean R9K_ROUTER?"),
        (["resolve", "-p", "tp4-default", "--set", "R9K_ROUTER=fast"], "R9K_ROUTER"),
        (["resolve", "-p", "tp4-default", "--set", "="], "unknown knob"),
        (["resolve", "-p", "tp4-default", "--set", "UTIL="], "cannot be unset"),
        (["resolve", "-p", ""], "no profile named ''"),
        (["show", ""], "unknown variant"),
        (["diff", "v0.3.1", "nope"], "'nope'"),
        (["diff", "stock", "tp4-defualt"], "tp4-defualt"),
        (["gate", "nope"], "unknown variant"),
        (["bench", "decode-step", "--profile", "nope"], "nope"),
        (["bench", "decode-step", "--against", "nope"], "nope"),
        (["eval", "record", "--url", "not a url", "--dataset", "arith-smoke", "--out", "{T}/x/o.jsonl", "--timeout",
          "1"], "not an http:// or https:// URL"),
        (["eval", "record", "--url", "http://127.0.0.1:9", "--dataset", "nope", "--out", "{T}/x/o.jsonl"],
         "no such file"),
        (["status", "--url", "not a url"], "not an http:// or https:// URL"),
        (["status", "--url", "http://[::1"], "IPv6"),
    ]:
        yield Case("options/" + " ".join(a for a in argv if "{T}" not in a), REG + argv, {}, 2, contains=(contains,))
    yield Case("options/bench-without-what", REG + ["bench"], {}, 2, kind="usage", contains=("decode-step",))
    yield Case("options/unknown-command", REG + ["frobnicate"], {}, 2, kind="usage",
               contains=("'frobnicate' is not an r9kctl command",))  # one located line, with the commands
    for argv in (["list", "--format", "yaml"], ["validate", "--bogus"], ["diff"], ["eval"],
                 ["bench", "decode-step", "--config", "huge"], ["status", "--url", "x", "--file", "y"]):
        yield Case("options/argparse/" + " ".join(argv), REG + argv, {}, 2, errors=None, located=False)


def _cannot():
    yield Case("cannot/status-connection-refused", REG + ["status", "--url", "http://127.0.0.1:9", "--timeout", "2"],
               {}, 2, kind="connection", contains=("Connection refused",))
    yield Case("cannot/status-no-source", REG + ["status"], {}, 2, kind="status")
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    if not gpu:
        yield Case("cannot/bench-decode-step-without-gpu", REG + ["bench", "decode-step"], {}, 2, kind="no-gpu")
        yield Case("cannot/bench-decode-step-without-gpu-json", REG + ["bench", "decode-step", "--format", "json"],
                   {}, 2, kind="no-gpu")


def json_faults(valid: str):
    """(name, content, line, kind) for a JSON file read through fileio.read_json(expect=dict)."""
    def folder(p):
        p.mkdir()

    def loop(p):
        os.symlink(p.name, p)

    yield "missing", None, None, "not-found"
    yield "directory", folder, None, "is-directory"
    yield "symlink-loop", loop, None, "symlink-loop"
    yield "latin1", valid.replace('"', '"\udce9', 1).encode("utf-8", "surrogateescape"), 1, "encoding"
    yield "utf16", valid.encode("utf-16"), 1, "encoding"
    yield "nul", (valid + "\x00").encode(), None, "encoding"
    yield "empty", b"", 1, "json-syntax"
    yield "syntax", b'{\n  "a": 1,\n  "b": \n}\n', 4, "json-syntax"
    yield "a-list", b"[1, 2, 3]\n", 1, "wrong-type"
    yield "a-string", b'"status"\n', 1, "wrong-type"
    yield "deep", ("[" * 200 + "]" * 200).encode(), 1, "too-deep"


def _inputs():
    # bench --result: a decode-step result
    rel = f"{X}/result.json"
    for name, data, line, kind in json_faults('{"ok": true}'):
        yield Case(f"input/bench-result/{name}", REG + ["bench", "decode-step", "--result", "{T}/" + rel],
                   {rel: data}, 2, "result.json", line, kind)
    yield Case("input/bench-result/not-a-result", REG + ["bench", "decode-step", "--result", "{T}/" + rel],
               {rel: '{"ok": true}'}, 2, "result.json", 1, "result-file")
    # status --file: the plugin's status file
    rel = f"{X}/status.json"
    for name, data, line, kind in json_faults('{"processes": {}}'):
        yield Case(f"input/status-file/{name}", REG + ["status", "--file", "{T}/" + rel], {rel: data}, 2,
                   "status.json", line, kind)
    for name, data in [("processes-a-list", '{"processes": []}'), ("section-a-number", '{"processes": {"a": 1}}'),
                       ("section-without-process", '{"processes": {"a": {"hash": "x"}}}'),
                       ("no-sections", '{"profile": "x"}')]:
        yield Case(f"input/status-file/{name}", REG + ["status", "--file", "{T}/" + rel], {rel: data}, 2,
                   "status.json", 1, "status-file")
    # bisect status --dir: the plan
    rel = f"{X}/bisect/plan.json"
    for name, data, line, kind in json_faults('{"good": "stock"}'):
        if name == "missing":
            kind = "bisect"
        yield Case(f"input/bisect-plan/{name}", REG + ["bisect", "status", "--dir", "{T}/x/bisect"], {rel: data}, 2,
                   "plan.json", line, kind)
    yield Case("input/bisect-plan/not-a-plan", REG + ["bisect", "status", "--dir", "{T}/x/bisect"],
               {rel: '{"good": "stock"}'}, 2, "plan.json", 1, "bisect-plan")
    yield Case("input/bisect-dir-missing", REG + ["bisect", "status", "--dir", "{T}/x/nothing"], {}, 2, "plan.json",
               kind="bisect")
    # eval compare A B: JSON Lines result files
    a, b = f"{X}/a.jsonl", f"{X}/b.jsonl"
    for name, data, line, kind in json_faults(RESULT.split("\n")[1]):
        if name in ("empty", "a-list", "a-string", "syntax", "deep"):
            continue  # JSON Lines: below, line by line
        yield Case(f"input/eval-result/{name}", REG + ["eval", "compare", "{T}/" + a, "{T}/" + b],
                   {a: data, b: RESULT}, 2, "a.jsonl", line, kind)
    lines = RESULT.split("\n")
    for name, n, bad, kind in [("syntax", 3, '{"id": "q1", "correct": }', "result-file"),
                               ("a-list", 4, "[1, 2]", "result-file"),
                               ("no-id", 5, '{"correct": true}', "result-file"),
                               ("correct-a-string", 6, '{"id": "q9", "correct": "yes"}', "result-file"),
                               ("duplicate-id", 7, '{"id": "q0", "correct": true}', "result-file"),
                               ("header-late", 8, '{"r9k_eval": 1}', "result-file")]:
        text = "\n".join(lines[: n - 1] + [bad] + lines[n:])
        yield Case(f"input/eval-result/line-{name}", REG + ["eval", "compare", "{T}/" + a, "{T}/" + b],
                   {a: text, b: RESULT}, 2, "a.jsonl", n, kind)
    yield Case("input/eval-result/empty", REG + ["eval", "compare", "{T}/" + a, "{T}/" + b], {a: "", b: RESULT}, 2,
               "a.jsonl", None, "result-file")
    yield Case("input/eval-result/confidence-2", REG + ["eval", "compare", "{T}/" + a, "{T}/" + b, "--confidence", "2"],
               {a: RESULT, b: RESULT}, 2, kind="usage")
    # eval compare --into: a release file that is not one; the file stays as it was
    into = f"{X}/release.toml"
    release = (REPO / "registry/releases/v0.3.2.toml").read_text()
    for name, data, line, kind in [
        ("syntax", release + "\n[[quality\n", len(release.split("\n")) + 1, "toml-syntax"),
        ("latin1", release.replace("#", "# caf\udce9", 1).encode("utf-8", "surrogateescape"), 1, "encoding"),
        ("not-a-release", 'headline = "x"\n', None, "quality"),
        ("quality-a-string", 'quality = "x"\n' + release, None, "toml-syntax"),  # it has [[quality]] tables
        ("quality-a-string-alone", release.split("[[")[0] + 'quality = "x"\n', None, "quality"),
        ("missing", None, None, "not-found"),
    ]:
        yield Case(f"input/eval-into/{name}", REG + ["eval", "compare", "{T}/" + a, "{T}/" + b, "--into",
                                                     "{T}/" + into, "--config", "fn_tp4"],
                   {a: RESULT, b: RESULT, into: data}, 2, "release.toml", line, kind)
    # gate --import-junit: XML
    xml = f"{X}/junit.xml"
    for name, data, line, kind in [
        ("missing", None, None, "not-found"),
        ("latin1", b'<testsuites><testcase name="caf\xe9"/></testsuites>', 1, "encoding"),
        ("utf16", '<testsuites/>'.encode("utf-16"), 1, "encoding"),
        ("not-xml", b"{}\n", 1, "xml-syntax"),
        ("mismatched-tags", b"<testsuites>\n<testcase>\n</testsuites>\n", 3, "xml-syntax"),
        ("entities", b'<?xml version="1.0"?>\n<!DOCTYPE x [<!ENTITY a "b">]>\n<testsuites/>\n', 2, "xml-syntax"),
        ("wrong-root", b"<html><body/></html>\n", 1, "junit"),
        ("empty", b"", 1, "xml-syntax"),
    ]:
        yield Case(f"input/junit/{name}", REG + ["gate", "--import-junit", "{T}/" + xml, "--platform", "cuda-h200"],
                   {xml: data}, 2, "junit.xml", line, kind)
    # tui --keymap
    km = f"{X}/keys.toml"
    for name, data, line, kind in [
        ("missing", None, None, "keymap"),
        ("syntax", "[keys\n", 1, "toml-syntax"),
        ("latin1", '[keys]\n"r9k.help" = "\udce9"\n'.encode("utf-8", "surrogateescape"), 2, "encoding"),
        ("keys-a-string", 'keys = "ctrl+s"\n', 1, "keymap"),
        ("key-a-number", '[keys]\n"r9k.help" = 5\n', 2, "keymap"),
        ("theme-unknown", 'theme = "solarized"\n', 1, "keymap"),
        ("unknown-key", 'colours = 1\n', 1, "keymap"),
        ("utf16", '[keys]\n'.encode("utf-16"), 1, "encoding"),
    ]:
        yield Case(f"input/keymap/{name}", REG + ["tui", "--keymap", "{T}/" + km], {km: data}, 2, "keys.toml", line,
                   kind)


CASES = list(_options()) + list(_cannot()) + list(_inputs())


@pytest.mark.parametrize("c", CASES, ids=case_id)
def test_command(tree, c):
    check(tree, c)
