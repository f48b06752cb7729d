"""``r9kctl doctor [--vllm-src DIR]``: check this project against a vLLM source tree (the installed vLLM's by
default, or a folder holding ``vllm/``, or a wheel) and print what would break there.

Read as source (nothing of that vLLM is imported, so a version that needs another torch can be checked):
  imports      every ``from vllm... import NAME`` of the plugin and the kernels: the module exists, NAME is
               defined in it
  adapters     registry/adapters.toml: each vllm_module exists and defines vllm_class; a register_oot
               install needs ``register_oot`` on the class (or a base class)
  peer kernels the files kernels/_triton/vllm_peer.py loads and every name it takes from them
  interface    registry/vllm/<version>.json ships for that version; every launcher mapping and every shipped
               profile's launch is valid there; the latest release was validated on it
  runners      behaviour, not names: the model-runner classes vLLM's GPU and CPU workers instantiate (V1, V2,
               their subclasses), each named on a ``runner`` line; each must be one the "what vLLM chose per
               layer" hook wraps (r9k.plugin.report.RUNNERS) or inherit from one, and have the hooked
               method on it (else the choices table and strict mode's error[not-chosen] vanish there)

One line per finding. Exit 0: nothing breaks; 1: something would break (the lines say what); 2: DIR is not
a vLLM source tree.

examples:
  r9kctl doctor                                # the installed vLLM
  r9kctl doctor --vllm-src /tmp/v033/src       # unzip -q vllm-0.33.0-*.whl 'vllm/*.py' -d /tmp/v033/src
  r9kctl doctor --vllm-src vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl
"""
from __future__ import annotations

import ast
import difflib
import re
import tomllib
import zipfile
from pathlib import Path
from typing import Optional

from .common import registry_location, usage_error

PROJECT = Path(__file__).resolve().parents[1]


class Tree:
    """Files of a vLLM source tree (a folder holding ``vllm/``, the ``vllm/`` folder itself, or a wheel)."""

    def __init__(self, where: Path):
        self.where = where
        self.zip = zipfile.ZipFile(where) if where.is_file() else None
        if self.zip is None and (where / "__init__.py").is_file() and where.name == "vllm":
            self.where = where.parent
        self._ast: dict[str, Optional[ast.Module]] = {}

    def read(self, rel: str) -> Optional[str]:
        if self.zip is not None:
            try:
                return self.zip.read(rel).decode("utf-8")
            except KeyError:
                return None
        p = self.where / rel
        return p.read_text(encoding="utf-8") if p.is_file() else None

    def module_file(self, module: str) -> Optional[str]:
        base = module.replace(".", "/")
        for rel in (base + ".py", base + "/__init__.py"):
            if self.read(rel) is not None:
                return rel
        return None

    def tree(self, rel: str) -> Optional[ast.Module]:
        if rel not in self._ast:
            text = self.read(rel)
            try:
                self._ast[rel] = ast.parse(text) if text is not None else None
            except SyntaxError:
                self._ast[rel] = None
        return self._ast[rel]

    def version(self) -> Optional[str]:
        text = self.read("vllm/_version.py")
        m = re.search(r"""__version__\s*(?::\s*str)?\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)""", text or "")
        return m.group(1) if m else None


def top_names(mod: ast.Module) -> dict[str, ast.AST]:
    """Names a module defines or imports at top level (and in top-level if/try blocks)."""
    out: dict[str, ast.AST] = {}

    def walk(body):
        for n in body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out[n.name] = n
            elif isinstance(n, ast.Assign):
                for t in n.targets:
                    for x in ast.walk(t):
                        if isinstance(x, ast.Name):
                            out[x.id] = n
            elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                out[n.target.id] = n
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                for a in n.names:
                    out[(a.asname or a.name).split(".")[0]] = n
            elif isinstance(n, (ast.If, ast.Try)):
                walk(n.body)
                walk(getattr(n, "orelse", []))
                for h in getattr(n, "handlers", []):
                    walk(h.body)
    walk(mod.body)
    return out


