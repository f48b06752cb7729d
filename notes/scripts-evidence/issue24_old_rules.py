"""The two gates' test modules as they were before issue 24 (commit 4e97c0b), read with ``git show`` and loaded
under another name, for the issue 24 scripts (``issue24_seeds.py``, ``issue24_emulate.py``):
``old_rules(git_dir) -> (old kernels/hc_mix/test_hc_mix.py, old kernels/qsa_glue/test_qsa_glue.py)``; and
``outcome``, a check's verdict on one seed."""
import importlib.util, os, subprocess, tempfile


def old_module(name, path, replace, git_dir="."):
    src = subprocess.run(["git", "-C", git_dir, "show", f"4e97c0b:{path}"], capture_output=True, text=True,
                         check=True).stdout
    for a, b in replace:
        assert a in src, (path, a)
        src = src.replace(a, b)
    f = os.path.join(tempfile.mkdtemp(), name + ".py")
    with open(f, "w") as fh:
        fh.write(src)
    spec = importlib.util.spec_from_file_location(name, f)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def old_rules(git_dir="."):
    oh = old_module("old_hc", "kernels/hc_mix/test_hc_mix.py", [
        ("from .._testing import", "from r9k.kernels._testing import"),
        ("from . import reference as ref", "from r9k.kernels.hc_mix import reference as ref"),
        ("from . import triton_kernel as tk", "from r9k.kernels.hc_mix import triton_kernel as tk")], git_dir)
    oq = old_module("old_qsa", "kernels/qsa_glue/test_qsa_glue.py", [
        ("from .._testing import", "from r9k.kernels._testing import"),
        ("from ..ops import", "from r9k.kernels.ops import"),
        ("from . import reference, triton_kernel", "from r9k.kernels.qsa_glue import reference, triton_kernel")],
        git_dir)
    return oh, oq


def outcome(fn, seed, width=140):
    """None when ``fn(seed)`` passes, else the first line of its assertion (``width`` characters)."""
    try:
        fn(seed)
        return None
    except AssertionError as e:
        return str(e).splitlines()[0][:width]
