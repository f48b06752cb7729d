#!/usr/bin/env python3
"""Generate the vLLM interface description (``registry/vllm/<major.minor>.json``) from vLLM itself.

The ``vllm serve`` parser's actions (built as vLLM's CLI builds it), the variables of ``vllm/envs.py`` (read as
source, checked against the installed ``vllm.envs``), the custom ops and the backend enums:

    .venv/bin/python scripts/vllm_interface.py --out registry/vllm/0.32.json              # the installed vLLM
    .venv/bin/python scripts/vllm_interface.py --src /tmp/v033/src --out registry/vllm/0.33.json   # a wheel's sources

With ``--src`` the sources are imported from DIR ahead of any installed vLLM; third-party modules they import
and this environment lacks are replaced by empty stand-ins (listed in the output's ``generated.stubbed``).
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
        # instances call, iterate (empty) and test false: enough for a third-party module's module-level uses
        return type(name, (), {"__init__": lambda s, *a, **k: None, "__call__": lambda s, *a, **k: None,
                               "__iter__": lambda s: iter(()), "__bool__": lambda s: False})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on ``sys.meta_path``: stubs a module no other finder has when a file of SRC imports it (not vLLM's
    platform detection, which must see the real machine)."""

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
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    top = FlexibleArgumentParser(prog="vllm")
    sub = top.add_subparsers(dest="subparser")
    return ServeSubcommand().subparser_init(sub)


def _type_of(t) -> dict:
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
        fields = {f.name: f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
                  for f in (dataclasses.fields(cls) if cls is not None and dataclasses.is_dataclass(cls) else ())}
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
    return next((unit for suffix, unit in (("_bytes", "bytes"), ("_gb", "GiB"), ("_gib", "GiB"), ("_mb", "MiB"),
                                           ("_utilization", "fraction"), ("_seconds", "s"), ("_s", "s"), ("_ms", "ms"))
                 if dest.endswith(suffix)), None)


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
    """(usable member names, the enum's name) when ``EngineArgs.<dest>`` is an enum the parser leaves a string
    (``--attention-backend``); a member without a value (``CUSTOM``) is not usable. None for other flags."""
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
        d = {"options": list(a.option_strings), "dest": a.dest, "action": kind, "nargs": a.nargs,
             "required": bool(a.required)}
        if a.option_strings:
            d.update(_type_of(a.type) if kind not in ("storetrue", "storefalse", "booleanoptional", "enabledisable",
                                                      "help", "version", "count", "storeconst") else {"type": "bool"})
        else:
            d.update(_type_of(a.type))
            d["positional"] = True
        if a.choices is not None:
            d["choices"] = [str(_jsonable(c)) for c in a.choices]
        elif names := _enum_names(a.dest):  # the parser takes any string; vLLM refuses a name its enum cannot use
            d["names"], d["names_from"] = names
        d["default"] = _jsonable(a.default) if d.get("type") != "json" else None
        d["deprecated"] = a in getattr(parser, "_deprecated", ())
        d["help"] = (a.help or "").strip().split("\n\n")[0][:400]
        if u := _unit(a.dest):
            d["unit"] = u
        flags.append(d)
    return flags


# --- the variables ------------------------------------------------------------------------------------

def describe_envs(envs_py: Path) -> tuple[dict[str, dict], dict[str, str]]:
    """(the variables vLLM reads, the removed ones with vLLM's own hint: ``removed_environment_variables``)."""
    tree = ast.parse(envs_py.read_text(encoding="utf-8"))
    removed: dict[str, str] = {}
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
        if target == "removed_environment_variables" and isinstance(value, ast.Dict):  # vLLM >= 0.34
            for k, v in zip(value.keys, value.values):
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    try:
                        removed[k.value] = str(ast.literal_eval(v))
                    except ValueError:
                        removed[k.value] = ast.unparse(v)[:300]
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
    return {name: {**read[name], **annotated.get(name, {})} for name in sorted(read)}, removed


# --- what chooses kernels without being a flag or a variable: custom ops and the backend enums ------------