def _nearest(name: str, names) -> str:
    near = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.6)
    return f" (nearest: {near[0]})" if near else ""


def has_name(t: Tree, module: str, name: str) -> tuple[bool, str]:
    rel = t.module_file(module)
    if rel is None:
        return False, f"module {module} does not exist"
    mod = t.tree(rel)
    if mod is None:
        return False, f"{rel} does not parse"
    names = top_names(mod)
    if name in names:
        return True, ""
    if t.module_file(f"{module}.{name}"):  # a submodule
        return True, ""
    if any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in mod.body):
        return True, ""  # a star import: cannot tell by reading
    return False, f"{rel} defines no {name}{_nearest(name, names)}"


def _source(module: str, imp: ast.ImportFrom, rel: str) -> str:
    """The module an import of ``module`` (file ``rel``) reads from, a relative one resolved."""
    if imp.level == 0:
        return imp.module
    parts = module.split(".")
    if not rel.endswith("__init__.py"):
        parts = parts[:-1]
    parts = parts[: len(parts) - (imp.level - 1)] if imp.level > 1 else parts
    return ".".join(parts + ([imp.module] if imp.module else []))


def _class_chain(t: Tree, module: str, cls: str, depth: int = 0) -> list[tuple[str, str, ast.ClassDef]]:
    """``(module, class, its node)`` of ``cls`` and of its bases, read as source (an import followed to its
    module)."""
    rel = t.module_file(module)
    mod = t.tree(rel) if rel else None
    if mod is None or depth > 8:
        return []
    names = top_names(mod)
    node = names.get(cls)
    if isinstance(node, ast.ImportFrom) and node.module:
        real = next((a.name for a in node.names if (a.asname or a.name) == cls), cls)
        return _class_chain(t, _source(module, node, rel), real, depth + 1)
    if not isinstance(node, ast.ClassDef):
        return []
    out = [(module, cls, node)]
    for base in node.bases:
        bname = base.id if isinstance(base, ast.Name) else (base.attr if isinstance(base, ast.Attribute) else None)
        imp = names.get(bname) if bname else None
        if isinstance(imp, ast.ImportFrom) and imp.module:
            real = next((a.name for a in imp.names if (a.asname or a.name) == bname), bname)
            out += _class_chain(t, _source(module, imp, rel), real, depth + 1)
        elif isinstance(imp, ast.ClassDef):
            out += _class_chain(t, module, bname, depth + 1)
    return out


def class_has_method(t: Tree, module: str, cls: str, method: str) -> bool:
    """``cls`` (or a class it derives from) defines ``method``."""
    return any(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) and b.name == method
               for _m, _c, node in _class_chain(t, module, cls) for b in node.body)


def project_vllm_imports() -> list[tuple[str, int, str, str]]:
    """(file, line, module, name) of each ``from vllm... import name`` in the plugin and the kernels."""
    out = []
    for folder in ("plugin", "kernels"):
        for f in sorted((PROJECT / folder).rglob("*.py")):
            if "test" in f.name:
                continue
            try:
                mod = ast.parse(f.read_text(encoding="utf-8"))
            except SyntaxError:
                continue
            for n in ast.walk(mod):
                if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module and n.module.split(".")[0] == "vllm":
                    for a in n.names:
                        out.append((str(f.relative_to(PROJECT)), n.lineno, n.module, a.name))
                elif isinstance(n, ast.Import):
                    for a in n.names:
                        if a.name.split(".")[0] == "vllm" and "." in a.name:
                            mod_name, _, last = a.name.rpartition(".")
                            out.append((str(f.relative_to(PROJECT)), n.lineno, mod_name, last))
    return out


