"""One fault, one line: strict mode's "cannot run on this platform" verdicts are one line per profile, so a
real fault is not buried under them; the former exit-3 paths (a provenance file that is not UTF-8 or nests
too deeply, ``launch --dry-run`` with a cache folder that cannot be used) are one located line, exit 2."""
from __future__ import annotations

from pathlib import Path

import pytest

from r9k.registry import envvars
from r9k.registry import provenance as P

from .harness import REPO, run_main


def test_strict_platform_verdicts_are_one_line_beside_a_real_fault(tmp_path):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "strictfault.toml").write_text('extends = "tp4-default"\nstrict = true\n[knobs]\nR9K_NOPE = "1"\n')
    code, out, err = run_main(["--profiles-dir", str(folder), "validate", "-p", "strictfault", "--strict"])
    errors = [ln for ln in err.splitlines() if "error[" in ln]
    assert code == 2
    kinds = sorted(ln.split("error[")[1].split("]")[0] for ln in errors)
    assert kinds.count("no-implementation") == 1, errors
    assert "strictfault.toml:4:" in next(ln for ln in errors if "unknown-variant" in ln)
    summary = next(ln for ln in errors if "no-implementation" in ln)
    assert "R9K_ROUTER=r9k" in summary and "cannot run on platform" in summary


def test_without_strict_each_verdict_stays_a_warning():
    code, out, err = run_main(["validate", "-p", "tp4-default"])
    assert sum("warning[no-implementation]" in ln for ln in err.splitlines()) > 1


@pytest.mark.parametrize("content,words", [
    (b'{"r9k_provenance": "caf\xe9"}', ("not UTF-8", "line 1")),
    (b"[" * 5000 + b"]" * 5000, ("nests deeper",)),
    (b"\xff\xfe{\x00}\x00", ("UTF-16",)),
])
def test_provenance_file_problems_are_located(tmp_path, content, words):
    f = tmp_path / "provenance.json"
    f.write_bytes(content)
    with pytest.raises(P.ProvenanceError) as ei:
        P.read(f)
    for w in words:
        assert w in str(ei.value)


@pytest.mark.parametrize("cache", ["file", "devfull"])
def test_launch_dry_run_with_an_unusable_cache_folder(tmp_path, cache):
    if cache == "file":
        where = tmp_path / "cache-is-a-file"
        where.write_text("x")
    else:
        where = "/dev/full"
    code, out, err = run_main(["launch", "-p", "cpu-smoke", "--dry-run"], {envvars.CACHE_DIR.name: str(where)})
    errors = [ln for ln in err.splitlines() if "error[" in ln]
    assert code == 2 and len(errors) == 1 and "error[internal]" not in err, err
    assert errors[0].startswith(str(where)) or str(where) in errors[0]


# --------------------------------------------------------------------------- issue 37: the held-out classes
# Each case: one fault in one file of a copy of the registry (``tree``); the command must print exactly one
# error line, at the exact file, line and column of the offending key, exit 2 and change nothing.

DECODE = (REPO / "registry/variants/decode.toml").read_text()
MODELS = (REPO / "registry/models.toml").read_text()
R9K1 = (REPO / "registry/releases/v0.3.2-r9k.1.toml").read_text()


def _line(text: str, needle: str) -> int:
    return next(n for n, ln in enumerate(text.split("\n"), 1) if needle in ln)


