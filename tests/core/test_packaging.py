"""The wheel ships every mapped folder whole: benchmarks live in ``bench/``, apart from the product packages,
so no build-time filter is needed (and none exists)."""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("registry", "plugin", "kernels", "profiles")  # r9kctl runs the benchmarks (r9kctl bench, gate --pairs)


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append(node.module)
    return out


def test_setup_maps_every_package_folder_and_filters_nothing():
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    folders = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                   and any(getattr(t, "id", "") == "FOLDERS" for t in n.targets))
    assert folders == {f"r9k.{d.name}": d.name for d in ROOT.iterdir() if (d / "__init__.py").is_file() and d.name != "r9k"}
    assert not any(isinstance(n, ast.ClassDef) for n in tree.body), "a build_py override filters the wheel"


def test_benchmarks_live_in_bench_and_the_product_does_not_import_them():
    stray = [p.relative_to(ROOT).as_posix() for f in PRODUCT + ("r9kctl",) for p in (ROOT / f).rglob("bench*.py")]
    assert not stray, f"benchmarks outside bench/: {stray}"
    bad = [f"{p.relative_to(ROOT)} imports {m}" for f in PRODUCT for p in (ROOT / f).rglob("*.py")
           if "__pycache__" not in p.parts for m in _imports(p) if m.split(".")[:2] == ["r9k", "bench"]]
    assert not bad, bad


def test_requires_python_matches_what_the_code_uses():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert meta["requires-python"] == ">=3.11"  # tomllib without a fallback; vLLM 0.32 needs 3.11
    assert not any(d.startswith("tomli") for d in meta["dependencies"])
