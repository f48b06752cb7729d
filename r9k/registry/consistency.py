"""Cross-file consistency of the registry and the profiles: each fault is an error naming both places.

Called from :func:`r9k.registry.validate.validate`: :func:`check_consistency` checks knobs declared twice,
references to models and gate tests that do not exist, release orders and default changes, profile fields
nothing reads and ``serve_args`` that contradict themselves, the TP size or a knob; ``group_cascades`` merges
one fault reported once per profile into one line.
"""
from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path
from typing import Optional

from .errors import Diagnostic
from .loader import Registry, display_path
from .resolve import scope_matches, suggest
from .vllm_interface import serve_options
from .ledger import repo_root, test_file

# vLLM arguments that a profile's own fields set: serve_args must not set them differently.
_TP_ARGS = ("--tensor-parallel-size", "-tp")


def _loc(d: tuple) -> str:
    f, ln = d[0], d[1]
    return f"{f}:{ln}" if f and ln else (f or "?")


# ------------------------------------------------------------------------------- where a value was set

#: Layers a user writes: a value of one of them that overrides another's is shown with the one it overrode.
USER_LAYERS = ("profile", "environment", "override")


def _release_change(reg: Registry, rs, r) -> Optional[tuple]:
    """(file, line, col) of the release's default change that gave ``r`` its value: the last change of its knob,
    at or before the release the chain extends, to that value."""
    order = reg.release_order()
    if rs.release not in order:
        return None
    v = r.variant
    for ver in reversed(order[:order.index(rs.release) + 1]):
        changes = reg.releases[ver].default_changes
        for i in reversed(range(len(changes))):
            ch = changes[i]
            if ch.knob != v.knob or not scope_matches(reg, ch.tp, rs.model, rs.tp):
                continue
            try:
                to = v.normalize(ch.to)
            except ValueError:
                continue
            if to == r.value:
                return reg.locate("release", ver, ("default_changes", i, "to"))
            return None  # the last change of this knob set another value: the value is not a release's
    return None


def _profile_key_where(reg: Registry, rs, r) -> Optional[tuple]:
    """(file, line, col) of the profile key that set ``r`` (its file and line are the origin's), with its column."""
    for name in reversed(rs.chain):
        prof = reg.profiles.get(name)
        if prof is None:
            continue
        for key in prof.knobs:
            found = reg.find_variant(key)
            if found is not None and found.id == r.variant.id:
                f, ln, col = reg.locate("profile", name, ("knobs", key))
                if (f, ln) == (r.origin.file, r.origin.line):
                    return f, ln, col
    return None


def value_where(reg: Registry, rs, r) -> tuple:
    """(file, line, col) of the layer that set a resolved value: the profile's key, ``<command line>:1:COL``
    for ``--set``, the release's default change, the variant's line; (None, None, None) otherwise."""
    o = r.origin
    if o.layer == "override":
        line = rs.command_line
        return line.set_where(o.key) if line is not None else (None, None, None)
    if o.layer == "environment":
        return None, None, None
    if o.layer == "profile" and o.line:
        return _profile_key_where(reg, rs, r) or (o.file, o.line, None)
    if o.layer == "release":
        return _release_change(reg, rs, r) or (o.file, o.line, None)
    return o.file, o.line, None


def layer_text(rs, origin, value) -> str:
    """One layer as the user wrote it: ``--set R9K_X=1``, ``environment R9K_X=1``, ``profile p (file:line)``,
    ``release v0.3.2``, ``the registry default (file:line)``."""
    if origin.layer == "override":
        line = rs.command_line
        typed = line.set_text(origin.key) if line is not None else None
        return typed or f"--set {origin.key}={value}"
    if origin.layer == "environment":
        return f"environment {origin.key}={value}"
    if origin.layer == "profile" and origin.file and not origin.line and origin.detail:  # the panel's
        return f"an {origin.detail} of profile {Path(origin.file).stem} (not saved to {origin.file} yet)"
    if origin.layer == "profile":
        return f"profile {Path(origin.file).stem if origin.file else origin.detail} ({origin})"
    if origin.layer == "release":
        return origin.detail or "the release"
    return f"the registry default ({origin})"


