"""Launcher knobs -> exactly what vLLM (or the named program) reads, and the check of a launch against the
vLLM interface description (:mod:`registry.vllm_interface`).

A launcher knob's ``[variant.sets]`` declares its :class:`Target` in vLLM. :func:`requests` turns a resolved set into one
:class:`Request` per knob away from stock, :func:`launch_args` into ``vllm serve`` arguments and variables;
:func:`check_mappings` checks every declaration against a vLLM version and :func:`check_launch` a launch's
argv and environment. ``r9kctl validate``, ``r9kctl launch`` and the plugin share them: one decision.
"""
from __future__ import annotations

import difflib
import json
import os
import re
import typing
from dataclasses import dataclass
from typing import Any, Optional

from .errors import Diagnostic
from .manifest import Target  # the same fields as the schema's Target, in plain data
from .vllm_interface import load, target, versions
from .provenance import in_range
from .availability import platform_family
from .consistency import env_where, set_by, value_where

#: (knob unit, vLLM's unit) -> factor. A pair not here is a unit mismatch.
UNIT_FACTORS = {("GiB", "bytes"): 2**30, ("MiB", "bytes"): 2**20, ("GiB", "MiB"): 1024}


def mapping(sets) -> Target:
    """A declared target (schema ``Target`` or the manifest's) with the older spellings normalised."""
    k = sets.kind
    common = dict(encode=sets.encode, unit=sets.unit, target_unit=sets.target_unit, program=sets.program,
                  env=dict(sets.env or {}), path=sets.path, reason=sets.reason)
    if k == "compilation-config":
        common["encode"] = "int-list" if sets.name == "cudagraph_capture_sizes" else common["encode"]
        return Target("json-field", "--compilation-config", field=sets.name, **common)
    if k == "speculative-config":
        common["encode"] = "int"
        return Target("json-field", "--speculative-config", field="num_speculative_tokens",
                       fields={"method": sets.name}, **common)
    if k == "attention-backend":  # the variable vLLM no longer reads: the flag carries the knob's value
        return Target("vllm-arg", "--attention-backend", **common)
    # vLLM's own switches (registry/variants/vllm.toml)
    if k == "kernel-config":
        return Target("json-field", "--kernel-config", field=sets.name, **common)
    if k == "vllm-env":
        common["program"] = "vllm"
        return Target("env", sets.name, **common)
    if k == "custom-op":
        return Target("custom-op", sets.name, field="custom_ops", **common)
    return Target(k, sets.name, field=sets.field, fields=dict(sets.fields or {}), **common)


@dataclass
class Request:
    knob: str
    kind: str  # arg, flag, json, json-list (an entry of a JSON list: custom ops), env, none
    target: str  # "--max-num-seqs", "--compilation-config.cudagraph_mode", "NCCL_PROTO", "container host"
    value: Any  # what is sent (after unit conversion and encoding); None for a bare flag
    knob_value: str
    program: str = "vllm"
    note: str = ""

    def text(self) -> str:
        if self.kind == "arg":
            return f"{self.target} {self.value}"
        if self.kind == "flag":
            return self.target
        if self.kind == "json":
            return f"{self.target}={json.dumps(self.value)}"
        if self.kind == "json-list":
            return f"{self.target} += {json.dumps(self.value)}"
        if self.kind == "env":
            return f"{self.target}={self.value} (read by {self.program})"
        return f"not applied: {self.note}"


def env_pairs(value: str, m: Target) -> dict[str, str]:
    """The variables an ``env`` mapping sets for ``value``: its value map, else NAME=converted value."""
    return dict(m.env.get(value) or {}) if m.env else {m.name: str(convert(value, m))}


def convert(value: str, m: Target) -> Any:
    """The knob's value as vLLM takes it (unit conversion, then encoding). ValueError when impossible."""
    v: Any = value
    if m.unit and m.target_unit and m.unit != m.target_unit:
        factor = UNIT_FACTORS.get((m.unit, m.target_unit))
        if factor is None:
            raise ValueError(f"no conversion from {m.unit} to {m.target_unit}")
        x = float(value) * factor
        if m.encode == "int" and x != int(x):
            raise ValueError(f"{value} {m.unit} is not a whole number of {m.target_unit}")
        v = x
    if m.encode == "int":
        return int(float(v))
    if m.encode == "float":
        return float(v)
    if m.encode == "int-list":
        return [int(x) for x in str(v).split(",") if x.strip()]
    if m.encode == "bool":
        return str(v) == "1"
    return str(v) if not isinstance(v, float) else v


