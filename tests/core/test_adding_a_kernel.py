"""docs/adding-a-kernel.md followed from scratch in a copy of the tree: a new served kernel takes the ten files
the page names (four shared with every kernel: its semantics section, its adapter row, the regenerated profile
schema, its gate record), the registry takes it, the op table finds it, its gate runs and passes, and no other
gate goes stale."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from r9k.registry import envvars, ledger, load_registry
from r9k.registry.validate import validate

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "adding-a-kernel.md"
BLOCK = re.compile(r"<!-- (new|append): (\S+) -->\n```\w*\n(.*?)```", re.S)
#: the ten files the page promises: six of the kernel's own, four shared with every kernel
OWN = {"kernels/foo/__init__.py", "kernels/foo/reference.py", "kernels/foo/triton_kernel.py", "kernels/foo/test_foo.py",
       "registry/variants/foo.toml", "profiles/foo.toml"}
SHARED = {"docs/semantics.md", "registry/adapters.toml", "profiles/profile.schema.json", "registry/gates/ledger.jsonl"}


def doc_steps() -> list[tuple[str, str, str]]:
    return BLOCK.findall(DOC.read_text(encoding="utf-8"))


def _copy_tree(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if src.is_symlink():  # <folder> -> r9k/<folder>: the copy's paths are the checkout's
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(src), dest / rel)
        elif src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def _gate_hashes(root: Path) -> dict[str, str]:
    reg = load_registry(root / "registry", [root / "profiles"])
    return {vid: ledger.source_hash(reg, v)[0] for vid, v in reg.variants.items() if ledger.declared_tests(v)}


def _r9kctl(tree: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """r9kctl of the copy (run from its root, the copy imports itself; the copy's ledger, as in a checkout: the
    copy has no .git, and an installed copy's ledger is the user's)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", envvars.LEDGER.name: str(tree / "registry" / "gates" / "ledger.jsonl")}
    return subprocess.run([sys.executable, "-m", "r9k.r9kctl.cli", *args], cwd=tree, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="module")
def followed(tmp_path_factory):
    """(copy of the tree before, the same after following the page, the files the page wrote, the gate run)."""
    if not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout (git ls-files)")
    base = tmp_path_factory.mktemp("tree")
    before = _copy_tree(base / "before")
    after = _copy_tree(base / "after")
    written = []
    for how, rel, text in doc_steps():
        p = after / rel
        assert (how == "new") != p.exists(), f"the page says {how} {rel}"
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "a" if how == "append" else "w", encoding="utf-8") as f:
            f.write(text)
        written.append(rel)
    schema = _r9kctl(after, "schema", "profile", "--out", "profiles/profile.schema.json")
    assert schema.returncode == 0, schema.stdout + schema.stderr
    gate = _r9kctl(after, "gate", "foo_fused", timeout=900)
    return before, after, written, gate


def _changed(before: Path, after: Path) -> set[str]:
    """The files that differ, each named as the page names it: through its top-level link (``kernels/foo/...``
    for ``r9k/kernels/foo/...``)."""
    out = set()
    for d, dirs, files in os.walk(after):  # links are not followed: each file once, under r9k/
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for name in files:
            p = Path(d) / name
            rel = p.relative_to(after)
            if p.is_symlink() or ((before / rel).is_file() and (before / rel).read_bytes() == p.read_bytes()):
                continue
            linked = rel.parts[0] == "r9k" and len(rel.parts) > 2 and (after / rel.parts[1]).is_symlink()
            out.add(Path(*rel.parts[1:]).as_posix() if linked else rel.as_posix())
    return out


_WORDS = {"Ten": 10, "Eleven": 11, "Twelve": 12, "Nine": 9, "Eight": 8, "four": 4, "five": 5, "three": 3, "six": 6}


def test_the_page_names_the_files_this_test_checks():
    """The page's opening lists exactly OWN | SHARED, and its counts are theirs (no fixture: quick)."""
    intro = DOC.read_text(encoding="utf-8").split("\n\n")[1]
    head = intro.split("An eleventh")[0]
    named, folder = set(), ""
    for tok in re.findall(r"`([^`]+)`", head):
        if " " in tok:
            continue  # a command (`r9kctl schema profile --out`)
        if tok.endswith("/"):
            folder = tok
        elif "/" not in tok and folder:
            named.add(folder + tok)
        else:
            named.add(tok)
    assert named == OWN | SHARED, sorted(named ^ (OWN | SHARED))
    m = re.match(r"\*\*(\w+) files, (\w+) of them shared with every kernel\.\*\*", intro)
    assert m and (_WORDS[m.group(1)], _WORDS[m.group(2)]) == (len(OWN | SHARED), len(SHARED)), intro[:80]


def test_the_page_takes_the_ten_files_it_names(followed):
    before, after, written, _ = followed
    assert set(written) == OWN | {"docs/semantics.md", "registry/adapters.toml"}
    assert _changed(before, after) == OWN | SHARED
    assert "R9K_FOO" in (after / "profiles" / "profile.schema.json").read_text(encoding="utf-8")


def test_its_gate_runs_and_passes(followed):
    _, after, _, gate = followed
    assert gate.returncode == 0, gate.stdout[-3000:] + gate.stderr[-3000:]
    recs = [json.loads(ln) for ln in (after / "registry" / "gates" / "ledger.jsonl").read_text().splitlines() if ln]
    foo = [r for r in recs if r.get("variant") == "foo_fused"]
    assert len(foo) == 1, foo
    out = foo[0]["outcomes"]
    interp = {t: o for t, o in out.items() if "test_foo_gate_interpreter[" in t}
    assert len(interp) == 3 and set(interp.values()) == {"passed"}, out
    gpu = out["kernels/foo/test_foo.py::test_foo_gate_gpu"]
    # without a GPU the gpu-marked test is reported needs-gpu and the record is partial; with one, both run
    assert (gpu, foo[0]["result"]) in {("needs-gpu", "partial"), ("passed", "pass")}, foo[0]


def test_the_registry_takes_the_new_variant_and_its_profile(followed):
    _, after, _, _ = followed
    reg = load_registry(after / "registry", [after / "profiles"])
    assert reg.variants["foo_fused"].implementation.op == "foo"
    report = validate(reg, profile="foo", env={})
    assert not report.errors, [d.format() for d in report.errors]


def test_no_other_gate_goes_stale(followed):
    before, after, _, _ = followed
    old, new = _gate_hashes(before), _gate_hashes(after)
    assert "foo_fused" in new and "foo_fused" not in old
    assert {v: new[v] for v in old} == old


def test_the_op_table_finds_the_new_op_and_it_runs(followed):
    """In a fresh process run from the copy (which imports itself): the op registers (signatures checked) and
    the fused path equals the stock one under Triton's interpreter."""
    _, after, _, _ = followed
    code = (
        "import json, torch\n"
        "from r9k.kernels import ops\n"
        "t = ops.load_all(); op = t['foo']\n"
        "x = torch.randn(3000)\n"
        "print(json.dumps({'ops': sorted(t), 'variant': op.variant,"
        " 'equal': bool(torch.equal(op.fused(x), op.stock(x)))}))\n")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", code], cwd=after, capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["variant"] == "foo_fused" and res["equal"]
    assert "foo" in res["ops"] and "router_gemm" in res["ops"]
