"""Where the project writes files: an AST scan of registry/, plugin/, r9kctl/ and scripts/ (test_every_writer
checks its findings against the list of writers it drives and the few raw writes it allows, each with why)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("registry", "plugin", "r9kctl", "scripts")
#: The one writer's entry points (registry/fileio.py).
FILEIO_WRITERS = {"atomic_write", "atomic_append", "update", "open_for_writing", "move_into_place"}
#: Calls that write, create, replace or link a file whatever they are called on.
ANY_WRITE_ATTRS = {"write_text", "write_bytes", "touch", "rename", "symlink_to", "hardlink_to", "mkfifo", "mknod"}
#: Calls that write when called on these modules.
MODULE_WRITES = {"os": {"replace", "rename", "renames", "link", "symlink", "mkfifo", "mknod", "truncate"},
                 "shutil": {"copy", "copy2", "copyfile", "copytree", "move", "copyfileobj"},
                 "tempfile": {"mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryDirectory", "TemporaryFile",
                              "SpooledTemporaryFile"},
                 "json": {"dump"}, "pickle": {"dump"}, "tomlkit": {"dump"}, "marshal": {"dump"}}
_WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"}


def _mode(call: ast.Call, pos: int):
    if len(call.args) > pos:
        return call.args[pos]
    for kw in call.keywords:
        if kw.arg == "mode":
            return kw.value
    return None


def _writes_by_mode(node) -> bool:
    """An open mode that writes (or one that is not a constant: it may)."""
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return any(c in node.value for c in "wax+")
    return True


def _name(func) -> tuple[str, str]:
    """(receiver name or '', called name)."""
    if isinstance(func, ast.Name):
        return "", func.id
    if isinstance(func, ast.Attribute):
        recv = func.value
        return (recv.id if isinstance(recv, ast.Name) else "<expr>"), func.attr
    return "", ""


def _kind(call: ast.Call, fileio_names: set[str]):
    recv, name = _name(call.func)
    if (recv in ("fileio", "profile_io") and name in FILEIO_WRITERS) or (not recv and name in fileio_names):
        return "fileio." + ({v: k for k, v in fileio_names_map.items()}.get(name, name) if not recv else name)
    if name == "open" and not recv and _writes_by_mode(_mode(call, 1)):
        return "open"
    if name == "fdopen" and recv == "os" and _writes_by_mode(_mode(call, 1)):
        return "os.fdopen"
    mode0 = _mode(call, 0)
    if name == "open" and recv not in ("os", "") and isinstance(mode0, ast.Constant) and _writes_by_mode(mode0):
        return ".open"  # Path.open("w")
    if name == "open" and recv == "os":
        flags = {n.attr for n in ast.walk(call) if isinstance(n, ast.Attribute)} | \
                {n.id for n in ast.walk(call) if isinstance(n, ast.Name)}
        return "os.open" if flags & _WRITE_FLAGS else None
    if name in ANY_WRITE_ATTRS and isinstance(call.func, ast.Attribute):
        return "." + name
    if recv in MODULE_WRITES and name in MODULE_WRITES[recv]:
        return f"{recv}.{name}"
    return None


fileio_names_map: dict[str, str] = {}


def scan() -> dict[tuple[str, str, str], int]:
    """(file, enclosing function, kind of write) -> number of calls, for every write call outside fileio.py."""
    found: dict[tuple[str, str, str], int] = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "registry/fileio.py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), rel)
            names = set()
            fileio_names_map.clear()
            for node in ast.walk(tree):  # `from ..registry.fileio import atomic_write as _w`
                if isinstance(node, ast.ImportFrom) and (node.module or "").endswith(("fileio", "profile_io")):
                    for a in node.names:
                        if a.name in FILEIO_WRITERS:
                            names.add(a.asname or a.name)
                            fileio_names_map[a.name] = a.asname or a.name

            def visit(node, where):
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        visit(child, f"{where}.{child.name}" if where else child.name)
                        continue
                    if isinstance(child, ast.Call):
                        kind = _kind(child, names)
                        if kind:
                            key = (rel, where or "<module>", kind)
                            found[key] = found.get(key, 0) + 1
                    visit(child, where)

            visit(tree, "")
    return found