def _active(r) -> bool:
    return not (r.variant.sets is None or r.value in (None, "") or r.value == r.variant.stock)


def _resolved_by_vllm(r, iface) -> bool:
    """A value at stock passed all the same: the target vLLM's option has no default of its own."""
    if iface is None or r.variant.sets is None or r.value in (None, ""):
        return False
    m = mapping(r.variant.sets)
    fl = iface.flag(m.name) if m.kind == "vllm-arg" else None
    return fl is not None and fl.default is None


def negative_option(name: str, iface=None) -> str:
    """The option that turns a boolean flag off: the description's own (``--disable-x``), else ``--no-x``."""
    fl = iface.flag(name) if iface is not None else None
    if fl is not None:
        for o in fl.options:
            if o != name and o.startswith("--") and (o.startswith("--no-") or o.startswith("--disable-")):
                return o
    return "--no-" + name.removeprefix("--")


def requests(rs, iface=None) -> list[Request]:
    """One request per launcher knob away from stock; ``iface``: the target vLLM's description."""
    out: list[Request] = []
    for r in sorted(rs.items.values(), key=lambda r: r.variant.knob):
        if not (_active(r) or _resolved_by_vllm(r, iface)):
            continue
        m, knob, val = mapping(r.variant.sets), r.variant.knob, r.value
        if m.kind == "vllm-arg":
            out.append(Request(knob, "arg", m.name, convert(val, m), val))
        elif m.kind == "vllm-flag":
            if val == "1":
                out.append(Request(knob, "flag", m.name, None, val))
            elif r.variant.stock == "1":  # vLLM's own default is on
                out.append(Request(knob, "flag", negative_option(m.name, iface), None, val))
        elif m.kind == "json-field":
            out.append(Request(knob, "json", f"{m.name}.{m.field}", convert(val, m), val))
            for k, c in sorted(m.fields.items()):
                out.append(Request(knob, "json", f"{m.name}.{k}", c, val, note="constant of the mapping"))
        elif m.kind == "custom-op":  # "+" / "-": one entry of --compilation-config's custom_ops list
            out.append(Request(knob, "json-list", f"--compilation-config.{m.field}", f"{val}{m.name}", val))
        elif m.kind == "env":
            for var, x in sorted(env_pairs(val, m).items()):
                out.append(Request(knob, "env", var, x, val, program=m.program))
        else:
            out.append(Request(knob, "none", m.name, None, val, program=m.name,
                               note=m.reason or f"{m.kind} {m.name}: no program launched here reads it"))
    return out


def launch_args(rs, iface=None) -> tuple[list[str], dict[str, str], list[Request], list[str]]:
    """(vLLM arguments, variables, the requests, conflicts). JSON fields of one flag become one object."""
    reqs = requests(rs, iface)
    args: list[str] = []
    env: dict[str, str] = {}
    objs: dict[str, dict] = {}
    conflicts: list[str] = []
    owner: dict[str, str] = {}
    for q in reqs:
        if q.kind == "arg":
            args += [q.target, str(q.value)]
        elif q.kind == "flag":
            args.append(q.target)
        elif q.kind == "json":
            flag, _, key = q.target.partition(".")
            obj = objs.setdefault(flag, {})
            if key in obj and obj[key] != q.value:
                conflicts.append(f"{q.knob} and {owner[q.target]} both set {q.target} ({q.value!r} vs {obj[key]!r})")
                continue
            obj[key] = q.value
            owner.setdefault(q.target, q.knob)
        elif q.kind == "json-list":  # custom ops: entries of one list, "+op" and "-op" of one op conflict
            flag, _, key = q.target.partition(".")
            lst = objs.setdefault(flag, {}).setdefault(key, [])
            if not isinstance(lst, list):
                conflicts.append(f"{q.knob} adds to {q.target}, which another knob sets whole")
                continue
            if any(e[1:] == q.value[1:] and e != q.value for e in lst):
                conflicts.append(f"{q.knob}: {q.target} has both +{q.value[1:]} and -{q.value[1:]}")
                continue
            lst.append(q.value)
        elif q.kind == "env":
            if q.target in env and env[q.target] != q.value:
                conflicts.append(f"{q.knob} and another knob both set {q.target}")
            env[q.target] = str(q.value)
    for flag in sorted(objs):
        args += [flag, json.dumps(objs[flag], separators=(",", ":"), sort_keys=True)]
    return args, env, reqs, conflicts


