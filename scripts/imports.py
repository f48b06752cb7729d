"""The import codemod: imports between the project's folders relative and at the top of the module.

    python scripts/imports.py --check     exit 1 and list what --apply would change (nothing changed)
    python scripts/imports.py --apply     rewrite the files in place; idempotent (a second run changes nothing)
    python scripts/imports.py --apply FILE ...   only those files (the graph is still the whole tree's)

Two rewrites, over every ``.py`` file of the folders ``setup.py`` maps under ``r9k``:

1. **Relative**: ``from r9k.registry import envvars`` in ``plugin/x.py`` becomes ``from ..registry import
   envvars`` (``import r9k.a.b as c`` becomes ``from ..a import b as c``). Readers, IDEs and static tools then
   follow the import to the real folder, which they cannot do for ``r9k.X`` (a mapping made by ``setup.py``).
   Files run by path (:data:`SCRIPTS`) keep absolute imports: a relative one needs a package.
2. **At the top**: an import of a project module inside a function moves to the module's imports, unless

   * the file is one of :data:`LAZY` (start-up cost: each with its reason),
   * the imported module is *heavy*: importing it loads one of :data:`HEAVY` at its top level (directly or
     through the project's own top-level imports) or one of :data:`HEAVY_FILES`, so moving it would put that
     cost on every importer,
   * moving it would close an import cycle among top-level imports,
   * its name is bound otherwise in the module, or the statement is not a whole line directly in a function
     body (inside ``try``/``if``: a deliberate guard).

Third-party imports are left where they are. The script checks that every file it writes still parses.
``tests/core/test_imports_codemod.py`` runs ``--check`` on the tree and each rule on a small package.
"""
from __future__ import annotations

import argparse
import ast
import fnmatch
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "r9k"

#: Files (``fnmatch`` patterns) whose in-function imports stay there: what must stay cheap to import, and why.
LAZY = {
    "plugin/__init__.py": "register() runs in every vLLM process, also with the plugin switched off: it imports "
                          "the rest of the plugin only once a profile is active",
    "plugin/startup.py": "runs inside register(); loads the engine (resolve, validate) only when the manifest "
                         "cannot be used as it is",
    "plugin/models/__init__.py": "imported by register(); the model classes pull in vLLM's model code",
    "r9kctl/cli.py": "every r9kctl command starts here: one subcommand's module is imported, on demand",
    "r9kctl/cmd_*.py": "`r9kctl --help` (and completion) imports every subcommand's module to build the parser: "
                       "what a command runs is imported when it runs (+27% CPU for --help when moved up)",
    "kernels/ops.py": "the op table's import is cheap (no torch); kernel folders load on demand",
    "plugin/kvcache.py": "reads the plugin's active set (r9k.plugin._active) when the engine is ready: a name "
                         "register() rebinds, which an import at the top would freeze at None",
}
#: Files run by path (``python registry/provenance.py``), not as a module: absolute imports only.
SCRIPTS = {"registry/provenance.py": "scripts/gpu.sh runs it by path on the GPU machine"}
#: Third-party packages whose import is a start-up cost (seconds for vLLM and torch).
HEAVY = {"torch", "triton", "vllm", "textual", "rich", "scipy", "matplotlib", "transformers", "tokenizers",
         "safetensors", "fastapi", "numpy", "pytest", "pydantic", "tomlkit"}
#: Project files that count as heavy though their top level imports none of HEAVY, and why.
HEAVY_FILES = {
    "registry/plainmodel.py": "the schema's classes: checking an item imports pydantic (every load of a registry "
                              "not checked before), so what imports the schema stays where it was (in functions)",
}