def set_by(rs, r) -> str:
    """`` (set by X, overriding Y)`` for a value a user's layer set where no file line says so, or that
    overrides another user layer's; else ''."""
    if r.origin.layer not in USER_LAYERS:
        return ""
    prev = [(o, v) for o, v in r.history if o.layer in USER_LAYERS and v != r.value]
    if r.origin.layer == "profile" and not prev and (r.origin.line or not r.origin.detail):
        return ""  # a file's key: its location says it all (an unsaved edit in the panel has no line: said)
    text = f" (set by {layer_text(rs, r.origin, r.value)}"
    if prev:
        o, v = prev[-1]
        text += f", overriding {r.variant.knob}={v if v is not None else ''} of {layer_text(rs, o, v)}"
    return text + ")"


def tp_where(reg: Registry, rs) -> tuple:
    """(file, line, col) of what set the TP size: ``--tp``, or the ``tp`` key of the chain's profile that sets it."""
    if rs.tp_from == "--tp":
        line = rs.command_line
        return line.option_where("--tp") if line is not None else (None, None, None)
    if rs.tp_from in reg.profiles:
        return reg.locate("profile", rs.tp_from, ("tp",))
    return None, None, None


def tp_text(rs) -> str:
    """``--tp 2`` or ``tp = 4 in profile p``."""
    if rs.tp_from == "--tp":
        line = rs.command_line
        return (line.option_text("--tp") if line is not None else None) or f"--tp {rs.tp}"
    return f"tp = {rs.tp} in profile {rs.tp_from}" if rs.tp_from else f"TP {rs.tp} (no profile sets tp)"


def check_consistency(reg: Registry, report) -> None:
    _knobs(reg, report)
    _model_refs(reg, report)
    _gate_tests(reg, report)
    _releases(reg, report)
    _profiles(reg, report)


# ------------------------------------------------------------------------------------------ knobs


def _knobs(reg: Registry, report) -> None:
    seen: dict[str, tuple[str, str]] = {}  # knob (upper case) -> (variant id, "knob" | "also_knobs")
    for vid, v in reg.variants.items():
        for field, names in (("knob", [v.knob]), ("also_knobs", v.also_knobs)):
            for name in names:
                key = name.upper()
                if key in seen and seen[key][0] != vid:
                    other, ofield = seen[key]
                    first = reg.locate("variant", other, (ofield,))
                    report.add(Diagnostic("error", "duplicate-knob",
                                          f"variant '{vid}' declares knob {name} ({field}), which variant '{other}' "
                                          f"declares already ({ofield}, at {_loc(first)})",
                                          *reg.locate("variant", vid, (field,)), [vid, other, name]))
                elif key in seen and field == "also_knobs" and seen[key][1] == "knob":
                    report.add(Diagnostic("error", "duplicate-knob", f"variant '{vid}' lists its own knob {name} in "
                                          "also_knobs", *reg.locate("variant", vid, ("also_knobs",)), [vid, name]))
                else:
                    seen.setdefault(key, (vid, field))


# ------------------------------------------------------------------------------------ references


def _models_file(reg: Registry) -> str:
    return display_path(Path(reg.root) / "models.toml")


def _model_refs(reg: Registry, report) -> None:
    if not reg.models:
        return  # one error for the whole registry: group_cascades
    known = set(reg.models)
    for vid, v in reg.variants.items():
        for field, names in (("models", v.models), ("excluded_models", v.excluded_models),
                             ("model_defaults", list(v.model_defaults))):
            for name in names:
                if name not in known:
                    report.add(Diagnostic("error", "unknown-model", f"variant '{vid}' {field} names unknown model "
                                          f"'{name}' (models are declared in {_models_file(reg)})",
                                          *reg.locate("variant", vid, (field,)), [vid, name],
                                          hint=suggest(name, known)))


_DEF_RE = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)|^\s*class\s+(\w+)", re.M)


def _test_functions(path: Path, cache: dict) -> Optional[set]:
    """Names of the functions and classes a test file defines (None when it cannot be read)."""
    if path not in cache:
        from . import fileio

        try:
            text = fileio.read_text(path, "test file")
        except fileio.FileError:
            cache[path] = None
        else:
            cache[path] = {a or b for a, b in _DEF_RE.findall(text)}
    return cache[path]


def missing_gate_tests(reg: Registry, variants=None) -> dict[str, list[Diagnostic]]:
    """Variant id -> an error per declared gate test that does not exist (``variants``: ids; default all)."""
    out: dict[str, list[Diagnostic]] = {}
    for vid in (reg.variants if variants is None else variants):
        found = reg.cached(("missing_gate_tests", vid), lambda vid=vid: _missing_gate_tests(reg, vid))
        if found:
            out[vid] = found
    return out


