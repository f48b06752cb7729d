"""The docs are true: docs/architecture.md and docs/adding-a-kernel.md name only what exists.

* every project module, name and path the pages cite exists (``plugin.startup.find_carrier`` is defined in
  ``plugin/startup.py``; ``kernels/ops.py`` is a file);
* every ``r9kctl <command>`` they name answers ``--help`` with exit 0 (a subcommand of a group too);
* the architecture page's glossary has at most 15 lines, one word per line, each word once, each used in
  the code (``registry/``, ``r9kctl/``, ``plugin/``, ``kernels/``);
* every ``notes/<topic>.md`` (and ``notes/<topic>.md, "Section"``) that the docs, the README, the notes and the code
  cite exists, and README.md indexes every note.

Each check is a function returning its problems, and a broken page shows each kind of problem
(:func:`test_a_broken_page_shows_every_kind_of_problem`).
"""
from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCH = ROOT / "docs" / "architecture.md"
DOCS = (ARCH, ROOT / "docs" / "adding-a-kernel.md")
_FOLDERS = ("registry", "plugin", "r9kctl", "kernels", "bench", "profiles")
CODE = ("registry", "r9kctl", "plugin", "kernels")
GLOSSARY_MAX = 15


# ----------------------------------------------------------------------------- names and paths


def _module_file(parts: list[str]):
    base = ROOT.joinpath(*parts)
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def _defines(tree, name: str) -> bool:
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name:
            return True
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
        if any(getattr(t, "id", None) == name for t in targets):
            return True
        if isinstance(n, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == name for a in n.names):
            return True
    return False


def cited_name_problems(text: str) -> list[str]:
    """Every dotted project name (``registry.loader.load_registry``, ``r9k.registry.manifest.Manifest``,
    ``plugin.startup.find_carrier``) and every project path (``plugin/startup.py``, ``kernels/``) the text cites
    that does not exist: a module is a file, a name is defined at the module's top level or in its class."""
    bad = []
    for m in sorted(set(re.findall(rf"\b(?:r9k\.)?(?:{'|'.join(_FOLDERS)})(?:\.\w+)+", text))):
        parts = m.split(".")[1:] if m.startswith("r9k.") else m.split(".")
        k = max((i for i in range(1, len(parts) + 1) if _module_file(parts[:i])), default=0)
        if not k:
            bad.append(f"{m}: no module")
            continue
        rest = parts[k:]
        if not rest:
            continue
        tree = ast.parse(_module_file(parts[:k]).read_text(encoding="utf-8"))
        if not _defines(tree, rest[0]):
            bad.append(f"{m}: {'.'.join(parts[:k])} defines no {rest[0]}")
        elif len(rest) > 1:
            cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == rest[0]), None)
            if cls is not None and not _defines(cls, rest[1]):
                bad.append(f"{m}: {rest[0]} defines no {rest[1]}")
    for p in sorted(set(re.findall(rf"`((?:{'|'.join(_FOLDERS)}|docs|tests|notes|scripts)/[\w./-]*)`", text))):
        if "<" not in p and "*" not in p and not (ROOT / p).exists():
            bad.append(f"{p}: no such path")
    return bad


# ----------------------------------------------------------------------------- r9kctl commands

_WORD = r"[a-z][a-z0-9-]*"
_COMMAND = re.compile(rf"\br9kctl ({_WORD}(?:/{_WORD})*)(?: ({_WORD}))?")