# --- checks against a vLLM version ---------------------------------------------------------------------

def mapping_problems(m: Target, iface) -> list[tuple[str, str]]:
    """(field of the sets table, message) for each way ``m`` does not exist in ``iface``'s vLLM."""
    v = iface.version
    out: list[tuple[str, str]] = []
    if m.kind in ("vllm-arg", "vllm-flag", "json-field"):
        fl = iface.flag(m.name)
        if fl is None:
            near = iface.nearest_flag(m.name)
            how = "its parser would take it as an abbreviation of" if iface.abbreviation_of(m.name) else "nearest:"
            out.append(("name", f"{m.name} is not a flag of vLLM {v}" + (f" ({how} {near})" if near else "")))
            return out
        if m.kind == "vllm-flag" and fl.takes_value:
            out.append(("kind", f"{m.name} takes a value in vLLM {v} (declare kind = \"vllm-arg\")"))
        if m.kind == "vllm-arg" and not fl.takes_value:
            out.append(("kind", f"{m.name} takes no value in vLLM {v} (declare kind = \"vllm-flag\")"))
        if m.kind == "json-field":
            if fl.type != "json":
                out.append(("name", f"{m.name} does not take JSON in vLLM {v}"))
            elif fl.fields:
                for k in [m.field] + sorted(m.fields):
                    if k not in fl.fields:
                        near = difflib.get_close_matches(k or "", sorted(fl.fields), n=1)
                        out.append(("field", f"{fl.config_class or m.name} of vLLM {v} has no field {k}"
                                    + (f" (nearest: {near[0]})" if near else "")))
        have = m.target_unit or (m.unit if not m.target_unit else None)
        if fl.unit and fl.unit != (m.target_unit or m.unit):
            out.append(("unit", f"{m.name} takes {fl.unit} in vLLM {v}, the mapping sends "
                        f"{have or 'the knob value unconverted'} (declare unit and target_unit = \"{fl.unit}\")"))
        if m.unit and m.target_unit and m.unit != m.target_unit and (m.unit, m.target_unit) not in UNIT_FACTORS:
            out.append(("unit", f"no conversion from {m.unit} to {m.target_unit}"))
    elif m.kind == "env":
        names = sorted({n for pairs in m.env.values() for n in pairs}) if m.env else [m.name]
        for n in names:
            reads_vllm = n.startswith("VLLM_")
            if reads_vllm and m.program != "vllm":
                out.append(("program", f"{n} is a vLLM variable but the mapping says {m.program} reads it"))
            if m.program == "vllm" and iface.env(n) is None:
                out.append(("name", iface.unknown_env(n)
                            + ("" if reads_vllm else "; a variable for another program names it: program = \"...\"")))
    elif m.kind == "custom-op":
        fl = iface.flag("--compilation-config")
        if fl is None or (fl.fields and m.field not in fl.fields):
            out.append(("kind", f"vLLM {v} has no --compilation-config custom_ops list"))
    elif m.kind == "other":
        out.append(("kind", "kind \"other\" says nothing of who reads the knob: declare its mapping"))
    return out


# --- vLLM's own switches (variants with a [variant.vllm] table) -------------------------------------------

def switch_name(var) -> str:
    """How vLLM spells the switch: ``--moe-backend``, ``--kernel-config enable_jit_warmup``, ``custom op
    rms_norm``, ``VLLM_USE_DEEP_GEMM``."""
    m = mapping(var.sets)
    if m.kind == "json-field":
        return f"{m.name} {m.field}"
    if m.kind == "custom-op":
        return f"custom op {m.name}"
    return m.name


def switch_exists(var, version: Optional[str]) -> bool:
    """Whether vLLM ``version`` has the switch (its declared version range; no range: every version)."""
    sw = var.vllm
    return sw is None or not sw.versions or version is None or in_range(version, sw.versions)