def describe_custom_ops(pkg: Path) -> dict[str, str]:
    """Every ``@CustomOp.register("name")`` of the sources: op name -> the file that registers it."""
    out: dict[str, str] = {}
    for f in sorted(pkg.rglob("*.py")):
        text = f.read_text(encoding="utf-8", errors="replace")
        if "tests" in f.relative_to(pkg).parts or "CustomOp.register(" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "register"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "CustomOp" and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                out.setdefault(node.args[0].value, str(f.relative_to(pkg.parent)))
    return dict(sorted(out.items()))


#: enum class -> the file (under vllm/) that defines it: the names ``--attention-backend`` and ``--mamba-backend`` take
ENUMS = {"AttentionBackendEnum": "v1/attention/backends/registry.py",
         "MambaAttentionBackendEnum": "v1/attention/backends/registry.py",
         "MambaBackendEnum": "config/mamba.py"}


def describe_enums(pkg: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for cls, rel in ENUMS.items():
        f = pkg / rel
        if not f.exists():
            continue
        for node in ast.parse(f.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and node.name == cls:
                out[cls] = [t.id for st in node.body if isinstance(st, ast.Assign)
                            for t in st.targets if isinstance(t, ast.Name) and t.id.isupper()]
    return out


# --- the declared switches (registry/variants/vllm.toml) from the descriptions -------------------------

MARK = "# ---- generated by scripts/vllm_interface.py --switches from registry/vllm/*.json: do not edit below ----"
#: knobs are at most 26 characters (the control panel's table, notes/vllm-switches.md): the few longer names
KNOB_ALIASES = {"dual_chunk_rotary_embedding": "OP_DUAL_CHUNK_ROPE", "minimax_text01_rmsnorm_tp": "OP_MINIMAX_RMSNORM_TP",
                "sparse_attn_indexer_kpool": "OP_SPARSE_INDEXER_KPOOL",
                "mla_decode_concat_quant_fp8": "OP_MLA_DECODE_CONCAT_FP8",
                "enable_rocm_aiter_gemm_warmup": "KERNEL_AITER_GEMM_WARMUP",
                "VLLM_FLASHINFER_ALLREDUCE_BACKEND": "FLASHINFER_AR_BACKEND",
                "VLLM_ROCM_USE_AITER_FP4_ASM_GEMM": "AITER_FP4_ASM_GEMM", "mixer2_gated_rms_norm": "OP_MIXER2_GATED_RMS_NORM",
                "VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS": "AITER_FUSION_SHARED_EXPERT",
                "VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION": "AITER_UNIFIED_ATTENTION",
                "VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER": "BLOCKSCALE_FP8_FLASHINFER",
                "VLLM_MXFP4_EMULATION_DEQUANT_AT_LOAD": "MXFP4_EMULATION_DEQUANT"}
AREA = {"attention": "attention", "gdn": "attention", "moe": "moe", "linear": "quant", "comm": "comm"}


def _switch_of(v: dict) -> str | None:
    sets = v.get("sets") or {}
    if "vllm" not in v:
        return None
    k, n = sets.get("kind"), sets.get("name")
    return {"kernel-config": f"--kernel-config {n}", "custom-op": f"custom op {n}"}.get(k, n)


def _knob(sw) -> str:
    base = sw.name.split()[-1]
    if base in KNOB_ALIASES:
        return KNOB_ALIASES[base]
    if sw.kind == "custom-op":
        k = "CUSTOM_OP_" + base.upper()
        return k if len(k) <= 26 else "OP_" + base.upper()
    if sw.kind == "kernel-config":
        return "KERNEL_" + base.upper().removeprefix("ENABLE_")
    if sw.kind == "vllm-arg":
        return base.lstrip("-").replace("-", "_").upper()
    return base if len(base) <= 26 else base.removeprefix("VLLM_")


def _checked_knob(sw) -> str:
    k = _knob(sw)
    if len(k) > 26:
        raise SystemExit(f"{sw.name}: knob {k} is longer than 26 characters: add it to KNOB_ALIASES")
    return k


def _platforms(sw) -> list[str]:
    n = sw.name
    if "ROCM" in n or "AITER" in n:
        return ["rocm"]
    if "_CPU_" in n:
        return ["cpu"]
    if any(x in n for x in ("DEEP_GEMM", "FLASHINFER", "SYMM_MEM", "MARLIN")) or n == "VLLM_GDN_DECODE_KERNEL":
        return ["cuda"]
    return []


def _range(present: list[str], shipped: list[str]) -> str:
    """The version clause of the shipped versions that have it (contiguous)."""
    if present == shipped:
        return ""
    i, j = shipped.index(present[0]), shipped.index(present[-1])
    lo = f">={present[0]}" if i > 0 else ""
    hi = f"<{shipped[j + 1]}" if j + 1 < len(shipped) else ""
    return ",".join(c for c in (lo, hi) if c)


def _q(x) -> str:
    return json.dumps(x, ensure_ascii=False)


def _union(seen) -> list:
    return list(dict.fromkeys(x for _ver, sw in reversed(seen) for x in (sw.values or ())))


def _generated(seen, shipped) -> list[str]:
    """The lines of the generated variant of one switch (``seen``: its (version, switch) in version order)."""
    sw = seen[-1][1]
    knob = _checked_knob(sw)
    op = sw.name[10:]  # a custom op's name after "custom op "
    what = {"custom-op": f"--compilation-config custom_ops +{op} / -{op}: vLLM's kernel (+) "
                         "or the native torch path (-)",
            "kernel-config": f"{sw.name}: a field of vLLM's kernel config",
            "vllm-arg": f"vLLM's {sw.name}", "vllm-env": f"vLLM's variable {sw.name}"}[sw.kind]
    if sw.help and sw.kind != "custom-op":
        what += ": " + sw.help.split(". ")[0].rstrip(".")
    summary = what[:200].replace('"', "'").replace("\\", "/")
    defaults: dict = {}
    for ver, x in seen:
        unset = "as custom_ops all/none" if sw.kind == "custom-op" else "unset: vLLM decides"
        defaults.setdefault(x.default if x.default is not None else unset, []).append(ver)
    default = "; ".join(f"{d} ({', '.join(vs)})" if len(defaults) > 1 else d for d, vs in defaults.items())
    # the id: at most 26 characters, like the knob (tables at 80 columns keep both whole)
    lines = ["[[variant]]", f'id = "{knob.lower()}"', f'knob = "{knob}"', f'summary = "{summary}"',
             'category = "launcher"', f'area = "{AREA.get(sw.decides, "other")}"']
    union = _union(seen)
    if sw.type == "enum" and union:
        lines += ['type = "enum"', f"choices = {_q(union)}"]
    else:
        lines.append(f'type = "{"bool" if sw.type == "bool" else "string"}"')
    lines += ["allow_unset = true", 'stock = ""', 'since = "v0.3.2-r9k.1"', "", "[variant.status]", 'state = "opt-in"',
              'reason = "vLLM\'s own switch: vLLM decides unless a profile or release sets it"', "", "[variant.sets]",
              f'kind = "{sw.kind}"']
    names = {"custom-op": [f'name = "{op}"'], "kernel-config": [f'name = "{sw.name.split()[-1]}"', 'encode = "bool"']}
    lines += names.get(sw.kind, [f'name = "{sw.name}"'])
    lines += ["", "[variant.implementation]", 'extension_point = "env-only"', "", "[variant.vllm]"]
    rng = _range([ver for ver, _ in seen], shipped)
    if rng:
        lines.append(f'versions = "{rng}"')
    plats = _platforms(sw)
    if plats:
        lines.append(f"platforms = {_q(plats)}")
    src = {"vllm-env": "vllm/envs.py", "custom-op": sw.help.removeprefix("registered in "),
           "kernel-config": "vllm/config/kernel.py (KernelConfig)", "vllm-arg": "vllm serve's parser"}[sw.kind]
    return lines + [f'decides = "{sw.decides}"', f"source = {_q(src)}",
                    f"default = {{ {plats[0] if len(plats) == 1 else 'all'} = {_q(default)} }}", ""]


def generate_switches(toml_path: Path) -> tuple[str, int, int]:
    """(the vLLM-switch file, hand-declared, generated): its hand part (above :data:`MARK`) with each declared
    enum switch's ``choices`` and version range set from the shipped versions, then one variant per other switch."""
    import tomllib

    from r9k.registry.vllm_interface import load, versions

    text = toml_path.read_text(encoding="utf-8")
    hand = text.split("\n" + MARK)[0].rstrip("\n") + "\n"
    declared = {_switch_of(v): v for v in tomllib.loads(hand).get("variant", [])}
    shipped = versions()
    by_name: dict = {}
    for ver in shipped:
        for sw in load(ver).kernel_switches():
            by_name.setdefault(sw.name, []).append((ver, sw))
    for name, seen in by_name.items():  # a hand entry's choices: the union over versions, the newest order first
        v = declared.get(name)
        if v is None or v.get("type") != "enum" or seen[-1][1].values is None:
            continue
        union = _union(seen)
        block = re.search(r'^id = "%s"\n(?:(?!\[\[variant\]\]).*\n)*?choices = \[.*\]$' % re.escape(v["id"]), hand, re.M)
        if block:
            start = block.end() - len(block.group(0).splitlines()[-1])
            hand = hand[:start] + f"choices = {_q(union)}" + hand[block.end():]
    for name, v in declared.items():  # a hand entry's version range: the shipped versions that have it
        if name not in by_name:
            continue
        rng = _range([ver for ver, _ in by_name[name]], shipped)
        m = re.search(r'^id = "%s"\n(?:(?!\[\[variant\]\]).*\n)*?\[variant\.vllm\]\n(versions = .*\n)?' % re.escape(v["id"]),
                      hand, re.M)
        if m:
            line = f'versions = "{rng}"\n' if rng else ""
            a = m.start(1) if m.group(1) else m.end()
            b = m.end(1) if m.group(1) else m.end()
            hand = hand[:a] + line + hand[b:]
    out = [hand, MARK, "# One variant per switch of registry/vllm_interface.Interface.kernel_switches that the hand part",
           "# above does not declare: values, types, defaults and version ranges from each version's description.", ""]
    generated = [name for name in sorted(by_name) if name not in declared]
    out += ["\n".join(_generated(by_name[name], shipped)) for name in generated]
    return "\n".join(out).rstrip("\n") + "\n", len(declared), len(generated)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", help="a directory holding vllm/ (a wheel's unpacked Python sources); default: installed")
    ap.add_argument("--out", help="the JSON file to write")
    ap.add_argument("--switches", metavar="TOML", help="instead: rewrite the vLLM-switch variants file "
                    "(registry/variants/vllm.toml) from the shipped descriptions (no vLLM import)")
    a = ap.parse_args(argv)
    if a.switches:
        from r9k.registry import fileio

        text, hand, gen = generate_switches(Path(a.switches))
        fileio.atomic_write(Path(a.switches), text, "vLLM switch variants")
        print(f"{a.switches}: {hand} declared by hand, {gen} generated")
        return 0
    if not a.out:
        ap.error("--out is required (or --switches)")
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
    envs, removed = describe_envs(pkg / "envs.py")
    if not a.src:  # the installed vLLM: its own table must agree with the source reading
        import vllm.envs as live

        missing = set(live.environment_variables) ^ set(envs)
        if missing:
            sys.exit(f"vllm.envs and the AST reading of envs.py disagree on: {sorted(missing)}")
    data = {"format": FORMAT, "vllm_version": re.sub(r"\+.*$", "", version),
            "generated": {"by": "scripts/vllm_interface.py", "from": "sources" if a.src else "installed",
                          "stubbed": sorted(stub.stubbed) if stub else []},
            "flags": flags, "envs": envs, "removed_envs": removed, "custom_ops": describe_custom_ops(pkg),
            "enums": describe_enums(pkg)}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    from r9k.registry import fileio  # the one writer: a FIFO, folder or a link out of its folder is refused

    fileio.atomic_write(out, json.dumps(data, indent=1, sort_keys=False) + "\n", "vLLM interface file")
    print(f"{out}: vLLM {data['vllm_version']}: {len(flags)} serve actions, {len(envs)} variables, "
          f"{len(data['custom_ops'])} custom ops")
    return 0


if __name__ == "__main__":
    sys.exit(main())