def folders(root: Path) -> list[str]:
    """The folders ``setup.py`` maps under the namespace (its ``FOLDERS`` dict)."""
    tree = ast.parse((root / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "FOLDERS" for t in node.targets):
            return sorted(ast.literal_eval(node.value).values())
    raise SystemExit("setup.py has no FOLDERS")


def module_parts(root: Path, path: Path) -> list[str]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def package_parts(root: Path, path: Path) -> list[str]:
    parts = module_parts(root, path)
    return parts if path.name == "__init__.py" else parts[:-1]


class Tree:
    """The project's modules and the graph of their top-level imports."""

    def __init__(self, root: Path):
        self.root = root
        self.folders = folders(root)
        self.files = sorted(p for f in self.folders for p in (root / f).rglob("*.py") if "__pycache__" not in p.parts)
        self.by_module = {".".join(module_parts(root, p)): p for p in self.files}
        self.edges: dict[Path, set[Path]] = {}
        self.third: dict[Path, set[str]] = {}
        for p in self.files:
            self.edges[p], self.third[p] = self._top_level(p)
        self._heavy: dict[Path, bool] = {}

    def resolve(self, path: Path, node: ast.stmt) -> list[list[str]]:
        """The project modules (as parts, without the namespace) an import statement names; [] if none."""
        out = []
        if isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == NAMESPACE and len(parts) > 1 and parts[1] in self.folders:
                    out.append(parts[1:])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = package_parts(self.root, path)
                base = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
                mod = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == NAMESPACE:
                mod = node.module.split(".")[1:]
            else:
                return []
            if not mod or mod[0] not in self.folders:
                return []
            out.append(mod)
            out += [mod + [a.name] for a in node.names if ".".join(mod + [a.name]) in self.by_module]
        return out

    def files_of(self, mod: list[str]) -> list[Path]:
        """The module's file and the ``__init__.py`` of every package on the way (importing runs them)."""
        return [self.by_module[".".join(mod[:i])] for i in range(1, len(mod) + 1) if ".".join(mod[:i]) in self.by_module]

    def _top_level(self, path: Path) -> tuple[set[Path], set[str]]:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        stmts = []
        for node in tree.body:
            if isinstance(node, ast.Try):
                stmts += node.body
            elif not (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)):
                stmts.append(node)
        edges, third = set(), set()
        for node in stmts:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = self.resolve(path, node)
                for m in mods:
                    edges.update(self.files_of(m))
                if not mods and not getattr(node, "level", 0):
                    names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                    third.update(n.split(".")[0] for n in names)
        edges.discard(path)
        return edges, third

    def heavy(self, path: Path, seen: frozenset = frozenset()) -> bool:
        if path not in self._heavy:
            if path in seen:
                return False
            self._heavy[path] = bool(self.third[path] & HEAVY) or any(
                self.heavy(q, seen | {path}) for q in self.edges[path]) \
                or path.relative_to(self.root).as_posix() in HEAVY_FILES
        return self._heavy[path]

    def reaches(self, start: Path, goal: Path) -> bool:
        todo, seen = [start], set()
        while todo:
            p = todo.pop()
            if p == goal:
                return True
            if p not in seen:
                seen.add(p)
                todo += self.edges.get(p, ())
        return False


def _names(node: ast.stmt) -> str:
    return ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in node.names)


def _relative(path_pkg: list[str], target: list[str]) -> tuple[str, list[str]]:
    common = 0
    while common < min(len(path_pkg), len(target)) and path_pkg[common] == target[common]:
        common += 1
    return "." * (len(path_pkg) - common + 1), target[common:]


def _from_line(dots: str, rest: list[str], names: str) -> str:
    return f"from {dots}{'.'.join(rest)} import {names}"


def _whole_lines(lines: list[str], node: ast.stmt) -> bool:
    """The statement alone on its lines (only indentation before it, at most a comment after it)."""
    before = lines[node.lineno - 1][: node.col_offset]
    after = lines[node.end_lineno - 1][node.end_col_offset:].strip()
    return not before.strip() and (not after or after.startswith("#"))