def switch_on_platform(var, platform: Optional[str]) -> bool:
    """Whether the switch acts on ``platform`` (its family among the declared ones; unknown platform: yes)."""
    sw = var.vllm
    fam = platform_family(platform)
    return sw is None or not sw.platforms or fam is None or fam in sw.platforms


def accepted_values(var, iface) -> Optional[list[str]]:
    """The values ``iface``'s vLLM accepts for the switch (the parser's choices, the variable's declared
    choices; a boolean variable: 0/1); None where the description names none (a free string)."""
    m = mapping(var.sets)
    sw = iface.switch(switch_name(var)) if m.kind == "vllm-arg" else None
    if sw is not None:  # a kernel flag: the parser's choices, else the enum its parser converts to
        return list(sw.values) if sw.values is not None else None
    if m.kind in ("vllm-arg", "vllm-flag"):
        fl = iface.flag(m.name)
        return list(fl.choices) if fl is not None and fl.choices is not None else None
    if m.kind == "json-field" and m.name == "--kernel-config":
        # the kernel-config backend fields take the same names as the top-level flags of the same dest
        fl = iface.flag("--" + (m.field or "").replace("_", "-"))
        return list(fl.choices) if fl is not None and fl.choices is not None else None
    if m.kind == "env":
        e = iface.env(m.name)
        if e is not None and e.choices:
            return list(e.choices)
        return ["0", "1"] if e is not None and (e.type or "").startswith("bool") else None
    if m.kind == "custom-op":
        return ["+", "-"]
    return None


def _accepted_anywhere(var) -> tuple[Optional[list[str]], list[str]]:
    """(the values some shipped vLLM version that has the switch accepts, those versions)."""
    union: Optional[list[str]] = None
    have = []
    for ver in versions():
        i = load(ver)
        if i is None or not switch_exists(var, i.version):
            continue
        ok = accepted_values(var, i)
        have.append(ver)
        if ok is not None:
            union = list(dict.fromkeys((union or []) + ok))
    return union, have


def check_switches(reg, report, iface) -> None:
    """Every declared vLLM switch: each declared value is accepted by a shipped vLLM version that has it, and
    an enum switch declares every value they accept (errors); every kernel switch of ``iface``'s vLLM is declared
    (warnings, in a registry that declares vLLM's switches)."""
    names = {}
    for vid, var in sorted(reg.variants.items()):
        if var.vllm is None or var.sets is None:
            continue
        names[switch_name(var)] = vid
        if not switch_exists(var, iface.version):
            continue
        ok, have = _accepted_anywhere(var)
        if ok is None:
            continue
        vals = list(var.choices) if var.type == "enum" else []
        vals += [x for _w, x in var._declared_values()] + list(var.vllm.fast.values())  # fast paths too
        f, ln, col = reg.locate("variant", vid, ("choices",))
        if ln is None:
            f, ln, col = reg.locate("variant", vid)
        for val in dict.fromkeys(vals):
            if val in ("", None) or val in ok:
                continue
            near = difflib.get_close_matches(val, ok, n=1, cutoff=0.5)
            report.add(Diagnostic("error", "vllm-value", f"{var.knob}: no vLLM of {', '.join(have)} accepts "
                                  f"{val!r}" + (f" (did you mean {near[0]!r}?)" if near else ""), file=f, line=ln,
                                  col=col, items=[vid, f"vllm {iface.version}"]))
        missing = [x for x in ok if x not in var.choices] if var.type == "enum" else []
        if missing:
            report.add(Diagnostic("error", "vllm-value", f"{var.knob}: vLLM {', '.join(have)} also accept "
                                  f"{', '.join(missing)}: not declared (regenerate: scripts/vllm_interface.py "
                                  "--switches registry/variants/vllm.toml)", file=f, line=ln, col=col, items=[vid]))
    for sw in iface.kernel_switches() if names else ():  # a registry that declares vLLM's switches: all of them
        if sw.name not in names:
            f, ln, col = reg.locate("variant", next(iter(names.values())))
            report.add(Diagnostic("warning", "vllm-undeclared", f"vLLM {iface.version}'s {sw.name} chooses a kernel "
                                  f"({sw.decides}) and no variant declares it (regenerate: scripts/vllm_interface.py "
                                  "--switches registry/variants/vllm.toml)", file=f, line=1 if f else None, col=1 if f else None,
                                  items=[f"vllm {iface.version}"]))


