"""What the wheel leaves out (setup.py DEV_ONLY) is never needed by what it ships."""
from __future__ import annotations

import ast
import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("registry", "plugin", "r9kctl", "kernels", "profiles")


def _setup_constant(name: str) -> tuple[str, ...]:
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == name for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError(f"setup.py has no {name}")


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    return ".".join(["r9k", *rel.parts])


def test_left_out_modules_are_not_imported_by_shipped_ones():
    pats, whole = _setup_constant("DEV_ONLY"), set(_setup_constant("DEV_ONLY_MODULES"))
    files = [p for f in FOLDERS for p in (ROOT / f).rglob("*.py") if "__pycache__" not in p.parts]
    left_out = {_module(p) for p in files if any(fnmatch.fnmatchcase(p.stem, x) for x in pats) or _module(p) in whole}
    assert whole <= {_module(p) for p in files}, "a DEV_ONLY_MODULES entry names no module"
    assert any(m.endswith("bench_load") for m in left_out)  # the filter matches what it is meant to
    assert "r9k.kernels.decode_step.bench" not in left_out  # r9kctl bench runs it
    cli = ast.parse((ROOT / "r9kctl" / "cli.py").read_text(encoding="utf-8"))
    commands = next(ast.literal_eval(n.value) for n in cli.body if isinstance(n, ast.Assign)
                    and any(getattr(t, "id", "") == "COMMANDS" for t in n.targets))
    assert not {f"r9k.r9kctl.cmd_{c}" for c in commands} & left_out  # imported by name, not by an import
    shipped = [p for p in files if _module(p) not in left_out and not p.stem.startswith("test_")]
    bad = []
    for p in shipped:
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            bad += [f"{p.relative_to(ROOT)} imports {n}" for n in names if n in left_out]
    assert not bad, bad


def test_requires_python_matches_what_the_code_uses():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert meta["requires-python"] == ">=3.11"  # tomllib without a fallback; vLLM 0.32 needs 3.11
    assert not any(d.startswith("tomli") for d in meta["dependencies"])
