#!/usr/bin/env python3
"""Generate the vLLM interface description (``registry/vllm/<major.minor>.json``) from vLLM itself.

Flags: the ``vllm serve`` parser, built the way vLLM's CLI builds it (``FlexibleArgumentParser`` ->
``add_subparsers`` -> ``ServeSubcommand().subparser_init``); every action is read (option strings, dest,
action kind, type, choices, nargs, default, help). JSON-valued flags (``--compilation-config``, ...) also
list the fields of the dataclass their parser builds. Variables: ``vllm/envs.py`` read as source (AST):
the keys of its ``environment_variables`` table (what vLLM reads), the ``TYPE_CHECKING`` annotations (type,
default) and the choices given to ``env_with_choices``; with the installed vLLM the keys are checked against
``vllm.envs.environment_variables`` itself.

    # the installed vLLM (0.32 in .venv):
    .venv/bin/python scripts/vllm_interface.py --out registry/vllm/0.32.json
    # a wheel's Python sources, not installed (pip download vllm==0.33.0 --no-deps -d /tmp/v033;
    # unzip -q /tmp/v033/vllm-0.33.0-*.whl 'vllm/*.py' -d /tmp/v033/src):
    .venv/bin/python scripts/vllm_interface.py --src /tmp/v033/src --out registry/vllm/0.33.json

With ``--src`` the sources are imported from DIR ahead of any installed vLLM; third-party modules that the
sources import and this environment lacks (orjson, ray, ...) are replaced by empty stand-ins, and only those
(the list is recorded in the output's ``generated.stubbed``). Nothing of vLLM's code is copied: the output is
the parser's and the variables' description only.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.abc
import importlib.machinery
import json
import os
import re
import sys
import types
from pathlib import Path

FORMAT = 1


# --- stand-ins for missing third-party modules (only with --src) ---------------------------------------

class _Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__init__": lambda s, *a, **k: None, "__call__": lambda s, *a, **k: None})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on ``sys.meta_path``: reached only for a module no other finder has; stubs it when the import
    statement is in a file of SRC (not vLLM's platform detection, which must see the real machine)."""

    def __init__(self, src: str):
        self.src = src
        self.stubbed: set[str] = set()

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "vllm":
            return None
        f = sys._getframe(1)
        while f is not None and ("importlib" in f.f_code.co_filename or f.f_code.co_filename.startswith("<frozen")):
            f = f.f_back
        caller = f.f_code.co_filename if f is not None else ""
        if not caller.startswith(self.src) or f"{os.sep}platforms{os.sep}" in caller:
            return None
        self.stubbed.add(name)
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return _Stub(spec.name)

    def exec_module(self, module):
        module.__path__ = []


# --- the parser ---------------------------------------------------------------------------------------

def serve_parser():
    """vLLM's ``vllm serve`` parser, constructed as ``vllm``'s CLI main does."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    top = FlexibleArgumentParser(prog="vllm")
    sub = top.add_subparsers(dest="subparser")
    return ServeSubcommand().subparser_init(sub)


def _type_of(t) -> dict:
    """A JSON description of an argparse ``type`` callable."""
    if t is None:
        return {"type": "str"}
    if t in (int, float, str):
        return {"type": t.__name__}
    name = getattr(t, "__name__", type(t).__name__)
    cells = {}
    code = getattr(t, "__code__", None)
    if code is not None and getattr(t, "__closure__", None):
        cells = {n: c.cell_contents for n, c in zip(code.co_freevars, t.__closure__)}
    defaults = getattr(t, "__defaults__", None) or ()
    if name == "_optional_type" and "return_type" in cells:
        d = _type_of(cells["return_type"])
        d["optional"] = True
        return d
    if name == "_parse_type" and "return_type" in cells:
        return _type_of(cells["return_type"])
    if name == "parse_dataclass":
        cls = cells.get("dataclass_cls") or next((d for d in defaults if isinstance(d, type)), None)
        fields = {}
        if cls is not None and dataclasses.is_dataclass(cls):
            for f in dataclasses.fields(cls):
                fields[f.name] = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        return {"type": "json", "config_class": getattr(cls, "__name__", None), "fields": fields}
    if name in ("human_readable_int", "human_readable_int_or_auto"):
        return {"type": "int", "human_readable": True, "auto": name.endswith("auto")}
    if name in ("int", "float", "str"):
        return {"type": name}
    if "json" in name.lower() or name == "loads":
        return {"type": "json"}
    if name == "union_dict_and_str":
        return {"type": "json-or-str"}
    return {"type": "callable", "callable": name}


def _unit(dest: str) -> str | None:
    """The unit a flag's name states (vLLM spells units in its destinations)."""
    for suffix, unit in (("_bytes", "bytes"), ("_gb", "GiB"), ("_gib", "GiB"), ("_mb", "MiB"),
                         ("_utilization", "fraction"), ("_seconds", "s"), ("_s", "s"), ("_ms", "ms")):
        if dest.endswith(suffix):
            return unit
    return None


def _jsonable(v):
    if v is argparse.SUPPRESS:
        return "==SUPPRESS=="
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if hasattr(v, "name") and hasattr(v, "value"):  # an enum
        return str(v.name)
    return repr(v)