def check_profile_switches(reg, rs, report, iface) -> None:
    """A profile's vLLM switches away from stock exist in the target vLLM and on its platform (located errors)."""
    for vid, r in sorted(rs.items.items()):
        var = r.variant
        if var.vllm is None or not _active(r):
            continue
        ok = accepted_values(var, iface) if switch_exists(var, iface.version) else None
        bad_value = ok is not None and r.value not in ok
        if switch_exists(var, iface.version) and switch_on_platform(var, rs.platform) and not bad_value:
            continue
        where = value_where(reg, rs, r)  # the layer that set it (a child profile, --set, ...)
        if where[0] is None:
            where = reg.locate("profile", rs.profile) if rs.profile in reg.profiles else (None, None, None)
        said = f"{var.knob}={r.value}{set_by(rs, r)}"
        faults = []
        if not switch_exists(var, iface.version):
            faults.append(("vllm-version", f"{said}: vLLM {iface.version} has no {switch_name(var)} (it exists in vLLM "
                                           f"{var.vllm.versions})"))
        if bad_value:
            near = difflib.get_close_matches(r.value, ok, n=1, cutoff=0.5)
            faults.append(("vllm-value", f"{said}: vLLM {iface.version}'s {switch_name(var)} does not take {r.value!r}"
                           + (f" (did you mean {near[0]!r}?)" if near
                              else f"; it takes {', '.join(ok[:12])}{' ...' if len(ok) > 12 else ''}")))
        if not switch_on_platform(var, rs.platform):
            faults.append(("vllm-platform", f"{said}: {switch_name(var)} does not act on platform {rs.platform} (it "
                                            f"acts on {', '.join(var.vllm.platforms)})"))
        for code, msg in faults:
            report.add(Diagnostic("error", code, msg, *where, [vid, rs.profile]))


def check_mappings(reg, report, iface, only: Optional[set[str]] = None) -> None:
    """Every launcher knob's declared mapping against ``iface`` (a located error each)."""
    for vid, var in sorted(reg.variants.items()):
        if var.sets is None or (only is not None and vid not in only) or not switch_exists(var, iface.version):
            continue
        m = mapping(var.sets)
        for fld, msg in mapping_problems(m, iface):
            f, ln, col = reg.locate("variant", vid, ("sets", fld))
            if ln is None or f is None:
                f, ln, col = reg.locate("variant", vid, ("sets",))
            report.add(Diagnostic("error", "vllm-mapping", f"{var.knob}: {msg}", file=f, line=ln, col=col,
                                  items=[vid, f"vllm {iface.version}"]))
    for vid, var in sorted(reg.variants.items()):  # a launcher knob with no mapping would be silently dropped
        if var.category == "launcher" and var.sets is None and (only is None or vid in only):
            report.add(Diagnostic("error", "vllm-mapping", f"launcher knob {var.knob} declares no mapping "
                                  "([variant.sets]): its value would reach no program",
                                  *reg.locate("variant", vid, ("category",)), [vid]))
    check_switches(reg, report, iface)


def check_launch(reg, rs, report, iface, argv: list[str], env: dict[str, str], reqs=()) -> None:
    """The argv (after ``vllm serve``) and environment of a launch against ``iface``, each fault located at the
    layer that put it there (``reqs``: the launch's requests)."""
    f, ln, col = reg.locate("profile", rs.profile) if rs.profile in reg.profiles else (None, None, None)
    items = [rs.profile, f"vllm {iface.version}"]

    def chain_where(field: str, hit) -> Optional[tuple]:
        for name in reversed(rs.chain):  # the profile that has it (a parent's, when the child inherits it)
            prof = reg.profiles.get(name)
            if prof is not None and hit(prof):
                return reg.locate("profile", name, (field,) if field == "serve_args" else ("env", field))
        return None

    def knob_where(token: str, is_env: bool):
        for q in reqs:
            if q.target == token or (not is_env and q.target.split(".", 1)[0] == token.split(".", 1)[0]
                                     and q.kind in ("json", "json-list", "arg", "flag")):
                r = next((x for x in rs.items.values() if x.variant.knob == q.knob), None)
                if r is not None and r.layer != "registry":
                    w = value_where(reg, rs, r)
                    if w[0] is not None:
                        return w, f"{r.variant.knob}={r.value}{set_by(rs, r) or ' (' + r.source + ')'}: "
        return None, ""

    for p, is_env in [(p, False) for p in iface.parse(argv)] + [(p, True) for p in iface.check_env(env)]:
        where, who = (f, ln, col), ""
        if is_env:
            found = chain_where(p.token, lambda prof: p.token in prof.env) if p.token in rs.extra_env else None
        else:
            found = chain_where("serve_args", lambda prof: p.token in prof.serve_args) if p.token else None
        if found is not None and found[1]:
            where = found
        elif p.token or is_env:
            w, who = knob_where(p.token, is_env)
            where = w or where
        report.add(Diagnostic("error", p.kind, f"profile {rs.profile}: {who}{p.message}", *where, items))