def _missing_gate_tests(reg: Registry, vid: str) -> list[Diagnostic]:
    v = reg.variants[vid]
    if not v.gate:
        return []
    root = repo_root(reg)
    if not (root / "pyproject.toml").is_file():
        return []  # a registry tree kept apart from the code it describes (no checkout): nothing to check against
    cache = reg.cached("test_functions", dict)  # test file -> the names it defines
    out: list[Diagnostic] = []
    for tid in v.gate.tests:
        rel = test_file(tid)
        path = root / rel
        def where():
            return reg.locate("variant", vid, ("gate", "tests"))
        if not path.is_file():
            out.append(Diagnostic("error", "unknown-test", f"variant '{vid}' gate test '{tid}': no file {rel}",
                                  *where(), [vid]))
            continue
        names = _test_functions(path, cache)
        for name in tid.split("[", 1)[0].split("::")[1:]:  # parameters may hold "::" themselves
            if names is not None and name not in names:
                out.append(Diagnostic("error", "unknown-test", f"variant '{vid}' gate test '{tid}': {rel} has no "
                                      f"test '{name}'", *where(), [vid], hint=suggest(name, names)))
                break
    return out


def _gate_tests(reg: Registry, report) -> None:
    """A missing gate test of a default-on variant is an error of the registry; of another variant, of the
    profiles that switch it on (:func:`check_resolved`)."""
    for vid, diags in missing_gate_tests(reg).items():
        if reg.variants[vid].status.state == "default-on":
            for d in diags:
                report.add(d)


# ------------------------------------------------------------------------------------------ releases


def _releases(reg: Registry, report) -> None:
    dates = {ver: _dt.date.fromisoformat(rel.date) for ver, rel in reg.releases.items()}  # schema.Release checked them
    looped: set[str] = set()
    for ver, rel in reg.releases.items():
        prev = rel.previous
        if prev and prev in reg.releases and dates[prev] > dates[ver]:
            f, ln, col = reg.locate("release", ver, ("previous",))
            pf, pl, _ = reg.locate("release", prev, ("date",))
            report.add(Diagnostic("error", "release-order", f"release {ver} ({rel.date}) names {prev} as its previous "
                                  f"release, but {prev} is dated later ({reg.releases[prev].date}, at {pf}:{pl})",
                                  f, ln, col, [ver, prev]))
        # a loop in the chain
        seen, cur = [ver], prev
        if prev == ver:
            looped.add(ver)
        while cur and cur in reg.releases:
            if cur in seen:
                looped.add(ver)
                report.add(Diagnostic("error", "release-order", f"release chain loops: {' -> '.join(seen + [cur])}",
                                      *reg.locate("release", ver, ("previous",)), [ver]))
                break
            seen.append(cur)
            cur = reg.releases[cur].previous
    # previous must be the release just before by date
    if len(reg.releases) > 1:
        # within one lineage: the original's releases follow each other; this project's extend one of them
        order = [v for v in reg.release_order() if not reg.releases[v].project]
        for i, ver in enumerate(order):
            rel = reg.releases[ver]
            want = order[i - 1] if i else None
            if rel.previous and rel.previous in reg.releases and want and rel.previous != want \
                    and dates[rel.previous] <= dates[ver] and ver not in looped:
                f, ln, col = reg.locate("release", ver, ("previous",))
                report.add(Diagnostic("error", "release-order", f"release {ver} names {rel.previous} as its previous "
                                      f"release, but by date the one before it is {want}", f, ln, col,
                                      [ver, rel.previous, want]))
    primary = next((m for m in reg.models.values() if m.primary), None)
    scopes = {"all"} | {m.scope for m in reg.models.values() if m.scope} | \
        {f"tp{n}" for n in (primary.tp_sizes if primary else [])}
    for ver, rel in reg.releases.items():
        for i, ch in enumerate(rel.default_changes):
            if reg.models and ch.tp.strip().lower() not in scopes:  # it would silently apply to nothing
                report.add(Diagnostic("error", "unknown-scope", f"release {ver} scopes its change of {ch.knob} to "
                                      f"{ch.tp!r}, which names no model scope or TP size of the primary model "
                                      f"(known: {', '.join(sorted(scopes))})",
                                      *reg.locate("release", ver, ("default_changes", i, "tp")), [ver],
                                      hint=suggest(ch.tp, sorted(scopes))))
                continue
            v = reg.find_variant(ch.knob)
            if v is None:
                continue  # validate's unknown-knob
            try:
                v.normalize(ch.to)
            except ValueError as exc:
                report.add(Diagnostic("error", "bad-value", f"release {ver} changes the default of {ch.knob} to "
                                      f"{ch.to!r}, which is not a legal value: {exc} (allowed: {v.allowed_text()})",
                                      *reg.locate("release", ver, ("default_changes", i, "to")), [ver, v.id]))


