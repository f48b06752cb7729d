"""The code identity of the kernels that run: per fused op, a sha256 over the source text of every module of
its kernel package loaded in this process, as Python compiled it (``linecache``: a module compiled from
other text than its file, as the mutation loader does, reads as that text), and whether that text is the
file's. The set's hash covers values only; this says which code serves them, so a broken kernel does not
serve under the same identity as the good one."""
from __future__ import annotations

import hashlib
import linecache
import sys
from pathlib import Path
from typing import Optional


def _text(mod) -> Optional[str]:
    f = getattr(mod, "__file__", None)
    if not f or not f.endswith(".py"):
        return None
    lines = linecache.getlines(f, getattr(mod, "__dict__", None))
    return "".join(lines) if lines else ("" if Path(f).is_file() else None)  # an empty __init__.py reads as []


def of_package(package: str) -> Optional[dict]:
    """``{"hash", "modules", "as_on_disk"}`` over the loaded modules ``package`` and ``package.*``."""
    h = hashlib.sha256()
    n, same = 0, True
    for name in sorted(m for m in list(sys.modules) if m == package or m.startswith(package + ".")):
        text = _text(sys.modules[name])
        if text is None:
            continue
        h.update(name.encode() + b"\0" + text.encode() + b"\n")
        n += 1
        try:
            same = same and Path(sys.modules[name].__file__).read_text(encoding="utf-8") == text
        except OSError:
            same = False
    return {"hash": h.hexdigest()[:16], "modules": n, "as_on_disk": same} if n else None


def snapshot(table) -> dict:
    """Per op this process runs fused: its kernel package's identity (``{}`` before anything is loaded)."""
    out = {}
    for p in (table.plans.values() if table is not None else ()):
        if p.state == "fused" and p.op and p.module:
            ident = of_package(p.module)
            if ident is not None:
                out[p.op] = ident
    return out


def combined(code: dict) -> Optional[str]:
    """One identity for a process's kernels (None when it runs none)."""
    if not code:
        return None
    return hashlib.sha256("".join(f"{op}={c['hash']};" for op, c in sorted(code.items())).encode()).hexdigest()[:16]