def peer_uses() -> tuple[dict[str, str], list[tuple[int, str, str]]]:
    """(FILES of vllm_peer, [(line, file key, attribute)]): the names vllm_peer takes from each file it loads."""
    f = PROJECT / "kernels" / "_triton" / "vllm_peer.py"
    mod = ast.parse(f.read_text(encoding="utf-8"))
    files: dict[str, str] = {}
    for n in mod.body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "FILES" for t in n.targets):
            files = ast.literal_eval(n.value)
    uses = []
    for fn in ast.walk(mod):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        var: dict[str, str] = {}
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name) \
                    and n.value.func.id == "load" and n.value.args and isinstance(n.value.args[0], ast.Constant):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        var[t.id] = n.value.args[0].value
        for n in ast.walk(fn):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in var:
                uses.append((n.lineno, var[n.value.id], n.attr))
    return files, sorted(set(uses))


WORKERS = ("vllm/v1/worker/gpu_worker.py", "vllm/v1/worker/cpu_worker.py")


def instantiated_runners(t: Tree) -> list[tuple[str, int, str, str]]:
    """(worker file, line, module, class) of each model-runner class a worker constructs: the names it imports
    (at top level or inside a method, under any alias) that end in ``ModelRunner`` and that it calls."""
    out = []
    for rel in WORKERS:
        mod = t.tree(rel)
        if mod is None:
            continue
        alias: dict[str, tuple[str, str]] = {}
        for n in ast.walk(mod):
            if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                for a in n.names:
                    if a.name.endswith("ModelRunner"):
                        alias[a.asname or a.name] = (n.module, a.name)
        seen = set()
        for n in ast.walk(mod):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in alias:
                key = alias[n.func.id]
                if key not in seen:
                    seen.add(key)
                    out.append((rel, n.lineno, *key))
    return out


def runner_findings(t: Tree) -> tuple[list[str], list[str]]:
    """(the ``runner`` lines: what each worker instantiates and how it is hooked, the errors)."""
    from ..plugin.api import HOOKED, RUNNERS

    info, errors = [], []
    found = instantiated_runners(t)
    if not found and any(t.read(w) is not None for w in WORKERS):
        errors.append(f"{WORKERS[0]}: error[runner]: no model-runner class found constructed in the workers (the "
                      f"'what vLLM chose' hook wraps {', '.join(m + '.' + c for m, c in RUNNERS)})")
    for rel, line, module, cls in found:
        chain = [(m, c) for m, c, _node in _class_chain(t, module, cls)]
        hooked = next(((m, c) for m, c in chain if (m, c) in RUNNERS), None)
        v = "V2" if any(".worker.gpu." in m or ".worker.cpu." in m for m, _c in chain) else "V1"
        where = f"{rel}:{line}"
        if not chain:
            errors.append(f"{where}: error[runner]: {module}.{cls} (constructed here) is not found in this vLLM")
        elif hooked is None:
            errors.append(f"{where}: error[runner]: {module}.{cls} ({v}) derives from no runner the 'what vLLM "
                          f"chose' hook wraps: the choices table and strict mode's error[not-chosen] vanish there")
        elif not class_has_method(t, module, cls, HOOKED):
            errors.append(f"{where}: error[runner]: {module}.{cls} ({v}) has no {HOOKED} (the hooked method)")
        else:
            via = "" if hooked == (module, cls) else f" via {hooked[0]}.{hooked[1]}"
            info.append(f"{where}: runner: {module}.{cls} ({v}) constructed here; {HOOKED} hooked{via}")
    return info, errors