def _enum_names(dest: str):
    """(usable member names, the enum's name) when ``EngineArgs.<dest>`` is an enum the parser leaves a string and
    vLLM's config looks up by name (``--attention-backend``: ``AttentionBackendEnum[value.upper()]``); a member without a value (``CUSTOM``: "must be
    registered before use") is not usable. None for every other flag."""
    import enum
    import typing

    from vllm.engine import arg_utils

    f = getattr(arg_utils.EngineArgs, "__dataclass_fields__", {}).get(dest)
    if f is None:
        return None
    t = f.type
    if isinstance(t, str):
        try:
            t = eval(t, vars(arg_utils))  # noqa: S307 - an annotation of vLLM's own dataclass
        except Exception:  # noqa: BLE001 - a name only TYPE_CHECKING imports: not an enum we can read
            return None
    for cls in typing.get_args(t) or (t,):
        if isinstance(cls, type) and issubclass(cls, enum.Enum) and not issubclass(cls, int):
            return [m.name for m in cls if m.value], cls.__name__
    return None


def describe_parser(parser) -> list[dict]:
    flags = []
    for a in parser._actions:
        kind = type(a).__name__.lstrip("_").removesuffix("Action").lower() or "store"
        d = {"options": list(a.option_strings), "dest": a.dest, "action": kind,
             "nargs": a.nargs if not isinstance(a.nargs, int) else a.nargs,
             "required": bool(a.required)}
        if a.option_strings:
            d.update(_type_of(a.type) if kind not in ("storetrue", "storefalse", "booleanoptional", "enabledisable",
                                                      "help", "version", "count", "storeconst") else {"type": "bool"})
        else:
            d.update(_type_of(a.type))
            d["positional"] = True
        if a.choices is not None:
            d["choices"] = [str(_jsonable(c)) for c in a.choices]
        elif _enum_names(a.dest):  # the parser takes any string; vLLM refuses a name its enum cannot use
            d["names"], d["names_from"] = _enum_names(a.dest)
        d["default"] = _jsonable(a.default) if d.get("type") != "json" else None
        d["deprecated"] = a in getattr(parser, "_deprecated", ())
        help_text = (a.help or "").strip()
        d["help"] = help_text.split("\n\n")[0][:400]
        u = _unit(a.dest)
        if u:
            d["unit"] = u
        flags.append(d)
    return flags


# --- the variables ------------------------------------------------------------------------------------

def describe_envs(envs_py: Path) -> dict[str, dict]:
    tree = ast.parse(envs_py.read_text(encoding="utf-8"))
    annotated: dict[str, dict] = {}
    read: dict[str, dict] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    annotated[st.target.id] = {
                        "type": ast.unparse(st.annotation),
                        "default": ast.unparse(st.value) if st.value is not None else None}
        target = None
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target, value = node.target.id, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        if target == "environment_variables" and isinstance(value, ast.Dict):
            for k, v in zip(value.keys, value.values):
                if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                    continue
                entry: dict = {"line": k.lineno}
                if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id.startswith("env_") \
                        and "choices" in v.func.id and len(v.args) >= 3:
                    try:
                        entry["choices"] = [str(c) for c in ast.literal_eval(v.args[2])]
                    except ValueError:
                        entry["choices_from"] = ast.unparse(v.args[2])[:200]
                    entry["list"] = v.func.id != "env_with_choices"
                read[k.value] = entry
    out = {}
    for name in sorted(read):
        e = dict(read[name])
        e.update(annotated.get(name, {}))
        out[name] = e
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", help="a directory holding vllm/ (a wheel's unpacked Python sources); default: installed")
    ap.add_argument("--out", required=True, help="the JSON file to write")
    a = ap.parse_args(argv)
    stub = None
    if a.src:
        src = str(Path(a.src).resolve())
        sys.path.insert(0, src)
        stub = _StubFinder(src + os.sep)
        sys.meta_path.append(stub)
    import vllm

    pkg = Path(vllm.__file__).parent
    if a.src and not str(pkg).startswith(str(Path(a.src).resolve())):
        sys.exit(f"vllm was imported from {pkg}, not from {a.src}")
    version = getattr(vllm, "__version__", None)
    if version is None:
        from vllm import _version  # type: ignore

        version = _version.__version__
    flags = describe_parser(serve_parser())
    envs = describe_envs(pkg / "envs.py")
    if not a.src:  # the installed vLLM: its own table must agree with the source reading
        import vllm.envs as live

        missing = set(live.environment_variables) ^ set(envs)
        if missing:
            sys.exit(f"vllm.envs and the AST reading of envs.py disagree on: {sorted(missing)}")
    data = {"format": FORMAT, "vllm_version": re.sub(r"\+.*$", "", version),
            "generated": {"by": "scripts/vllm_interface.py", "from": "sources" if a.src else "installed",
                          "stubbed": sorted(stub.stubbed) if stub else []},
            "flags": flags, "envs": envs}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    from r9k.registry import fileio  # the one writer: a FIFO, folder or a link out of its folder is refused

    fileio.atomic_write(out, json.dumps(data, indent=1, sort_keys=False) + "\n", "vLLM interface file")
    print(f"{out}: vLLM {data['vllm_version']}: {len(flags)} serve actions, {len(envs)} variables")
    return 0


if __name__ == "__main__":
    sys.exit(main())