def relative_edits(tree: Tree, path: Path, src: str) -> list[tuple[int, int, str]]:
    """(first line, last line, new text) for every absolute project import that can be relative."""
    rel = path.relative_to(tree.root).as_posix()
    if rel in SCRIPTS:
        return []
    lines = src.splitlines()
    pkg = package_parts(tree.root, path)
    edits = []
    for node in ast.walk(ast.parse(src, str(path))):
        new = None
        if isinstance(node, ast.ImportFrom) and not node.level and node.module \
                and node.module.split(".")[0] == NAMESPACE and len(node.module.split(".")) > 1 \
                and node.module.split(".")[1] in tree.folders:
            dots, rest = _relative(pkg, node.module.split(".")[1:])
            new = _from_line(dots, rest, _names(node))
        elif isinstance(node, ast.Import) and len(node.names) == 1 and node.names[0].asname:
            parts = node.names[0].name.split(".")
            if parts[0] == NAMESPACE and len(parts) > 1 and parts[1] in tree.folders:
                dots, rest = _relative(pkg, parts[1:-1])
                new = _from_line(dots, rest, f"{parts[-1]} as {node.names[0].asname}") if parts[-1] != node.names[0].asname \
                    else _from_line(dots, rest, parts[-1])
        if new is None or not _whole_lines(lines, node):
            continue
        indent = lines[node.lineno - 1][: node.col_offset]
        tail = lines[node.end_lineno - 1][node.end_col_offset:]
        edits.append((node.lineno, node.end_lineno, indent + new + tail))
    return edits


def _bound_at_top(mod: ast.Module) -> dict[str, str]:
    """Names bound at module level -> a key of what binds them (an import's source, or '<code>')."""
    out: dict[str, str] = {}
    for node in mod.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                out[(a.asname or a.name).split(".")[0]] = _key(node, a)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = "<code>"
        else:
            for t in ast.walk(node):
                if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store):
                    out[t.id] = "<code>"
    return out


def _key(node: ast.stmt, alias: ast.alias) -> str:
    if isinstance(node, ast.ImportFrom):
        return f"{'.' * node.level}{node.module or ''}:{alias.name}"
    return f"import:{alias.name}"