def serve_argv(rs, extra_args: Optional[list[str]] = None,
               iface=None) -> tuple[list[str], dict[str, str], list[Request], list[str]]:
    """(argv after ``vllm serve MODEL``, the variables it adds: launcher knobs' and the profile's ``[env]``,
    requests, conflicts) of a resolved set; the launch path extends it rather than re-deriving it."""
    largs, lenv, reqs, conflicts = launch_args(rs, iface)
    argv: list[str] = []
    if rs.tp > 1:
        argv += ["--tensor-parallel-size", str(rs.tp)]
    argv += list(rs.serve_args) + largs + list(extra_args or [])
    env = exported_env(rs)
    env.update(lenv)
    return argv, env, reqs, conflicts


def exported_env(rs) -> dict[str, str]:
    """The knob variables a launch exports: the env-only knobs' and the profile's ``[env]``."""
    out = dict(rs.env())
    for r in rs.items.values():
        if r.variant.implementation.extension_point not in (None, "env-only"):
            out.pop(r.variant.knob, None)
    return out


def check_profile_launch(reg, rs, report, iface=None, extra_args: Optional[list[str]] = None) -> None:
    """The whole launch check of one resolved set (what ``validate`` runs per profile)."""
    if iface is None:
        iface, asked = target()
        if iface is None:
            report.add(Diagnostic("warning", "vllm-interface", f"no vLLM interface description for vLLM {asked} "
                                  "ships in registry/vllm/: the launch is not checked against its parser (generate "
                                  "one: scripts/vllm_interface.py)", items=[rs.profile]))
            return
    check_profile_switches(reg, rs, report, iface)
    argv, env, _reqs, conflicts = serve_argv(rs, extra_args, iface)
    f, ln, col = reg.locate("profile", rs.profile) if rs.profile in reg.profiles else (None, None, None)
    for c in conflicts:
        report.add(Diagnostic("error", "vllm-mapping", f"profile {rs.profile}: {c}", file=f, line=ln, col=col,
                              items=[rs.profile]))
    check_launch(reg, rs, report, iface, argv, env, _reqs)


def describe(sets) -> str:
    """What a launcher knob's mapping sets, for tables: "vLLM's --max-num-seqs", "vLLM's --compilation-config
    cudagraph_mode", "NCCL_PROTO / NCCL_P2P_DISABLE (read by rccl)", "not applied: <reason>"."""
    m = mapping(sets)
    if m.kind in ("vllm-arg", "vllm-flag"):
        return f"vLLM's {m.name}" + (f" (knob {m.unit} -> {m.target_unit})" if m.unit and m.unit != m.target_unit else "")
    if m.kind == "json-field":
        return f"vLLM's {m.name} {m.field}"
    if m.kind == "env":
        names = sorted({n for pairs in m.env.values() for n in pairs}) if m.env else [m.name]
        return f"{' / '.join(names)} (read by {'vLLM' if m.program == 'vllm' else m.program})"
    if m.kind == "custom-op":
        return f"vLLM's --compilation-config custom_ops +/-{m.name}"
    return f"not applied: {m.reason or m.kind + ' ' + m.name}"


#: The file name of a diagnostic about the caller's environment (its variables have no file of their own).
ENVIRON = "<environment>"
#: Variables the launch derives from the caller's own value rather than replacing it.
MERGED = ("VLLM_PLUGINS",)


