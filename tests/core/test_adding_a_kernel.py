"""docs/adding-a-kernel.md followed from scratch in a copy of the tree: a new served kernel takes four places,
none of them another kernel's, the registry takes it, the op table finds it, and no other gate goes stale."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from r9k.registry import ledger, load_registry
from r9k.registry.validate import validate

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "adding-a-kernel.md"
BLOCK = re.compile(r"<!-- (new|append): (\S+) -->\n```\w*\n(.*?)```", re.S)
#: the four places the page promises (a folder counts once)
PLACES = {"kernels/foo/", "registry/variants/foo.toml", "registry/adapters.toml", "profiles/foo.toml"}


def doc_steps() -> list[tuple[str, str, str]]:
    return BLOCK.findall(DOC.read_text(encoding="utf-8"))


def _copy_tree(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def _gate_hashes(root: Path) -> dict[str, str]:
    reg = load_registry(root / "registry", [root / "profiles"])
    return {vid: ledger.source_hash(reg, v)[0] for vid, v in reg.variants.items() if ledger.declared_tests(v)}


def _place(rel: str) -> str:
    return "kernels/foo/" if rel.startswith("kernels/foo/") else rel


@pytest.fixture(scope="module")
def followed(tmp_path_factory):
    """(copy of the tree before, the same after following the page, the files the page wrote)."""
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
    return before, after, written


def test_the_page_takes_four_places_none_another_kernels(followed):
    before, after, written = followed
    assert {_place(r) for r in written} == PLACES
    changed = sorted(p.relative_to(after).as_posix() for p in after.rglob("*") if p.is_file()
                     and (not (before / p.relative_to(after)).is_file()
                          or (before / p.relative_to(after)).read_bytes() != p.read_bytes()))
    assert {_place(r) for r in changed} == PLACES, changed


def test_the_registry_takes_the_new_variant_and_its_profile(followed):
    _, after, _ = followed
    reg = load_registry(after / "registry", [after / "profiles"])
    assert reg.variants["foo_fused"].implementation.op == "foo"
    report = validate(reg, profile="foo", env={})
    assert not report.errors, [d.format() for d in report.errors]


def test_no_other_gate_goes_stale(followed):
    before, after, _ = followed
    old, new = _gate_hashes(before), _gate_hashes(after)
    assert "foo_fused" in new and "foo_fused" not in old
    assert {v: new[v] for v in old} == old


def test_the_op_table_finds_the_new_op_and_it_runs(followed):
    """In a fresh process whose ``r9k.kernels`` is the copy's folder: the op registers (signatures checked)
    and the fused path equals the stock one under Triton's interpreter."""
    _, after, _ = followed
    code = (
        "import json, r9k.kernels as k\n"
        f"k.__path__[:] = [{str(after / 'kernels')!r}]\n"
        "from r9k.kernels import ops\n"
        "import torch\n"
        "t = ops.load_all(); op = t['foo']\n"
        "x = torch.randn(3000)\n"
        "print(json.dumps({'ops': sorted(t), 'variant': op.variant,"
        " 'equal': bool(torch.equal(op.fused(x), op.stock(x)))}))\n")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["variant"] == "foo_fused" and res["equal"]
    assert "foo" in res["ops"] and "router_gemm" in res["ops"]