def hoist(tree: Tree, path: Path, src: str, report: list[str]) -> str:
    """Move the in-function project imports of one file to the top (see the module doc); return the source."""
    rel = path.relative_to(tree.root).as_posix()
    if rel in SCRIPTS or any(fnmatch.fnmatchcase(rel, pat) for pat in LAZY):
        return src  # (a script's in-function package imports only run where the package is there)
    mod = ast.parse(src, str(path))
    lines = src.splitlines(keepends=True)
    parents = {c: p for p in ast.walk(mod) for c in ast.iter_child_nodes(p)}
    bound = _bound_at_top(mod)
    candidates: list[ast.stmt] = []
    for node in ast.walk(mod):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or node in mod.body:
            continue
        owner = parents.get(node)
        targets = tree.resolve(path, node)
        if not targets or not isinstance(owner, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if len(owner.body) == 1 or not _whole_lines(src.splitlines(), node) or isinstance(node, ast.Import):
            continue
        files = {f for t in targets for f in tree.files_of(t)} - {path}
        if any(tree.heavy(f) for f in files):
            continue
        if any(tree.reaches(f, path) for f in files):
            report.append(f"{rel}:{node.lineno}: stays in its function (moving it would close an import cycle)")
            continue
        keys = {(a.asname or a.name): _key(node, a) for a in node.names}
        if any(n in bound and bound[n] != k for n, k in keys.items()):
            continue
        candidates.append(node)
    # one binding per name: two functions importing different things under one name both stay
    seen: dict[str, set[str]] = {}
    for node in candidates:
        for a in node.names:
            seen.setdefault(a.asname or a.name, set()).add(_key(node, a))
    candidates = [n for n in candidates if all(len(seen[a.asname or a.name]) == 1 for a in n.names)]
    if not candidates:
        return src
    new_top: dict[str, list[str]] = {}  # "from X" -> names, in first-seen order
    drop: set[int] = set()
    for node in candidates:
        for a in node.names:
            name = a.asname or a.name
            if bound.get(name) != _key(node, a):
                names = new_top.setdefault(f"{'.' * node.level}{node.module or ''}", [])
                text = a.name + (f" as {a.asname}" if a.asname else "")
                if text not in names:
                    names.append(text)
                bound[name] = _key(node, a)
        drop.update(range(node.lineno - 1, node.end_lineno))
        for f in {f for t in tree.resolve(path, node) for f in tree.files_of(t)} - {path}:
            tree.edges[path].add(f)
    # a blank line left right after a def line or a docstring goes too
    for i in sorted(drop):
        if i - 1 in drop:
            continue
        j = i
        while j + 1 in drop:
            j += 1
        prev = lines[i - 1].rstrip() if i else ""
        if j + 1 < len(lines) and not lines[j + 1].strip() and (not prev or prev.endswith(":") or prev.endswith('"""')):
            drop.add(j + 1)
    body = [ln for i, ln in enumerate(lines) if i not in drop]
    at = _insert_line(mod)
    block = [_wrap(f"from {src_mod} import ", sorted(names, key=str.lower)) for src_mod, names in new_top.items()]
    if at is None:
        at = _after_docstring(mod)
        block = ["\n"] + block
    # `at` counts lines of the original file; dropped lines are all below the module's imports
    out = "".join(body[:at] + block + body[at:])
    ast.parse(out, str(path))
    return out


def _wrap(head: str, names: list[str], width: int = 120) -> str:
    one = head + ", ".join(names)
    if len(one) <= width:
        return one + "\n"
    return head + "(\n" + "".join(f"    {n},\n" for n in names) + ")\n"


def _insert_line(mod: ast.Module) -> int | None:
    """The line after the last top-level import that comes before the first definition (0-based)."""
    last = None
    for node in mod.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            break
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not (
                isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            last = node.end_lineno
    return last


def _after_docstring(mod: ast.Module) -> int:
    end = 0
    for node in mod.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            end = node.end_lineno
        elif isinstance(node, ast.ImportFrom) and node.module == "__future__":
            end = node.end_lineno
        else:
            break
    return end


def apply_edits(src: str, edits: list[tuple[int, int, str]]) -> str:
    lines = src.splitlines(keepends=True)
    for first, last, text in sorted(edits, reverse=True):
        lines[first - 1: last] = [text + "\n"]
    return "".join(lines)


def transform(tree: Tree, path: Path, report: list[str]) -> str:
    src = path.read_text(encoding="utf-8")
    out = apply_edits(src, relative_edits(tree, path, src))
    return hoist(tree, path, out, report)


def run(root: Path, apply: bool, only: list[str] | None = None, out=sys.stdout) -> int:
    tree = Tree(root)
    changed, report = [], []
    wanted = {(root / f).resolve() for f in only} if only else None
    for path in tree.files:
        if wanted is not None and path.resolve() not in wanted:
            continue
        src = path.read_text(encoding="utf-8")
        new = transform(tree, path, report)
        if new != src:
            changed.append(path.relative_to(root).as_posix())
            if apply:
                from r9k.registry import fileio  # the one writer (atomic; refuses links out of the folder)

                fileio.atomic_write(path, new, "source file")
    for line in report if not apply else []:
        print(line, file=out)
    for f in changed:
        print(f"{'rewrote' if apply else 'would rewrite'} {f}", file=out)
    return 1 if changed and not apply else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="list what --apply would change; exit 1 if anything")
    mode.add_argument("--apply", action="store_true", help="rewrite the files in place")
    ap.add_argument("files", nargs="*", help="only these files (default: every file of the mapped folders)")
    ap.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    return run(args.root.resolve(), args.apply, args.files or None)


if __name__ == "__main__":
    sys.exit(main())
