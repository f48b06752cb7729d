"""The rules of the house that a code change can break without any other test noticing.

* The engine (``registry/``) imports no screen (textual, rich), no vLLM and no torch, and none of the
  parts built on it (r9kctl, the plugin, the kernels); the plugin imports no textual or rich.
* The engine's code names no model: model facts live in ``registry/models.toml``.
* This project's own environment variables are spelt in one module, ``registry/envvars.py``: no other
  code string, docstring or comment of the engine, the plugin or the command line spells one.
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "registry"
# Deliberate exceptions, each with its reason: (file, module) -> why.
ALLOWED = {
    ("registry/provenance.py", "torch"): "only when run as a script on the GPU machine (toolchain(use_torch=True))",
}
FORBIDDEN = {
    "engine": {"textual", "rich", "torch", "vllm", "triton", "r9k.r9kctl", "r9k.plugin", "r9k.kernels"},
    "plugin": {"textual", "rich", "r9k.r9kctl"},
}


def _py_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def _package(path: Path) -> str:
    parts = path.relative_to(ROOT).parts
    return ".".join(["r9k", *parts[:-1]])


def _imports(path: Path, here: str = "") -> set[str]:
    """Every module an import statement in ``path`` names (relative ones resolved against the package
    ``here``, by default the file's own: ``r9k.<folder>...``). Imports inside functions count too."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    here = here or _package(path)
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                out.add(base + ("." + node.module if node.module else ""))
            else:
                out.add(node.module or "")
    return out


def _hits(mods: set[str], forbidden: set[str]) -> set[str]:
    return {m for m in mods for f in forbidden if m == f or m.startswith(f + ".")}


def test_engine_and_plugin_import_nothing_they_must_not():
    bad = {}
    for kind, folder in (("engine", ENGINE), ("plugin", ROOT / "plugin")):
        for path in _py_files(folder):
            rel = str(path.relative_to(ROOT))
            hits = {h for h in _hits(_imports(path), FORBIDDEN[kind]) if (rel, h) not in ALLOWED}
            if hits:
                bad[rel] = sorted(hits)
    assert not bad, f"forbidden imports: {bad}"


def test_importing_the_whole_engine_loads_no_screen_vllm_or_torch():
    mods = [f"r9k.registry.{p.stem}" for p in _py_files(ENGINE) if p.parent == ENGINE and p.stem != "__init__"]
    code = ("import importlib, json, sys\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    loaded = set(json.loads(out.stdout))
    assert not _hits(loaded, FORBIDDEN["engine"]), sorted(_hits(loaded, FORBIDDEN["engine"]))


def test_the_scan_sees_a_forbidden_import(tmp_path):
    """The AST scan is not vacuous: a plugin module importing rich, or r9kctl relatively, is caught."""
    probe = tmp_path / "probe.py"
    probe.write_text("import os\nfrom rich.console import Console\n\ndef f():\n    from ..r9kctl import output\n")
    assert _hits(_imports(probe, "r9k.plugin"), FORBIDDEN["plugin"]) == {"rich.console", "r9k.r9kctl"}


def _model_words() -> set[str]:
    data = tomllib.loads((ENGINE / "models.toml").read_text(encoding="utf-8"))
    words = set()
    for m in data["model"]:
        words.add(m["name"].lower())
        if m.get("architecture"):
            words.add(m["architecture"].lower())
        if m.get("scope") and len(m["scope"]) >= 3:
            words.add(m["scope"].lower())
        if m.get("scope"):
            words.add(f"\"{m['scope']}\"".lower())
            words.add(f"{m['scope']}_tp".lower())
    words.update({"flash-next", "flash_next"})
    return words


def test_the_engine_names_no_model():
    words = _model_words()
    assert "qwen3.8-flash-next" in words  # the list is read from models.toml, not empty
    bad = []
    for path in _py_files(ENGINE):
        text = path.read_text(encoding="utf-8").lower()
        bad += [f"{path.relative_to(ROOT)}: {w}" for w in sorted(words) if w in text]
    assert not bad, bad


def _code_strings(path: Path, with_nodes: bool = False) -> list:
    """String constants of a module that are not docstrings (names used by code, not prose)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
    # a part of an f-string followed by an interpolation is "continued" (its last word is cut off)
    cont = {id(part) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)
            for part, nxt in zip(n.values, n.values[1:]) if isinstance(nxt, ast.FormattedValue)}
    out = [(n.lineno, n.value, id(n) in cont) for n in ast.walk(tree)
           if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]
    # dict(env, R9K_X=...) spells a name too
    out += [(n.value.lineno, n.arg, False) for n in ast.walk(tree) if isinstance(n, ast.keyword) and n.arg]
    return out if with_nodes else [(line, s) for line, s, _ in out]


def _docstrings_and_comments(path: Path) -> list[tuple[int, str]]:
    """The prose of a module: its docstrings (module, classes, functions) and its comments."""
    import io
    import tokenize

    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                out.append((body[0].lineno, body[0].value.value))
    out += [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT]
    return out


def _spelt_control_names(path: Path) -> list[str]:
    """``file:line: NAME`` for each control variable spelt in ``path``: in a code string, a docstring or
    a comment (prose refers to it as ``envvars.MANIFEST``; help text is made with ``envvars.spell``)."""
    import re

    from r9k.registry import envvars

    pat = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(sorted(map(re.escape, envvars.ALL), key=len, reverse=True))
                     + r")(?![A-Za-z0-9_])")
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    bad = []
    for line, s in _code_strings(path):
        hit = next((n for n in envvars.ALL if n in s), None)  # a substring: f"{...}R9K_TP" spells it too
        if hit:
            bad.append(f"{rel}:{line}: {hit}")
    for line, s in _docstrings_and_comments(path):
        for m in pat.finditer(s):
            bad.append(f"{rel}:{line + s.count(chr(10), 0, m.start())}: {m.group(1)} (docstring or comment)")
    return bad


def test_control_variables_are_spelt_in_one_module():
    files = [p for folder in ("registry", "plugin", "r9kctl") for p in _py_files(ROOT / folder)]
    assert len(files) > 50
    bad = [hit for path in files if path != ENGINE / "envvars.py" for hit in _spelt_control_names(path)]
    assert not bad, "use r9k.registry.envvars instead of spelling the name:\n" + "\n".join(bad)


def test_the_spelling_scan_sees_a_name_in_code_docstring_and_comment(tmp_path):
    """The scan is not vacuous: a control variable's name in a comment, a docstring or a code string is
    caught, a reference through envvars or a knob's name is not."""
    probe = tmp_path / "probe.py"
    probe.write_text('"""Module doc: reads R9K_MANIFEST."""\n'
                     "from r9k.registry import envvars\n"
                     "\n"
                     "def f(env):\n"
                     '    """Function doc,\n    then ``$R9K_CACHE_DIR``."""\n'
                     "    # set R9K_DEBUG=1 for a traceback\n"
                     '    return env.get("R9K_TP"), envvars.PROFILE.get(env), env.get("R9K_ROUTER")  # R9K_TPX\n')
    hits = [h.split(":", 1)[1] for h in _spelt_control_names(probe)]  # "line: NAME ..."
    assert hits == ["8: R9K_TP", "1: R9K_MANIFEST (docstring or comment)",
                    "6: R9K_CACHE_DIR (docstring or comment)", "7: R9K_DEBUG (docstring or comment)"], hits


def test_every_project_variable_the_code_names_is_declared():
    """A name with the project's prefix in code is a knob of the registry or a variable of envvars: a new
    control variable must be declared there (then the resolver does not take it for a misspelt knob)."""
    import re

    from r9k.registry import envvars, load_registry

    knobs = set(load_registry().knobs())
    pat = re.compile(r"(?<![A-Za-z0-9_])_?R9K_[A-Z0-9_]*[A-Z0-9]")
    undeclared = []
    for folder in ("registry", "plugin", "r9kctl"):
        for path in _py_files(ROOT / folder):
            for line, s, continued in _code_strings(path, with_nodes=True):
                for m in pat.finditer(s):
                    name = m.group(0)
                    if continued and m.end() == len(s):
                        continue  # f"R9K_K{i}": the name goes on in the interpolation
                    if name not in knobs and name not in envvars.ALL:
                        undeclared.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert not undeclared, "declare these in registry/envvars.py (or as a knob):\n" + "\n".join(undeclared)


def test_the_kernels_name_only_variables_declared_for_them():
    """The one deliberate exception to the spelling rule: ``kernels/`` reads its own variables by name
    (``envvars.TUNED_DEVICE``, ``envvars.VLLM_SRC``, the tests' ``envvars.TEST_SEED``). Importing
    ``r9k.registry`` there would put the registry's loader (``registry/__init__``'s lazy import) into every
    kernel gate's hashed closure, so any registry edit would stale every GPU gate. Each name a kernel file
    spells must be declared in envvars with that very module among its readers."""
    import re

    from r9k.registry import envvars

    knobs_pat = re.compile(r"(?<![A-Za-z0-9_])R9K_[A-Z0-9_]*[A-Z0-9]")
    by_name = {v.name: v for v in vars(envvars).values() if isinstance(v, envvars.EnvVar)}
    bad, seen = [], set()
    for path in _py_files(ROOT / "kernels"):
        if path.name.startswith("test_"):
            continue
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for line, s in _code_strings(path):
            for m in knobs_pat.finditer(s):
                var = by_name.get(m.group(0))
                if var is None:
                    continue  # a knob (R9K_PDL, ...): registry data, not a control variable
                seen.add(var.name)
                if module not in var.readers:
                    bad.append(f"{path.relative_to(ROOT)}:{line}: {var.name} (readers: {', '.join(var.readers)})")
    assert not bad, "declare the kernel module as a reader in registry/envvars.py:\n" + "\n".join(bad)
    assert {"R9K_TUNED_DEVICE", "R9K_VLLM_SRC", "R9K_TEST_SEED"} <= seen  # the scan sees the three


def test_semantics_citations_point_at_sections_that_exist():
    import re

    doc = (ROOT / "docs" / "semantics.md").read_text(encoding="utf-8")
    sections = set(re.findall(r"^#{2,4} (\d+(?:\.\d+)*[a-z]?)[. ]", doc, re.M))
    assert {"1.1", "3.6", "3.10", "3.11"} <= sections
    cited, stale = [], []
    for folder in ("registry", "plugin", "r9kctl", "kernels", "scripts", "notes"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in {".py", ".md", ".toml"} or "__pycache__" in path.parts:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            if "kernel-semantics" in text:
                stale.append(str(path.relative_to(ROOT)))
            for m in re.finditer(r"docs/semantics\.md,? ((?:\d+(?:\.\d+)*[a-z]?(?:, |,? and )?)+)", text):
                cited += [(str(path.relative_to(ROOT)), n) for n in re.findall(r"\d+(?:\.\d+)*[a-z]?", m.group(1))]
    assert not stale, f"cite docs/semantics.md, not the reference outside the repository: {stale}"
    assert len(cited) >= 10
    missing = [(f, n) for f, n in cited if n not in sections]
    assert not missing, missing
