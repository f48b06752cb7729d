"""scripts/imports.py, the import codemod: each rule on a small package of two folders, idempotent."""
from __future__ import annotations

import importlib.util
import io
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def codemod():
    spec = importlib.util.spec_from_file_location("imports_codemod", ROOT / "scripts" / "imports.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "setup.py").write_text('FOLDERS = {"r9k.alpha": "alpha", "r9k.beta": "beta"}\n')
    for rel, text in {"alpha/__init__.py": "", "beta/__init__.py": "", **files}.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return tmp_path


A = '''\
"""Doc."""
from __future__ import annotations

import os

from r9k.beta import b


def f():
    from r9k.beta.c import thing

    return thing(os.sep, b)


def g():
    from r9k.beta.heavy import h
    return h


def k():
    from r9k.beta import cyc
    return cyc


def t():
    try:
        from r9k.beta.c import thing
    except ImportError:
        return None
    return thing
'''

FILES = {
    "alpha/a.py": A,
    "alpha/lazy.py": "def f():\n    from r9k.beta.c import thing\n    return thing\n",
    "beta/b.py": "X = 1\n",
    "beta/c.py": "def thing(*a):\n    return a\n",
    "beta/heavy.py": "import torch\n\nh = torch\n",
    "beta/cyc.py": "from r9k.alpha import a\n",
    "beta/deep/__init__.py": "",
    "beta/deep/d.py": "import r9k.alpha.a as a_mod\nfrom r9k.beta import c\n",
    "alpha/run.py": "from r9k.beta import b\n",
}


def test_each_rule_and_idempotence(tmp_path, codemod, monkeypatch):
    root = _tree(tmp_path, FILES)
    monkeypatch.setattr(codemod, "LAZY", {"alpha/lazy.py": "start-up"})
    monkeypatch.setattr(codemod, "SCRIPTS", {"alpha/run.py": "run by path"})
    assert codemod.run(root, apply=False, out=io.StringIO()) == 1  # --check: something to do
    assert (root / "alpha/a.py").read_text() == A  # and nothing written
    assert codemod.run(root, apply=True, out=io.StringIO()) == 0
    a = (root / "alpha/a.py").read_text()
    head, _, body = a.partition("def f():")
    assert "from ..beta import b\nfrom ..beta.c import thing\n" in head  # relative, and moved up
    assert body.startswith("\n    return thing(os.sep, b)")  # no import left, no blank line left behind
    assert "def g():\n    from ..beta.heavy import h\n" in a  # heavy (torch at its top): stays, relative
    assert "def k():\n    from ..beta import cyc\n" in a  # moving it up would close a cycle
    assert "    try:\n        from ..beta.c import thing\n" in a  # a guarded import stays
    assert (root / "alpha/lazy.py").read_text() == FILES["alpha/lazy.py"].replace("r9k.beta.c", "..beta.c")
    assert (root / "alpha/run.py").read_text() == FILES["alpha/run.py"]  # run by path: absolute
    assert (root / "beta/deep/d.py").read_text() == "from ...alpha import a as a_mod\nfrom .. import c\n"
    snapshot = {p: p.read_text() for p in root.rglob("*.py")}
    out = io.StringIO()
    assert codemod.run(root, apply=False, out=out) == 0, out.getvalue()  # idempotent
    assert codemod.run(root, apply=True, out=io.StringIO()) == 0
    assert snapshot == {p: p.read_text() for p in root.rglob("*.py")}


def test_two_functions_binding_one_name_differently_both_stay(tmp_path, codemod):
    root = _tree(tmp_path, {
        "alpha/a.py": "def f():\n    from r9k.beta.c import thing\n    return thing\n\n\n"
                      "def g():\n    from r9k.beta.b import X as thing\n    return thing\n",
        "beta/b.py": "X = 1\n", "beta/c.py": "def thing():\n    pass\n"})
    codemod.run(root, apply=True, out=io.StringIO())
    text = (root / "alpha/a.py").read_text()
    assert "    from ..beta.c import thing\n" in text and "    from ..beta.b import X as thing\n" in text


def test_the_tree_is_as_the_codemod_leaves_it(codemod):
    """Every project import relative and at the top, except where the codemod's rules keep it (its LAZY
    start-up files with their reasons, heavy modules, cycles): `python scripts/imports.py --apply` fixes it."""
    out = io.StringIO()
    assert codemod.run(ROOT, apply=False, out=out) == 0, out.getvalue()