# ------------------------------------------------------------------------------------------ profiles


def _profiles(reg: Registry, report) -> None:
    owned = {}  # vllm argument -> knob that sets it
    for v in reg.variants.values():
        if v.sets and v.sets.kind == "vllm-arg" and v.sets.name:
            owned[v.sets.name] = v.knob
    for name, prof in reg.profiles.items():
        if prof.gpu_memory_utilization is not None:
            f, ln, col = reg.locate("profile", name, ("gpu_memory_utilization",))
            util = owned.get("--gpu-memory-utilization", "UTIL")
            report.add(Diagnostic("error", "unused-field", f"profile '{name}': gpu_memory_utilization is not used by "
                                  f"any launch; set the {util} knob under [knobs] instead (it is what reaches vllm "
                                  f"serve --gpu-memory-utilization)", f, ln, col, [name]))
        if not prof.serve_args:
            continue
        f, ln, col = reg.locate("profile", name, ("serve_args",))
        opts = serve_options(prof.serve_args)
        seen: dict[str, Optional[str]] = {}
        for _, opt, val in opts:
            if opt in seen and seen[opt] != val:
                report.add(Diagnostic("error", "serve-args", f"profile '{name}': serve_args set {opt} twice "
                                      f"({seen[opt]!r} and {val!r})", f, ln, col, [name]))
            seen.setdefault(opt, val)
            if opt in _TP_ARGS and prof.tp is not None and val is not None and val != str(prof.tp):
                report.add(Diagnostic("error", "serve-args", f"profile '{name}': serve_args has {opt} {val}, but the "
                                      f"profile's tp is {prof.tp} (set tp only)", f, ln, col, [name]))
            elif opt in _TP_ARGS and prof.tp is None:
                report.add(Diagnostic("error", "serve-args", f"profile '{name}': set the TP size with tp = N, not "
                                      f"{opt} in serve_args (the resolver and the budget read tp)", f, ln, col, [name]))
            if opt == "--model":
                report.add(Diagnostic("error", "serve-args", f"profile '{name}': serve_args sets --model; use "
                                      "model_path", f, ln, col, [name]))


def check_resolved(reg: Registry, rs, report) -> None:
    """Per resolved profile: gate tests of the variants it switches on that do not exist; serve_args that
    set a vLLM argument a knob of the set also sets."""
    if not rs.chain:
        return
    switched = [r for r in rs.active() if r.variant.status.state != "default-on"]
    missing = missing_gate_tests(reg, [r.variant.id for r in switched])
    for r in switched:
        if r.variant.id in missing:
            for d in missing[r.variant.id]:
                report.add(Diagnostic(d.level, d.code, d.message + f" (profile '{rs.profile}' switches it on)",
                                      d.file, d.line, d.col, d.items + [rs.profile]))
    if not rs.serve_args:
        return

    emitted = {}
    for r in rs.items.values():
        s = r.variant.sets
        if s is None or s.kind != "vllm-arg" or r.value in (None, "") or r.value == r.variant.stock:
            continue
        emitted[s.name] = r
    where = None
    for name in reversed(rs.chain):  # the profile whose serve_args are used
        prof = reg.profiles.get(name)
        if prof is not None and prof.serve_args:
            where = reg.locate("profile", name, ("serve_args",))
            break
    for _, opt, val in serve_options(rs.serve_args):
        r = emitted.get(opt)
        if r is not None and val != r.value:
            report.add(Diagnostic("error", "serve-args", f"profile '{rs.profile}': serve_args has {opt} {val}, but "
                                  f"{r.variant.knob}={r.value} ({r.layer}: {r.source}) sets {opt} {r.value}; set "
                                  f"one of them", *(where or (None, None, None)), [rs.profile, r.variant.id]))