def _sub(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


PF = "p/fault.toml"
MODEL_KNOBS = ('extends = "tp4-default"\ndescription = "x"\nmodel = "qwen3.8-flash-nxt"\n\n[knobs]\n'
               'R9K_ROUTER = "r9k"\nMTP = 3\nR9K_QSA_GLUE = "r9k"\n')
GATE = "kernels/router/test_router.py::test_router_gate_interpreter"
# (id, files, the commands, file, line, col, kind)
CASES = [
    ("toml-duplicate-knob", {PF: 'extends = "tp4-default"\ndescription = "x"\n\n[knobs]\nR9K_ROUTER = "r9k"\n'
                             '  R9K_ROUTER = "stock"\n'}, "profile", "fault.toml", 6, 3, "toml-syntax"),
    ("knob-and-its-variant-id", {PF: 'extends = "tp4-default"\ndescription = "x"\n\n[knobs]\nR9K_ROUTER = "r9k"\n'
                                 'router_gemm = "stock"\n'}, "profile", "fault.toml", 6, 1, "duplicate-knob"),
    ("unknown-model-with-its-knobs", {PF: MODEL_KNOBS}, "profile", "fault.toml", 3, 1, "unknown-model"),
    ("array-for-a-knob", {PF: 'extends = "tp4-default"\ndescription = "x"\n\n[knobs]\nR9K_ROUTER = ["r9k"]\n'},
     "profile", "fault.toml", 5, 1, "schema"),
    ("table-for-a-knob", {PF: 'extends = "tp4-default"\ndescription = "x"\n\n[knobs]\nR9K_ROUTER = { a = 1 }\n'},
     "profile", "fault.toml", 5, 1, "schema"),
    # a knob of the child costs more than the parent's GPU holds: the child's knob, not the parent's [hardware]
    ("memory-of-a-knob", {PF: 'extends = "tp4-default"\ndescription = "x"\n\n[knobs]\nR9K_PLE_FORMAT = "stock"\n'},
     "budget", "fault.toml", 5, 1, "memory"),
    # the CPU backend's KV space of the parent's [env] does not fit the child's GPU: the child's [hardware]
    ("memory-of-the-hardware", {PF: 'extends = "cpu-smoke"\ndescription = "x"\n\n[hardware]\ngpus = 1\n'
                                'memory_gib_per_gpu = 0.01\n'}, "budget", "fault.toml", 6, 1, "memory"),
    ("gate-test-folder-missing",
     {"registry/variants/decode.toml": _sub(DECODE, GATE, GATE.replace("router/", "routr/"))}, "registry",
     "decode.toml", _line(DECODE, GATE), 1, "unknown-test"),
    ("models-unknown-top-level-key", {"registry/models.toml": _sub(MODELS, "[[model]]", "bogus = 3\n\n[[model]]")},
     "registry", "models.toml", _line(MODELS, "[[model]]"), 1, "schema"),
    ("models-misspelt-array", {"registry/models.toml": _sub(MODELS, "[[model]]", "[[models]]")},
     "registry", "models.toml", _line(MODELS, "[[model]]"), 1, "schema"),
    ("release-default-of-an-unknown-tp",
     {"registry/releases/v0.3.2-r9k.1.toml": _sub(R9K1, 'tp = "all"', 'tp = "tp8"')}, "registry",
     "v0.3.2-r9k.1.toml", _line(R9K1, 'tp = "all"'), 1, "unknown-scope"),
]
COMMANDS = {
    "profile": [["validate", "-p", "fault"], ["resolve", "-p", "fault"], ["launch", "--dry-run", "-p", "fault"],
                ["diff", "tp4-default", "fault"]],
    "budget": [["validate", "-p", "fault"], ["launch", "--dry-run", "-p", "fault"]],  # resolve: no budget
    "registry": [["validate"], ["validate", "-p", "tp4-default"]],
}


def _in(tree, argv, env=None):
    return run_main(["--registry", str(tree.registry), "--profiles-dir", str(tree.root / "p")] + argv, env)


def _one_line(tree, files, argv):
    undo = tree.apply(files)
    try:
        before = tree.snapshot()
        code, out, err = _in(tree, argv, {envvars.REPO_ROOT.name: str(REPO)})  # gate tests: in this repository
        assert tree.snapshot() == before, "a file changed"
    finally:
        undo()
    errors = [ln for ln in (out + err).splitlines() if "error[" in ln]
    assert "Traceback" not in out + err and code == 2 and len(errors) == 1, f"exit {code}:\n" + "\n".join(errors)
    return errors[0]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_one_fault_is_one_located_line(tree, case):
    _, files, which, fname, line, col, kind = case
    for argv in COMMANDS[which]:
        first = _one_line(tree, files, argv)
        loc, _, rest = first.partition(": error[")
        assert loc.endswith(f"/{fname}:{line}:{col}") and rest.startswith(f"{kind}]"), (argv, first)


def test_diff_names_the_fault_of_an_invalid_profile(tree):
    first = _one_line(tree, {PF: MODEL_KNOBS}, ["diff", "fault", "stock"])
    assert "fault.toml:3:1: error[unknown-model]" in first


def test_one_line_for_a_value_of_no_member_of_the_union(tree):
    first = _one_line(tree, {PF: 'extends = "tp4-default"\ndescription = "x"\n\n[knobs]\nR9K_ROUTER = ["r9k"]\n'},
                      ["validate", "-p", "fault"])
    assert "knobs.R9K_ROUTER: Input should be a string, an integer, a number or a boolean, not an array" in first


# ------------------------------------------------------------ a profile folder's other files are not read

def test_a_command_about_one_profile_reads_only_its_files(tree, monkeypatch):
    from r9k.registry import loader

    junk = tree.root / "p" / "junk.toml"
    junk.write_text("description = 'junk'\n" + "".join(f'k{i} = "{"x" * 60}"\n' for i in range(30_000)))  # 2 MB
    (tree.root / "p" / "child.toml").write_text('extends = "cpu-smoke"\ndescription = "child"\n')
    read: list[str] = []
    real = loader._read

    def spy(path, *a, **k):
        read.append(Path(path).name)
        return real(path, *a, **k)

    monkeypatch.setattr(loader, "_read", spy)
    try:
        for argv in (["resolve", "-p", "child"], ["validate", "-p", "child"], ["launch", "--dry-run", "-p", "child"],
                     ["diff", "stock", "child"], ["diff", "v0.3.1", "v0.3.2"]):
            read.clear()
            code, out, err = _in(tree, argv)
            assert code == 0, (argv, err[-800:])
            assert "junk.toml" not in read, argv
            if "child" in argv:
                assert {"child.toml", "cpu-smoke.toml", "stock.toml"} <= set(read), (argv, read)
        read.clear()  # a command about every profile still reads and reports it
        code, out, err = _in(tree, ["profiles"])
        assert "junk.toml" in read and code == 2 and "junk.toml:" in err
    finally:
        junk.unlink()
        (tree.root / "p" / "child.toml").unlink()


def test_an_unknown_profile_name_still_gets_its_did_you_mean(tree):
    (tree.root / "p" / "child.toml").write_text('extends = "cpu-smoke"\ndescription = "child"\n')
    try:
        code, out, err = _in(tree, ["resolve", "-p", "chlid"])
    finally:
        (tree.root / "p" / "child.toml").unlink()
    assert code == 2 and "child" in err, err


# ------------------------------------------------------------ the plugin and a misspelt R9K_* variable

@pytest.mark.parametrize("name,meant", [("R9K_PROFLE", "R9K_PROFILE"), ("R9K_MANIFST", "R9K_MANIFEST"),
                                        ("R9K_router", "R9K_ROUTER")])
def test_the_plugin_names_the_variable_a_misspelt_one_meant(monkeypatch, tmp_path, caplog, name, meant):
    from r9k.plugin import report
    from r9k import plugin

    monkeypatch.setenv(name, "tp4-default")
    report.reset_for_tests()
    try:
        with caplog.at_level("WARNING", logger="vllm.r9k"):
            plugin.register()
            plugin.register()  # a second call in the process: no second warning
    finally:
        report.reset_for_tests()
    said = [r.getMessage() for r in caplog.records if name in r.getMessage()]
    assert report.active_set() is None
    assert len(said) == 1 and f"did you mean {meant}?" in said[0], said
