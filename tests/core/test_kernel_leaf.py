"""Kernels are a leaf with no central list: the op table is discovered from the folders of ``kernels/``, a
new kernel touches no file in another kernel's gate closure, nothing under ``kernels/`` imports the rest of
the project, and registration refuses a fused implementation that cannot take the stock one's calls."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from r9k.kernels import ops

ROOT = Path(__file__).resolve().parents[2]


def _fake(name="fake_op", stock=lambda x, out=None: x, fused=lambda x, out=None, num_warps=4: x):
    return ops.KernelOp(name=name, variant="fake_variant", stock=stock, fused=fused, fused_values=frozenset({"1"}))


def test_the_op_table_is_every_kernel_folder():
    folders = {p.parent.name for p in (ROOT / "kernels").glob("*/__init__.py") if not p.parent.name.startswith("_")}
    assert {m.rpartition(".")[2] for m in ops.discover()} == folders
    assert not [n for n in ast.walk(ast.parse((ROOT / "kernels" / "ops.py").read_text()))
                if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("r9k.kernels.")], \
        "kernels/ops.py names a kernel module: a central list every gate's closure hashes"


def test_a_new_kernel_folder_is_discovered_without_a_shared_edit(tmp_path, monkeypatch):
    import r9k.kernels

    pkg = tmp_path / "zz_probe_op"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from r9k.kernels.ops import KernelOp, register\n"
        "def stock(x, out=None):\n    return x\n"
        "def fused(x, out=None, num_warps=4):\n    return x\n"
        "register(KernelOp(name='zz_probe_op', variant='zz_probe', stock=stock, fused=fused,"
        " fused_values=frozenset({'1'})))\n")
    monkeypatch.setattr(r9k.kernels, "__path__", [*r9k.kernels.__path__, str(tmp_path)])
    try:
        assert "r9k.kernels.zz_probe_op" in ops.discover()
        assert ops.load_all()["zz_probe_op"].variant == "zz_probe"
    finally:
        ops._OPS.pop("zz_probe_op", None)
        import sys
        sys.modules.pop("r9k.kernels.zz_probe_op", None)


@pytest.mark.parametrize("stock, fused, why", [
    (lambda x, out=None: x, lambda y, out=None: y, "parameter 1 is y"),
    (lambda x, out=None: x, lambda x: x, "parameter 2 is nothing"),
    (lambda x, out=None: x, lambda x, out=0: x, "default 0"),
    (lambda x, *, eps=1e-6: x, lambda x, eps=1e-6: x, "positional or keyword"),
    (lambda x: x, lambda x, block: x, "needs block"),
])
def test_registration_refuses_a_fused_path_that_cannot_take_the_stock_calls(stock, fused, why):
    with pytest.raises(TypeError, match=why):
        ops.register(_fake(stock=stock, fused=fused))
    assert "fake_op" not in ops._OPS


def test_registration_takes_extra_tuning_parameters_with_defaults():
    try:
        assert ops.register(_fake()).name == "fake_op"
    finally:
        ops._OPS.pop("fake_op", None)


def test_every_shipped_op_passes_the_signature_check():
    for op in ops.load_all().values():
        ops.check_signatures(op)


def _project_imports(path: Path) -> set[str]:
    """Top-level folders of this project a kernel file imports (``r9k.X``, or ``..X`` relative)."""
    depth = len(path.relative_to(ROOT).parts) - 1  # kernels/<op>/x.py: `from ...registry` leaves kernels/
    out = set()
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            if n.level > depth and n.module:
                names = ["r9k." + n.module]
            elif not n.level and n.module:
                names = [n.module]
        out |= {m.split(".")[1] for m in names if m.startswith("r9k.") and m.count(".") >= 1}
    return out


def test_nothing_under_kernels_imports_the_rest_of_the_project():
    bad = {str(p.relative_to(ROOT)): sorted(_project_imports(p) - {"kernels"})
           for p in sorted((ROOT / "kernels").rglob("*.py")) if "__pycache__" not in p.parts}
    assert not {k: v for k, v in bad.items() if v}


def test_the_leaf_scan_sees_a_relative_and_an_absolute_import(tmp_path):
    d = tmp_path / "kernels" / "x"
    d.mkdir(parents=True)
    f = d / "mod.py"
    f.write_text("from ...registry import envvars\nimport r9k.plugin.dispatch\nfrom .. import ops\n")
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        assert _project_imports(f) == {"registry", "plugin"}
    finally:
        ROOT = old