def check_knob_files(reg, rs, report) -> None:
    """A launcher knob whose value is a file (``sets.path``) names one that exists here."""
    for r in sorted(rs.items.values(), key=lambda r: r.variant.knob):
        s = r.variant.sets
        if s is None or not s.path or r.value in (None, "") or r.value == r.variant.stock:
            continue
        if not os.path.isfile(os.path.expanduser(r.value)):
            report.add(Diagnostic("error", "missing-file",
                                  f"profile {rs.profile}: {r.variant.knob}={r.value}{set_by(rs, r)}: {s.name} takes a "
                                  "file and there is none at that path here (vLLM would read the value as the text "
                                  "itself); give a path to the file, or set it to \"\" for the checkpoint's own",
                                  *value_where(reg, rs, r), [r.variant.id, rs.profile]))


def _number_problem(value: str, type_: Optional[str]) -> Optional[str]:
    t = (type_ or "").replace(" | None", "")
    if value == "" or t not in ("int", "float"):
        return None
    pattern = r"[-+]?\d+" if t == "int" else r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?"
    return None if re.fullmatch(pattern, value.strip()) else f"vLLM reads it as {t}"


def check_env_values(reg, rs, report, iface) -> None:
    """The profile's ``[env]`` ``VLLM_*`` values parse as the type vLLM reads each as."""
    for name, value in sorted(rs.extra_env.items()):
        e = iface.env(name) if name.startswith("VLLM_") else None
        why = _number_problem(value, e.type) if e is not None else None
        if why:
            f, ln, col = env_where(reg, rs, name)
            report.add(Diagnostic("error", "bad-env-value", f"profile {rs.profile}: [env] {name}={value!r}: {why} "
                                  f"(vLLM {iface.version})", f, ln, col, [rs.profile]))


def _knob_for(reg, name: str) -> str:
    """" (knob ATTN sets --attention-backend now)" when a launcher knob's mapping says it replaces ``name``."""
    for v in reg.variants.values():
        s = v.sets
        if s is not None and s.text and name in s.text and s.name != name:
            return f" (the knob {v.knob} sets {s.name} now: r9kctl launch --set {v.knob}=...)"
    return ""


def check_caller_env(reg, iface, report, environ: Optional[typing.Mapping[str, str]] = None) -> None:
    """``VLLM_*`` variables of the caller's environment (a launch passes them on) that the target vLLM does
    not read or whose value it refuses."""
    environ = os.environ if environ is None else environ
    shell = {k: v for k, v in environ.items() if k.startswith("VLLM_")}
    for p in iface.check_env(shell):
        report.add(Diagnostic("error", "shell-env", f"{p.token}={shell.get(p.token, '')!r} is set in this environment "
                              f"and every launch passes it on: {p.message}; unset it{_knob_for(reg, p.token)}", ENVIRON, 1, 1, []))
    for name, value in sorted(shell.items()):
        e = iface.env(name)
        why = _number_problem(value, e.type) if e is not None else None
        if why:
            report.add(Diagnostic("error", "shell-env", f"{name}={value!r} is set in this environment and every "
                                  f"launch passes it on: {why} (vLLM {iface.version})", ENVIRON, 1, 1, []))


def check_env_conflicts(reg, rs, report, launch_env: typing.Mapping[str, str],
                        environ: Optional[typing.Mapping[str, str]] = None) -> None:
    """A ``VLLM_*`` variable of the caller's environment that the launch sets to another value, located at
    the profile's line."""
    environ = os.environ if environ is None else environ
    for name, value in sorted(launch_env.items()):
        if not name.startswith("VLLM_") or name in MERGED or name not in environ or environ[name] == value:
            continue
        f, ln, col = env_where(reg, rs, name)
        report.add(Diagnostic("error", "shell-env", f"profile {rs.profile} sets {name}={value!r}, this environment "
                              f"has {name}={environ[name]!r}: the launch would replace it; unset it, or set the value "
                              "in the profile", f, ln, col, [rs.profile]))


def check_launch_refusals(reg, rs, report, iface, environ: Optional[typing.Mapping[str, str]] = None) -> None:
    """What a launch or the vLLM it starts would refuse: knob files, ``[env]`` values, conflicting ``VLLM_*``."""
    check_knob_files(reg, rs, report)
    check_env_values(reg, rs, report, iface)
    check_env_conflicts(reg, rs, report, serve_argv(rs, None, iface)[1], environ)
