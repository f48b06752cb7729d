"""The bad-input corpus harness: cases that break one file (or one option) of a copy of the registry, run
``r9kctl`` in this process (``cli.main`` with captured output) and check what a user must get:

* the exit code (2 for bad input; never 3, the "this is a bug" code, unless a case says so);
* no traceback, in either stream;
* the located line: ``FILE:LINE[:COL]: error[KIND]: ...`` naming the broken file and line (or, for a
  problem of the file as a whole, ``FILE: error[KIND]``); by default exactly one error line (one fault,
  one message);
* every file of the tree unchanged afterwards (nothing written, nothing lost), unless the case says which
  file it may write.

The tree is copied once per session and each case restores what it changed, so the parse cache keeps
the files a case does not touch (a case costs one parse of its own file, not of the registry).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union

REPO = Path(__file__).resolve().parents[2]
ERROR_LINE = re.compile(r"^(?:(?P<loc>.*?): )?error\[(?P<kind>[a-z0-9-]+)\]: (?P<msg>.*)$")
LOCATED = re.compile(r"^(?P<file>.+?):(?P<line>\d+)(?::(?P<col>\d+))?$")

Content = Union[bytes, str, None, Callable[[Path], None]]


@dataclass
class Case:
    id: str
    argv: list[str]
    files: dict[str, Content] = field(default_factory=dict)  # tree-relative path -> new content (None: delete)
    code: int = 2
    file: Optional[str] = None  # a substring of the file the error line must name
    line: Optional[int] = None  # its line (None: any, or none)
    kind: Optional[str] = None
    contains: tuple[str, ...] = ()  # substrings of the error line(s)
    errors: Optional[int] = 1  # how many error lines (None: at least one when code is 2)
    env: dict[str, str] = field(default_factory=dict)
    writes: tuple[str, ...] = ()  # tree-relative files the command may change
    located: bool = True  # False: argparse's own usage line (``r9kctl X: error: ...``)


def case_id(c: Case) -> str:
    return c.id


class Tree:
    """A writable copy of the registry (``registry/``) and a profile folder (``p/``) with a scratch folder
    (``x/``) for inputs that are not registry files."""

    def __init__(self, root: Path):
        self.root = root
        src = REPO / "registry"
        reg = root / "registry"
        reg.mkdir(parents=True)
        for part in ("variants", "releases"):
            shutil.copytree(src / part, reg / part)
        shutil.copy(src / "models.toml", reg / "models.toml")
        (root / "p").mkdir()
        (root / "x").mkdir()

    @property
    def registry(self) -> Path:
        return self.root / "registry"

    def snapshot(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for dirpath, dirnames, filenames in os.walk(self.root, followlinks=False):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                rel = str(p.relative_to(self.root))
                st = os.lstat(p)
                if stat.S_ISLNK(st.st_mode):
                    out[rel] = ("link", os.readlink(p))
                elif stat.S_ISREG(st.st_mode) and st.st_size > (1 << 20):  # the oversized inputs: not read
                    out[rel] = ("big", st.st_size, st.st_mtime_ns, st.st_ino)
                elif stat.S_ISREG(st.st_mode):
                    out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
                elif stat.S_ISDIR(st.st_mode):
                    out[rel] = "dir"
                else:
                    out[rel] = "other"
        return out

    def apply(self, files: dict[str, Content]) -> Callable[[], None]:
        """Write the case's files; returns what puts the tree back."""
        undo: list[Callable[[], None]] = []
        for rel, content in files.items():
            p = self.root / rel
            old = p.read_bytes() if p.is_file() and not p.is_symlink() else None
            existed = os.path.lexists(p)
            saved = None
            if p.is_dir() and not p.is_symlink():  # a whole folder: kept aside and put back
                saved = self.root.parent / f"{self.root.name}-saved-{len(undo)}"
                shutil.rmtree(saved, ignore_errors=True)
                shutil.copytree(p, saved, symlinks=True)

            def restore(p=p, old=old, existed=existed, saved=saved):
                _remove(p)
                if old is not None:
                    p.write_bytes(old)
                elif saved is not None:
                    shutil.copytree(saved, p, symlinks=True)
                    shutil.rmtree(saved)
                elif existed:
                    raise AssertionError(f"cannot restore {p}")
            undo.append(restore)
            p.parent.mkdir(parents=True, exist_ok=True)
            if callable(content):
                if os.path.lexists(p):
                    _remove(p)
                content(p)
            elif content is None:
                _remove(p)
            else:
                _remove(p)
                p.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)

        def undo_all():
            for u in reversed(undo):
                u()
        return undo_all


def _remove(p: Path) -> None:
    if p.is_symlink() or p.is_file() or (os.path.lexists(p) and not p.is_dir()):
        os.unlink(p)
    elif p.is_dir():
        shutil.rmtree(p)


def copy_registry(dst: Path) -> Path:
    """A writable copy of the shipped registry's data (variants, releases, models, vLLM descriptions) at ``dst``."""
    shutil.copytree(REPO / "registry", dst, ignore=shutil.ignore_patterns("*.py", "__pycache__", "gates"))
    return dst


def run_main(argv: list[str], env: Optional[dict] = None) -> tuple[int, str, str]:
    """``r9kctl ARGV`` in this process: (exit code, stdout, stderr)."""
    from r9k.r9kctl import cli

    saved = dict(os.environ)
    os.environ.update(env or {})
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(argv))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return code, out.getvalue(), err.getvalue()


def error_lines(text: str) -> list[re.Match]:
    return [m for m in (ERROR_LINE.match(ln) for ln in text.splitlines()) if m]


def check(tree: Tree, c: Case) -> None:
    undo = tree.apply(c.files)
    try:
        before = tree.snapshot()
        argv = [a.replace("{T}", str(tree.root)) for a in c.argv]
        code, out, err = run_main(argv, {k: v.replace("{T}", str(tree.root)) for k, v in c.env.items()})
        after = tree.snapshot()
    finally:
        undo()
    lines = [ln for ln in (out + err).splitlines() if "error[" in ln]
    shown = f"exit {code}; error lines:\n" + "\n".join(lines[:20]) + f"\n--- stderr (end)\n{err[-1500:]}"
    assert "Traceback" not in out + err, shown
    assert code == c.code, shown
    if c.code != 3:
        assert "error[internal]" not in err, shown
    for rel in set(before) | set(after):
        if rel in c.writes or any(rel.startswith(w.rstrip("/") + "/") for w in c.writes):
            continue
        assert before.get(rel) == after.get(rel), f"{rel} changed\n{shown}"
    errs = error_lines(err) + error_lines(out)
    if not c.located:
        assert re.search(r"^r9kctl[\w -]*: error: ", err, re.M), shown
        return
    if c.code == 2 or c.file or c.kind:
        assert errs, shown
    if c.errors is not None and c.code == 2:
        assert len(errs) == c.errors, f"{len(errs)} error lines, expected {c.errors}\n{shown}"
    if c.file or c.line or c.kind:
        ok = []
        for m in errs:
            loc = LOCATED.match(m["loc"] or "")
            fname, line = (loc["file"], int(loc["line"])) if loc else (m["loc"] or "", None)
            if c.file and c.file not in fname:
                continue
            if c.line is not None and line != c.line:
                continue
            if c.kind and m["kind"] != c.kind:
                continue
            ok.append(m)
        assert ok, f"no error line names {c.file}:{c.line} [{c.kind}]\n{shown}"
    for s in c.contains:
        assert s in err + out, f"{s!r} not in the output\n{shown}"