def diagnose(t: Tree, reg) -> list[str]:
    lines: list[str] = runner_findings(t)[1]
    for file, line, module, name in project_vllm_imports():
        ok, why = has_name(t, module, name)
        if not ok:
            lines.append(f"{file}:{line}: error[import]: from {module} import {name}: {why}")
    text = (PROJECT / "registry" / "adapters.toml").read_text(encoding="utf-8")
    for a in tomllib.loads(text).get("adapter", []):
        needle = f'extension_point = "{a["extension_point"]}"'
        line = next((i for i, ln in enumerate(text.splitlines(), 1) if needle in ln), 1)
        where = f"registry/adapters.toml:{line}"
        ok, why = has_name(t, a["vllm_module"], a["vllm_class"])
        if not ok:
            lines.append(f"{where}: error[adapter]: {a['extension_point']}: {a['vllm_class']}: {why}")
        elif a.get("install") == "register_oot" and not class_has_method(t, a["vllm_module"], a["vllm_class"],
                                                                         "register_oot"):
            lines.append(f"{where}: error[adapter]: {a['extension_point']}: {a['vllm_class']} has no register_oot "
                         "(the out-of-tree registration this adapter installs through)")
    files, uses = peer_uses()
    for key, rel in files.items():
        if t.read(rel) is None:
            lines.append(f"kernels/_triton/vllm_peer.py: error[peer-kernel]: {rel} ({key}) is not in this vLLM")
    for line, key, attr in uses:
        rel = files.get(key)
        mod = t.tree(rel) if rel else None
        if mod is None:
            continue
        names = top_names(mod)
        if attr not in names:
            lines.append(f"kernels/_triton/vllm_peer.py:{line}: error[peer-kernel]: {rel} has no {attr}"
                         f"{_nearest(attr, names)} (the decode-step benchmark's stock loader uses it)")
    lines += interface_findings(t, reg)
    return lines


def interface_findings(t: Tree, reg) -> list[str]:
    from ..registry.validate import Report, validate
    from ..registry.vllm_interface import load, series
    from ..registry.vllm_map import check_mappings, check_profile_launch

    version = t.version()
    if version is None:
        return ["vllm/_version.py: error[interface]: no version found: the interface description cannot be chosen"]
    iface = load(version)
    if iface is None:
        return [f"registry/vllm/: error[interface]: no interface description for vLLM {version} (generate it: "
                f".venv/bin/python scripts/vllm_interface.py --src {t.where} --out registry/vllm/{series(version)}.json)"]
    out = []
    report = Report()
    check_mappings(reg, report, iface)
    base = validate(reg, all_profiles=True, vllm_version=version)
    for name, rs in sorted(base.profiles.items()):
        if not any(d.level == "error" and name in d.items for d in base.diagnostics if d.code not in (
                "vllm-mapping", "unknown-flag", "abbreviated-flag", "bad-value", "missing-value", "unknown-variable",
                "bad-env-value")):
            check_profile_launch(reg, rs, report, iface)
    for d in report.errors:
        out.append(d.format())
    latest = reg.latest_release()
    rel = reg.releases.get(latest) if latest else None
    if rel is not None and rel.vllm_validated and series(version) not in rel.vllm_validated:
        out.append(f"registry/releases/{latest}.toml: warning[version]: release {latest} was validated on vLLM "
                   f"{', '.join(rel.vllm_validated)}, not {version} (launch's pre-flight refuses it)")
    return out


def add_parser(sub):
    p = sub.add_parser("doctor", help="check this project against a vLLM source tree or wheel (what would break)",
                       description=__doc__)
    p.add_argument("--vllm-src", metavar="DIR", help="a folder holding vllm/, the vllm/ folder, or a wheel "
                   "(default: the installed vLLM's sources)")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from ..registry import load_registry

    if args.vllm_src:
        where = Path(args.vllm_src)
    else:
        from ..plugin.api import vllm_source_root

        where = vllm_source_root()
        if where is None:
            return usage_error("r9kctl doctor", "no installed vLLM found; name one with --vllm-src DIR")
    if not where.exists():
        return usage_error("r9kctl doctor", f"{where} does not exist")
    t = Tree(where)
    if t.read("vllm/__init__.py") is None:
        return usage_error(str(where), "not a vLLM source tree (no vllm/__init__.py)")
    reg = load_registry(*registry_location(args))  # one that does not load: its located lines (cli.main)
    for line in runner_findings(t)[0]:
        print(line)
    findings = diagnose(t, reg)
    for line in findings:
        print(line)
    errors = [ln for ln in findings if ": error[" in ln]
    print(f"vLLM {t.version() or '?'} at {where}: " + (f"{len(errors)} thing(s) would break" if errors else
                                                        "nothing this project uses breaks")
          + (f", {len(findings) - len(errors)} warning(s)" if len(findings) > len(errors) else ""))
    return 1 if errors else 0
