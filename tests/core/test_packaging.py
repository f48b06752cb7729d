"""The wheel ships every package folder whole: benchmarks live in ``bench/``, apart from the product packages,
so no build-time filter is needed (and none exists)."""
from __future__ import annotations

import ast
import os
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("registry", "plugin", "kernels", "profiles", "r9kctl")


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append(node.module)
    return out


def test_the_top_level_links_every_package_folder_and_the_build_finds_them_all():
    """The package folders are r9k/'s (no link inside r9k/); the top level has one link to each
    (``registry -> r9k/registry``) and no other package; pyproject's package find (the one declaration, no
    setup.py) ships every package below them, none filtered."""
    folders = {d.name for d in (ROOT / "r9k").iterdir() if (d / "__init__.py").is_file()}
    assert folders >= set(PRODUCT) and not any(p.is_symlink() for p in (ROOT / "r9k").rglob("*"))
    links = {p.name: os.readlink(p) for p in ROOT.iterdir() if p.is_symlink()}
    assert links == {f: f"r9k/{f}" for f in folders}
    assert not [d for d in ROOT.iterdir() if (d / "__init__.py").is_file() and not d.is_symlink() and d.name != "r9k"]
    assert not (ROOT / "setup.py").exists()
    find = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]["find"]
    from setuptools import find_packages

    shipped = set(find_packages(where=str(ROOT), include=find["include"]))
    want = {"r9k"} | {".".join(("r9k", *p.parent.relative_to(ROOT).parts)) for f in folders
                      for p in (ROOT / f).rglob("__init__.py") if "__pycache__" not in p.parts}
    assert shipped == want


def test_benchmarks_live_in_bench_and_the_product_does_not_import_them():
    stray = [p.relative_to(ROOT).as_posix() for f in PRODUCT for p in (ROOT / f).rglob("bench*.py")]
    assert not stray, f"benchmarks outside bench/: {stray}"
    bad = [f"{p.relative_to(ROOT)} imports {m}" for f in PRODUCT for p in (ROOT / f).rglob("*.py")
           if "__pycache__" not in p.parts for m in _imports(p) if m.split(".")[:2] == ["r9k", "bench"]]
    assert not bad, bad


def test_requires_python_matches_what_the_code_uses():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert meta["requires-python"] == ">=3.11"  # tomllib without a fallback; vLLM 0.32 needs 3.11
    assert not any(d.startswith("tomli") for d in meta["dependencies"])
