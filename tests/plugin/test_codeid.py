"""The kernels' code identity in the status (issue 38 item 7): the source as Python compiled it, so a kernel
compiled from mutated text (r9kctl/evidence/mutate.py's loader: nothing on disk changes) does not carry the
good kernel's identity."""
import importlib
import linecache
import sys
import types

from r9k.plugin import codeid


def test_a_mutated_module_changes_the_identity_and_says_it_is_not_the_files(tmp_path, monkeypatch):
    pkg = tmp_path / "fakekern"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "k.py").write_text("def gemm(x):\n    return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("fakekern.k")
    try:
        good = codeid.of_package("fakekern")
        assert good["modules"] == 2 and good["as_on_disk"] is True
        f = str(pkg / "k.py")
        text = "def gemm(x):\n    return x * 0\n"  # what the mutation loader compiles and puts in linecache
        monkeypatch.setitem(linecache.cache, f, (len(text), None, text.splitlines(True), f))
        bad = codeid.of_package("fakekern")
        assert bad["hash"] != good["hash"] and bad["as_on_disk"] is False
        plan = types.SimpleNamespace(state="fused", op="gemm", module="fakekern")
        table = types.SimpleNamespace(plans={"v": plan})
        assert codeid.snapshot(table) == {"gemm": bad}
        assert codeid.combined({"gemm": bad}) != codeid.combined({"gemm": good})
        plan.state = "fallback"  # a refused op runs no kernel of this project: no identity claimed for it
        assert codeid.snapshot(table) == {}
    finally:
        for m in [m for m in sys.modules if m.split(".")[0] == "fakekern"]:
            del sys.modules[m]