def budget_diagnostics(reg: Registry, rs, b, errors: list) -> list[Diagnostic]:
    """The memory budget's errors, each naming the knob (or field), its value and where it was set."""
    from .memory import KVMEM_KNOB, UTIL_KNOB, fmt_bytes

    name = rs.profile
    out = []

    def knob_where(knob: str):
        for r in rs.items.values():
            if r.variant.knob == knob:
                return r, value_where(reg, rs, r)
        return None, (None, None, None)

    def hardware_where():
        for pname in reversed(rs.chain):
            prof = reg.profiles.get(pname)
            if prof is not None and prof.hardware is not None:
                return reg.locate("profile", pname, ("hardware", "memory_gib_per_gpu"))
        return reg.origins.get(("profile", name), (None, None)) + (None,)

    files = [reg.origins.get(("profile", p), (None,))[0] for p in rs.chain]

    def nearness(where) -> int:
        """How near the named profile a place is: the command line, its own file, its parents', then the rest."""
        f = where[0]
        if f == "<command line>":
            return len(files) + 1
        return files.index(f) + 1 if f in files and where[1] else 0

    for exc in errors:
        knob = getattr(exc, "knob", "?")
        if knob.startswith("kv_bytes_per_token"):
            f, ln, col = reg.locate("model", rs.model, tuple(knob.split(".")))
        elif knob.startswith("hardware."):
            f, ln, col = hardware_where()
        elif knob in rs.extra_env:  # a variable of the profile's [env] (VLLM_CPU_KVCACHE_SPACE)
            f, ln, col = env_where(reg, rs, knob)
        else:
            r, (f, ln, col) = knob_where(knob)
            if r is not None and not ln:
                exc = f"{exc} (from {r.layer}: {r.source})"
            elif r is not None:
                exc = f"{exc}{set_by(rs, r)}"
        out.append(Diagnostic("error", "memory", f"profile '{name}': {exc}", f, ln, col, [name, knob]))
    if b is None:
        return out
    costs = [c.variant for c in b.costs]
    if b.fixed_kv_bytes is None and b.kv_tokens <= 0:
        r, (f, ln, col) = knob_where(UTIL_KNOB)
        user_set = r is not None and r.layer not in ("registry", "release")
        # a memory cost set nearer than the GPU's size (a --set, or a knob of the profile over its parent's
        # [hardware]) is what the user just changed: point there first (the largest such cost)
        typed = sorted(((c.bytes, knob_where(c.knob)) for c in b.costs if c.bytes > 0), key=lambda x: -x[0])
        typed = [w for _, w in typed if w[0] is not None and w[0].layer in ("override", "profile") and w[1][1]
                 and nearness(w[1]) >= max(nearness(hardware_where()), 1)]
        lead = ""
        src = (set_by(rs, r) or f" ({r.layer}: {r.source})") if user_set else ""
        if typed and not (user_set and r.layer == "override"):
            (r2, (f, ln, col)) = typed[0]
            cost = next(c.bytes for c in b.costs if c.knob == r2.variant.knob)
            lead = f"{r2.variant.knob}={r2.value}{set_by(rs, r2)} costs {fmt_bytes(cost)}; "
        elif not (ln and user_set):  # the GPU's size is what the profile says: point there
            f, ln, col = hardware_where()
        out.append(Diagnostic("error", "memory", f"profile '{name}' does not fit: {lead}{b.memory_bytes / (1 << 30):g} GiB a "
                              f"GPU at {UTIL_KNOB}={b.utilization:g}{src} leaves {fmt_bytes(b.memory_bytes * b.utilization)}; "
                              f"weights {fmt_bytes(b.weights)}, overhead {fmt_bytes(b.overhead)} and variants "
                              f"{fmt_bytes(b.variant_bytes)} leave no room for the KV cache", f, ln, col,
                              [name] + costs))
    elif b.fixed_kv_bytes is not None and b.headroom < 0:
        r, (f, ln, col) = knob_where(KVMEM_KNOB)
        if r is not None and r.value:
            what = f"{KVMEM_KNOB}={r.value}" + (f" (from {r.layer}: {r.source})" if not ln else set_by(rs, r))
        else:  # the CPU backend's KV space, from the profile's [env]
            cpu = "VLLM_CPU_KVCACHE_SPACE"
            what, (f, ln, col) = f"{cpu}={rs.extra_env.get(cpu, '?')}", env_where(reg, rs, cpu)
        if nearness(hardware_where()) > nearness((f, ln)):  # the GPU's size was set nearer: the fault is there
            f, ln, col = hardware_where()
        out.append(Diagnostic("error", "memory", f"profile '{name}' does not fit: {what} asks for a KV cache of "
                              f"{fmt_bytes(b.fixed_kv_bytes)}, {fmt_bytes(-b.headroom)} more than is left of "
                              f"{b.memory_bytes / (1 << 30):g} GiB a GPU at {UTIL_KNOB}={b.utilization:g}", f, ln, col,
                              [name] + costs))
    return out