@functools.lru_cache(maxsize=None)
def _help(*words: str) -> tuple[int, str]:
    out = subprocess.run([sys.executable, "-m", "r9k.r9kctl.cli", *words, "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    return out.returncode, out.stdout + out.stderr


def cited_commands(text: str) -> set[tuple[str, ...]]:
    """``r9kctl validate`` -> ("validate", next word or ""); ``r9kctl list/show`` -> one entry per command."""
    found = set()
    for m in _COMMAND.finditer(text):
        for cmd in m.group(1).split("/"):
            found.add((cmd, m.group(2) or "" if "/" not in m.group(1) else ""))
    return found


def command_problems(text: str) -> list[str]:
    """Every ``r9kctl <command>`` of the text whose ``--help`` does not exit 0; after a group (``r9kctl eval``,
    whose help lists ``{compare,record}``) a following word that is one of its subcommands is checked too."""
    bad = []
    for cmd, nxt in sorted(cited_commands(text)):
        rc, out = _help(cmd)
        if rc != 0:
            bad.append(f"r9kctl {cmd}: --help exits {rc}")
            continue
        group = re.search(r"\{([a-z0-9,-]+)\}", out)
        if nxt and group and nxt in group.group(1).split(","):
            rc, _ = _help(cmd, nxt)
            if rc != 0:
                bad.append(f"r9kctl {cmd} {nxt}: --help exits {rc}")
    return bad


# ----------------------------------------------------------------------------- the glossary

_ENTRY = re.compile(r"^\* \*\*([a-z][a-z ]*)\*\*: \S")


def glossary_lines(text: str) -> list[str]:
    m = re.search(r"^## Glossary\n(.*?)(?=^## )", text, re.S | re.M)
    return [ln for ln in m.group(1).splitlines() if ln.strip()] if m else []


@functools.lru_cache(maxsize=1)
def _code_text() -> str:
    parts = []
    for folder in CODE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" not in path.parts:
                parts.append(path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(parts)


def glossary_problems(text: str) -> list[str]:
    lines = glossary_lines(text)
    if not lines:
        return ["no '## Glossary' section"]
    bad = []
    if len(lines) > GLOSSARY_MAX:
        bad.append(f"the glossary has {len(lines)} lines (at most {GLOSSARY_MAX})")
    words = []
    for ln in lines:
        m = _ENTRY.match(ln)
        if not m:
            bad.append(f"not a '* **word**: meaning' line: {ln[:60]}")
            continue
        words.append(m.group(1))
    bad += [f"{w}: twice in the glossary" for w in sorted({w for w in words if words.count(w) > 1})]
    code = _code_text()
    for w in words:
        if not re.search(rf"\b{re.escape(w)}\b", code, re.I):
            bad.append(f"{w}: no code of {', '.join(f + '/' for f in CODE)} uses the word")
    return bad


# ----------------------------------------------------------------------------- notes citations

_NOTE = re.compile(r"\bnotes/([\w-]+\.md)\b")
#: where the project cites its notes (the registry's TOML notes quote an imported reference's own notes)
_CITING = ("README.md", "docs", "notes", "registry", "r9kctl", "plugin", "kernels", "bench", "scripts", "tests/core")


def note_citation_problems() -> list[str]:
    bad = []
    for top in _CITING:
        base = ROOT / top
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.suffix in {".md", ".py", ".sh"})
        for path in files:
            if "__pycache__" in path.parts:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                for name in _NOTE.findall(line):
                    if not (ROOT / "notes" / name).is_file():
                        bad.append(f"{path.relative_to(ROOT)}:{n}: notes/{name}: no such file")
    return bad


_SECTION = re.compile(r'notes/([\w-]+\.md)[,:]? \(?"([^"]{3,80})"')


def note_section_problems(texts: dict[str, str]) -> list[str]:
    """Every ``notes/<topic>.md, "Section"`` (or ``("Section"``) citation whose file has no heading starting with or
    containing that section name (case-insensitive; the cited text's line breaks read as spaces)."""
    heads = {p.name: [h.strip().lower() for h in re.findall(r"^#+ (.*)$", p.read_text(encoding="utf-8"), re.M)]
             for p in (ROOT / "notes").glob("*.md")}
    bad = []
    for where, text in texts.items():
        for name, sec in _SECTION.findall(" ".join(text.split())):
            if name in heads and not any(h.startswith(sec.lower()) or sec.lower() in h for h in heads[name]):
                bad.append(f"{where}: notes/{name} has no section {sec!r}")
    return bad


def _citing_texts() -> dict[str, str]:
    out = {}
    for top in _CITING:
        base = ROOT / top
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.suffix in {".md", ".py", ".sh"})
        out.update({str(p.relative_to(ROOT)): p.read_text(encoding="utf-8", errors="replace") for p in files
                    if "__pycache__" not in p.parts})
    return out


def doc_problems(text: str, glossary: bool = True) -> list[str]:
    return cited_name_problems(text) + command_problems(text) + (glossary_problems(text) if glossary else [])


# ----------------------------------------------------------------------------- the tests


def test_the_architecture_page_is_true():
    text = ARCH.read_text(encoding="utf-8")
    assert len(re.findall(r"\bplugin\.startup\.\w+", text)) >= 3  # the page does cite names
    assert {"launch", "status", "list", "tui"} <= {c for c, _ in cited_commands(text)}  # and commands
    assert doc_problems(text) == []


def test_the_adding_a_kernel_page_names_what_exists():
    text = DOCS[1].read_text(encoding="utf-8")
    # the example's own files do not exist before it is followed (tests/core/test_adding_a_kernel.py writes them)
    bad = [p for p in cited_name_problems(text) if not re.search(r"\bfoo\b|_foo\b", p)]
    assert bad == []
    assert {"gate", "schema", "launch", "status", "validate"} <= {c for c, _ in cited_commands(text)}
    assert command_problems(text) == []


def test_every_cited_note_exists():
    assert note_citation_problems() == []


def test_every_cited_note_section_exists():
    texts = {k: v for k, v in _citing_texts().items() if k != "tests/core/test_docs.py"}  # its own example below
    assert sum(len(_SECTION.findall(" ".join(x.split()))) for x in texts.values()) >= 5  # the notes do cite sections
    assert note_section_problems(texts) == []
    assert note_section_problems({"x.md": 'see notes/core.md, "No such section here"'}) == [
        "x.md: notes/core.md has no section 'No such section here'"]


def test_the_name_check_sees_a_stale_name():
    text = ("`plugin/startup.py` registry.loader.load_registry() r9k.registry.manifest.from_resolved "
            "plugin.startup.no_such_step registry.no_such_module.x `plugin/regcache.py` "
            "r9k.registry.manifest.Manifest.no_such_method")
    assert cited_name_problems(text) == [
        "plugin.startup.no_such_step: plugin.startup defines no no_such_step",
        "r9k.registry.manifest.Manifest.no_such_method: Manifest defines no no_such_method",
        "registry.no_such_module.x: registry defines no no_such_module",
        "plugin/regcache.py: no such path"]


def test_a_broken_page_shows_every_kind_of_problem():
    good = ARCH.read_text(encoding="utf-8")
    lines = glossary_lines(good)
    broken = good.replace(lines[0], lines[0] + "\n* **flibbertigibbet**: a word no code uses\n" + lines[1])
    broken = broken.replace("`plugin/startup.py`", "`plugin/no_such_file.py`", 1)
    broken += "\nRun `r9kctl no-such-command`, `r9kctl eval no-such-sub` and `r9kctl bench serve`.\n"
    problems = doc_problems(broken)
    assert "plugin/no_such_file.py: no such path" in problems
    assert "r9kctl no-such-command: --help exits 2" in problems
    assert f"the glossary has {len(lines) + 2} lines (at most {GLOSSARY_MAX})" in problems
    assert f"{lines[1].split('**')[1]}: twice in the glossary" in problems
    assert f"flibbertigibbet: no code of {', '.join(f + '/' for f in CODE)} uses the word" in problems
    assert not any("bench serve" in p or "eval" in p for p in problems)  # a real subcommand; prose after a group
    assert glossary_problems(good.replace("## Glossary", "## Words")) == ["no '## Glossary' section"]


def test_the_readme_indexes_every_note():
    """README.md's table of notes/ lists each file once, and only files that exist (the notes' index)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (notes/[\w-]+\.md) \|", text, re.M)
    assert len(rows) == len(set(rows)), rows
    assert set(rows) == {f"notes/{p.name}" for p in (ROOT / "notes").glob("*.md")}
