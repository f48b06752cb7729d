"""Freshness over everything a gate depends on, and imported results that must prove where they came from.

A temporary repository: a copy of the shipped registry plus test-only variants whose kernels share a
helper package (``evlib``), so an edit of one shared file must make exactly the gates that import it stale.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from r9k.r9kctl import cli
from r9k.registry import ledger as L
from r9k.registry import envvars, load_registry
from r9k.registry import provenance as P

from .fake_repo import SHIPPED, make_repo, variant

VARIANTS = "\n".join([
    variant("evdep_add", "Test-only fused add (uses the shared helper).",
            ["kernels/evadd/test_evadd.py::test_add", "kernels/evadd/test_evadd.py::test_add_gpu"],
            # The benchmark lives in bench/ (not under the kernel's folder): declared, so it is hashed.
            module="r9k.kernels.evadd", sources=["kernels/evadd/", "bench/kernels/bench_evadd.py"]),
    variant("evdep_neg", "Test-only fused negation (does not use the shared helper).",
            ["kernels/evneg/test_evneg.py::test_neg"], sources=["kernels/evneg/"]),
])

FILES = {
    # The root conftest puts the repository on sys.path (the real one maps kernels under r9k).
    "conftest.py": textwrap.dedent("""\
        import pathlib, sys

        import pytest

        sys.path.insert(0, str(pathlib.Path(__file__).parent))


        def pytest_collection_modifyitems(config, items):
            for item in items:
                if "gpu" in item.keywords:
                    item.add_marker(pytest.mark.skip(reason="needs a GPU"))
        """),
    "kernels/__init__.py": "",
    "evlib/__init__.py": "",
    "evlib/common.py": "def combine(x, y):\n    return x + y\n",
    "kernels/evadd/__init__.py": "",
    "kernels/evadd/impl.py": "from evlib.common import combine\n\n\ndef add(xs, ys):\n"
                             "    return [combine(x, y) for x, y in zip(xs, ys)]\n",
    "bench/kernels/bench_evadd.py": "import evlib.benchtools\n\nif __name__ == '__main__':\n    pass\n",
    "evlib/benchtools.py": "X = 1\n",
    "kernels/evadd/test_evadd.py": textwrap.dedent("""\
        import pytest

        from kernels.evadd import impl


        @pytest.mark.parametrize("n", [1, 2, 3])
        def test_add(n):
            assert impl.add(list(range(n)), [10] * n) == [i + 10 for i in range(n)]


        @pytest.mark.gpu
        def test_add_gpu():
            assert impl.add([1], [2]) == [3]
        """),
    "kernels/evneg/__init__.py": "",
    "kernels/evneg/impl.py": "def neg(xs):\n    return [-x for x in xs]\n",
    "kernels/evneg/test_evneg.py": "from kernels.evneg import impl\n\n\ndef test_neg():\n"
                                   "    assert impl.neg([1, -2]) == [-1, 2]\n",
}

LOCAL_TC = {"torch": "2.13.0+cpu", "triton": "3.9.0", "vllm": "0.32.0", "python": "3.11.9", "device": "cpu"}
GPU_TC = {"torch": "2.9.0+cu128", "triton": "3.6.0", "vllm": None, "python": "3.12.3", "device": "h200"}


@pytest.fixture
def repo(tmp_path, monkeypatch):
    root = make_repo(tmp_path, monkeypatch, VARIANTS, FILES, "zz-evdep-test.toml")
    # The toolchain of "this machine" is fixed, so a test can change it.
    monkeypatch.setattr(P, "toolchain", lambda use_torch=False: dict(LOCAL_TC))
    return root


def _states():
    return L.gate_states(load_registry())


def test_dependencies_are_the_import_closure(repo):
    reg = load_registry()
    deps, missing = L.dependencies(reg, reg.variants["evdep_add"])
    assert missing == []
    # The helper reached by import, the packages on the way, the conftests pytest loads; the benchmark
    # (a program) is hashed as declared, but what only it imports is not a dependency.
    assert {"evlib/common.py", "evlib/__init__.py", "conftest.py", "kernels/__init__.py",
            "kernels/evadd/__init__.py", "kernels/evadd/impl.py", "kernels/evadd/test_evadd.py",
            "bench/kernels/bench_evadd.py"} == set(deps)
    assert "evlib/common.py" not in L.dependencies(reg, reg.variants["evdep_neg"])[0]


def test_edits_stale_exactly_the_dependent_gates(repo):
    assert cli.main(["gate", "evdep_add", "evdep_neg"]) == 0
    st = _states()
    assert st["evdep_neg"].state == "fresh"
    assert st["evdep_add"].state == "missing" and st["evdep_add"].needs_gpu  # its GPU test never ran
    assert st["evdep_add"].tests["kernels/evadd/test_evadd.py::test_add"] == "passed"
    rec = json.loads((repo / "registry/gates/ledger.jsonl").read_text().splitlines()[0])
    assert rec["toolchain"] == LOCAL_TC and "evlib/common.py" in rec["deps"]

    (repo / "evlib/common.py").write_text(FILES["evlib/common.py"] + "# edited\n")
    st = _states()
    assert st["evdep_add"].state == "stale" and st["evdep_neg"].state == "fresh"
    assert st["evdep_add"].changes == ["evlib/common.py changed"]
    assert "evlib/common.py changed" in st["evdep_add"].detail

    (repo / "evlib/benchtools.py").write_text("X = 2\n")  # only the benchmark imports it
    assert _states()["evdep_neg"].state == "fresh"

    (repo / "conftest.py").write_text(FILES["conftest.py"] + "# edited\n")  # every gate loads it
    st = _states()
    assert st["evdep_neg"].state == "stale" and st["evdep_neg"].changes == ["conftest.py changed"]


def test_toolchain_change_stales_gates_and_says_what(repo, monkeypatch):
    assert cli.main(["gate", "evdep_neg"]) == 0
    assert _states()["evdep_neg"].state == "fresh"
    monkeypatch.setattr(P, "toolchain", lambda use_torch=False: dict(LOCAL_TC, triton="3.10.0"))
    st = _states()["evdep_neg"]
    assert st.state == "stale" and st.changes == ["triton 3.9.0 -> 3.10.0 on cpu-triton-interpret"]


def _gpu_run(repo, tmp_path, xml_cases=None, tc=GPU_TC):
    """What the GPU script produces: a JUnit XML of the kernel tests and provenance.json beside it."""
    out = tmp_path / "out"
    out.mkdir(parents=True, exist_ok=True)
    xml = out / "gates.xml"
    if xml_cases is None:
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "junit_family=xunit1",
                        f"--junitxml={xml}", "kernels"], cwd=repo, capture_output=True, timeout=120)
    else:
        xml.write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest">' + "".join(
            f'<testcase classname="{f[:-3].replace("/", ".")}" name="{n}" file="{f}">{body}</testcase>'
            for f, n, body in xml_cases) + "</testsuite></testsuites>")
    prov = P.build(repo, use_torch=False)
    prov["toolchain"], prov["platform"] = dict(tc), "cuda-" + tc["device"]
    (out / "provenance.json").write_text(json.dumps(prov))
    return xml


ADD = "kernels/evadd/test_evadd.py"


def _all_pass():
    return [(ADD, f"test_add[{n}]", "") for n in (1, 2, 3)] + [(ADD, "test_add_gpu", "")]


def test_import_with_provenance_records_what_was_tested(repo, tmp_path, capsys):
    xml = _gpu_run(repo, tmp_path, _all_pass())
    assert cli.main(["gate", "--import-junit", str(xml)]) == 0
    recs = [json.loads(x) for x in (repo / "registry/gates/ledger.jsonl").read_text().splitlines()]
    (rec,) = recs
    assert rec["variant"] == "evdep_add" and rec["platform"] == "cuda-h200" and rec["result"] == "pass"
    assert rec["toolchain"] == GPU_TC and rec["deps"]["evlib/common.py"] == P.file_sha256(repo / "evlib/common.py")
    st = _states()["evdep_add"]
    assert st.state == "fresh" and st.platforms == ["cuda-h200"]
    # A later H200 run with another Triton makes this record stale (the platform's toolchain moved on).
    xml2 = _gpu_run(repo, tmp_path / "b", [("kernels/evneg/test_evneg.py", "test_neg", "")],
                    tc=dict(GPU_TC, triton="3.7.1"))
    assert cli.main(["gate", "--import-junit", str(xml2)]) == 0
    st = _states()["evdep_add"]
    assert st.state == "stale" and st.changes == ["triton 3.6.0 -> 3.7.1 on cuda-h200"]


def test_real_junit_every_parametrization_counts(repo, tmp_path):
    # A real pytest run here: test_add passes on all 3 parametrizations, test_add_gpu is skipped (no GPU).
    xml = _gpu_run(repo, tmp_path)
    assert cli.main(["gate", "--import-junit", str(xml)]) == 0
    rec = json.loads((repo / "registry/gates/ledger.jsonl").read_text().splitlines()[0])
    assert rec["result"] == "partial" and rec["outcomes"][f"{ADD}::test_add_gpu"] == "needs-gpu"
    st = _states()["evdep_add"]
    assert st.tests[f"{ADD}::test_add"] == "passed" and st.tests[f"{ADD}::test_add_gpu"] != "passed"
    assert st.state != "fresh"


def test_one_missing_or_skipped_parametrization_is_not_a_pass(repo, tmp_path):
    cases = [(ADD, "test_add[1]", ""), (ADD, "test_add[2]", '<skipped message="later"/>'), (ADD, "test_add_gpu", "")]
    assert cli.main(["gate", "--import-junit", str(_gpu_run(repo, tmp_path, cases))]) == 0
    rec = json.loads((repo / "registry/gates/ledger.jsonl").read_text().splitlines()[0])
    assert rec["result"] == "partial"
    assert rec["outcomes"][f"{ADD}::test_add[2]"] == "skipped" and rec["outcomes"][f"{ADD}::test_add[3]"] == "not-run"
    assert _states()["evdep_add"].tests[f"{ADD}::test_add"] != "passed"


@pytest.mark.parametrize("case, kind, where", [
    ("no-provenance", "provenance", "provenance.json does not exist"),
    ("unknown-function", "unknown-test", "defines no test test_made_up"),
    ("unknown-parametrization", "unknown-test", "test_add[99]: pytest collects no such item here"),
    ("unknown-file", "unknown-test", "no test file kernels/evadd/test_gone.py"),
    ("foreign-test-file", "foreign-tree", "kernels/evadd/test_evadd.py differs from this tree"),
    ("foreign-dependency", "foreign-tree", "gate evdep_add: evlib/common.py differs from this tree"),
    ("platform", "platform", "the run was on cuda-h200, not cuda-b200"),
])
def test_bad_imports_are_refused_with_one_line(repo, tmp_path, capsys, case, kind, where):
    cases = _all_pass()
    if case == "unknown-function":
        cases = cases + [(ADD, "test_made_up", "")]
    elif case == "unknown-parametrization":
        cases = cases + [(ADD, "test_add[99]", "")]
    elif case == "unknown-file":
        cases = [("kernels/evadd/test_gone.py", "test_x", "")]
    xml = _gpu_run(repo, tmp_path, cases)
    args = ["gate", "--import-junit", str(xml)]
    if case == "no-provenance":
        (xml.parent / "provenance.json").unlink()
    elif case == "foreign-test-file":
        (repo / ADD).write_text((repo / ADD).read_text() + "# edited after the run\n")
    elif case == "foreign-dependency":
        (repo / "evlib/common.py").write_text("def combine(x, y):\n    return y + x\n")
    elif case == "platform":
        args += ["--platform", "cuda-b200"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"error[{kind}]" in err[0] and where in err[0], err
    assert err[0].split(":", 1)[0] in (str(xml), str(xml.parent / "provenance.json"))
    assert not (repo / "registry/gates/ledger.jsonl").exists()  # the ledger is unchanged


def test_provenance_file_errors(repo, tmp_path, capsys):
    xml = _gpu_run(repo, tmp_path, _all_pass())
    prov = xml.parent / "provenance.json"
    for text, msg in [("{", "not JSON"), ('{"r9k_provenance": 1, "files": {}}', "no file hashes"),
                      ("[]", "not a provenance file")]:
        prov.write_text(text)
        assert cli.main(["gate", "--import-junit", str(xml)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"{prov}: error[provenance]: {msg}") and "\n" not in err
    assert not (repo / "registry/gates/ledger.jsonl").exists()


def test_provenance_script_runs_without_the_package(repo, tmp_path):
    """The GPU machine runs it as a file, with no pydantic: it must import nothing of the package."""
    out = tmp_path / "p.json"
    script = SHIPPED / "provenance.py"
    r = subprocess.run([sys.executable, "-S", "-I", str(script), "--out", str(out), "--root", str(repo), "--no-torch"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    d = P.read(out)
    assert d["files"]["evlib/common.py"] == P.file_sha256(repo / "evlib/common.py")
    assert set(d["toolchain"]) == set(P.TOOLCHAIN_KEYS)


def test_known_bad_ranges_make_validate_warn(repo, tmp_path, monkeypatch):
    from r9k.registry.validate import validate

    toml = repo / "registry" / "variants" / "zz-evdep-test.toml"
    toml.write_text(toml.read_text().replace('tests = ["kernels/evneg/test_evneg.py::test_neg"]', textwrap.dedent('''\
        tests = ["kernels/evneg/test_evneg.py::test_neg"]
        [[variant.gate.known_bad]]
        package = "triton"
        versions = ">=3.4,<3.7.1"
        reason = "precision bug on Hopper"
        ''')))
    prof = tmp_path / "profiles"
    prof.mkdir()
    (prof / "evneg.toml").write_text('description = "x"\nextends = "stock"\ntp = 1\n[knobs]\nR9K_EVDEP_NEG = "1"\n')
    monkeypatch.setenv(envvars.PROFILES_DIR.name, str(prof))

    def warnings():
        return [d for d in validate(load_registry(), profile="evneg").warnings if d.code == "known-bad"]

    assert warnings() == []  # triton 3.9.0 here
    xml = _gpu_run(repo, tmp_path, [("kernels/evneg/test_evneg.py", "test_neg", "")])  # the H200: triton 3.6.0
    assert cli.main(["gate", "--import-junit", str(xml)]) == 0
    (w,) = warnings()
    assert "triton 3.6.0 (gate passed on cuda-h200) is in the known-bad range >=3.4,<3.7.1" in w.message
    assert w.file and w.file.endswith("zz-evdep-test.toml") and w.line
    monkeypatch.setattr(P, "toolchain", lambda use_torch=False: dict(LOCAL_TC, triton="3.5.0"))
    assert len(warnings()) == 2
    toml.write_text(toml.read_text().replace('">=3.4,<3.7.1"', '"~3.4"'))
    with pytest.raises(Exception, match="cannot read version clause"):
        load_registry()


def test_a_cpu_test_on_a_gpu_host_is_a_cpu_record(repo, tmp_path, capsys):
    """A record's platform is where its code ran: on the H200, a test whose code made no CUDA allocation (a gloo
    CPU group, a pure-Python check) is recorded on cpu, not cuda-h200 (the GPU run stamps each case with
    r9k_ran_on); the cases that used the GPU stay on cuda-h200."""
    on = lambda where: f'<properties><property name="{P.STAMP_RAN_ON}" value="{where}"/></properties>'  # noqa: E731
    cases = [(ADD, f"test_add[{n}]", on("cpu")) for n in (1, 2, 3)] + [(ADD, "test_add_gpu", on("gpu"))]
    xml = _gpu_run(repo, tmp_path, cases)
    assert cli.main(["gate", "--import-junit", str(xml)]) == 0
    recs = {r["platform"]: r for r in (json.loads(x) for x in
                                       (repo / "registry/gates/ledger.jsonl").read_text().splitlines())}
    assert set(recs) == {"cuda-h200", "cpu"}
    assert set(recs["cuda-h200"]["outcomes"]) == {f"{ADD}::test_add_gpu"}
    assert set(recs["cpu"]["outcomes"]) == {f"{ADD}::test_add[{n}]" for n in (1, 2, 3)}
    assert recs["cpu"]["toolchain"] == dict(GPU_TC, device="cpu")
    st = _states()["evdep_add"]
    assert st.per_platform["cuda-h200"] == "missing"  # test_add's code never ran on the GPU there


def test_split_by_where_it_ran():
    from r9k.registry import ledger as L

    outs = {"a": "passed", "b": "passed", "c": "not-found"}
    assert L.split_by_where_it_ran(outs, {"a": "gpu", "b": "cpu"}, "cuda-h200", GPU_TC) == [
        ("cuda-h200", {"a": "passed", "c": "not-found"}, GPU_TC), ("cpu", {"b": "passed"}, dict(GPU_TC, device="cpu"))]
    assert L.split_by_where_it_ran(outs, {"a": "cpu", "b": "cpu"}, "cpu-triton-interpret", LOCAL_TC) == [
        ("cpu-triton-interpret", outs, LOCAL_TC)]  # on a CPU host everything is a CPU record already