# ------------------------------------------------------------------------------------------ grouping


def _group_unknown_releases(diags: list[Diagnostic], reg: Optional[Registry]) -> list[Diagnostic]:
    """A missing release named many times is one error; with no release at all, one at releases/."""
    unknown = [d for d in diags if d.code == "unknown-release" and d.items]
    if reg is None or len(unknown) < 2:
        return diags
    by_name: dict[str, list[Diagnostic]] = {}
    for d in unknown:
        by_name.setdefault(d.items[-1], []).append(d)
    merged: dict[int, Diagnostic] = {}
    drop: set[int] = set()
    if not reg.releases:
        folder = Path(reg.root) / "releases"
        first = unknown[0]
        merged[id(first)] = Diagnostic("error", "no-releases", f"{'no release is declared here' if folder.is_dir() else 'this folder does not exist'}, but the registry names {len(by_name)} release(s) {len(unknown)} times ({', '.join(sorted(by_name))})", display_path(folder), None, None, sorted(by_name))
        drop = {id(d) for d in unknown}
    else:
        for name, ds in by_name.items():
            if len(ds) < 2:
                continue
            first = ds[0]
            who = sorted({d.items[0] for d in ds})
            merged[id(first)] = Diagnostic(
                "error", "unknown-release", f"unknown release '{name}' is named {len(ds)} times ({', '.join(who[:6])}"
                f"{', ...' if len(who) > 6 else ''}); there is no releases/{name}.toml", first.file, first.line,
                first.col, who + [name])
            drop |= {id(d) for d in ds}
    out = []
    for d in diags:
        if id(d) in merged:
            out.append(merged[id(d)])
        elif id(d) not in drop:
            out.append(d)
    return out


def group_cascades(report, reg: Optional[Registry]) -> None:
    """One fault, one message: the same message at the same place for another profile merges into the
    first; "unknown model" everywhere in a registry without models is one error at ``models.toml``."""
    diags = report.diagnostics
    if reg is not None and not reg.models:
        unknown = [d for d in diags if d.code == "unknown-model"]
        if unknown:
            profs = sorted({Path(d.file).stem for d in unknown if d.file})
            exists = (Path(reg.root) / "models.toml").exists()
            merged = Diagnostic("error", "no-models",
                                f"{'no model is declared in this file' if exists else 'this file does not exist'}, "
                                f"but {len(profs) or len(unknown)} profile(s) name a model"
                                + (f" ({', '.join(profs)})" if profs else ""),
                                _models_file(reg), 1 if exists else None, 1 if exists else None, profs)
            diags = [d for d in diags if d.code != "unknown-model"]
            diags.insert(0, merged)
    diags = _group_unknown_releases(diags, reg)
    out: list[Diagnostic] = []
    at: dict[tuple, Diagnostic] = {}
    also: dict[int, list[str]] = {}
    profiles = set(reg.profiles) if reg is not None else set()
    names_re = re.compile(r"\b(" + "|".join(sorted(map(re.escape, profiles), key=len, reverse=True)) + r")\b") \
        if profiles else None

    def generic(msg: str) -> str:  # the message with profile names blanked: the same fault in another profile
        return names_re.sub("*", msg) if names_re else msg

    for d in diags:
        key = (d.level, d.code, d.file, d.line, d.col, generic(d.message))
        if d.file and d.line and key in at:
            first = at[key]
            extra = [i for i in d.items if i not in first.items]
            first.items.extend(extra)
            also.setdefault(id(first), []).extend(i for i in extra if i in profiles)
            continue
        if d.file and d.line:
            at[key] = d
        out.append(d)
    for d in out:
        more = also.get(id(d))
        if more:
            d.message += f" (the same fault for profile(s) {', '.join(more)})"
    report.diagnostics[:] = out


def env_where(reg, rs, name: str) -> tuple:
    for prof_name in reversed(rs.chain):  # the profile of the chain that sets it
        prof = reg.profiles.get(prof_name)
        if prof is not None and name in prof.env:
            return reg.locate("profile", prof_name, ("env", name))
    return reg.locate("profile", rs.profile) if rs.profile in reg.profiles else (None, None, None)
