"""Resolving a profile into the active set: one value per variant, each with its provenance.

Layers, lowest first: ``registry`` (the variant's default at this model and TP size, or stock), ``release``
(the defaults of the release the profile chain extends), ``profile`` (each of the ``extends`` chain, base
first), ``environment`` (variables named like a knob), ``override`` (``--set KNOB=VALUE``). Problems are
collected as located :class:`Diagnostic` objects on the result (:func:`resolve` never raises for them);
``rs.ok`` is False when any is an error.
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

from . import envvars
from .errors import Diagnostic
from .loader import Registry, default_registry_root
from .origin import Origin, WithOrigin
from .manifest import shape_problem as manifest_problem
from .schema import ModelSpec, Profile, Variant
from . import manifest
from .availability import adapters_path

LAYERS = ("registry", "release", "profile", "environment", "override")


@dataclass
class Resolved(WithOrigin, manifest.StockRule):
    variant: Variant
    value: Optional[str]  # canonical string; None = not set (the implementation's own default)
    origin: Origin  # where the value came from (rendered by str(origin): see registry/origin.py)
    history: list[tuple[Origin, Optional[str]]] = field(default_factory=list)  # (origin, value) overridden, oldest first

    def override(self, value: Optional[str], origin: Origin) -> None:
        """A higher layer sets the value: the current one goes to the history."""
        self.history.append((self.origin, self.value))
        self.value, self.origin = value, origin


@dataclass
class ResolvedSet:
    profile: str
    model: Optional[str]
    tp: int
    platform: Optional[str]
    release: Optional[str]  # the release the chain extends (None for 'stock')
    chain: list[str]  # profile names, base first
    items: dict[str, Resolved]
    extra_env: dict[str, str]
    serve_args: list[str]
    model_path: Optional[str]
    hardware: Optional[dict]
    gpu_memory_utilization: Optional[float]
    strict: bool = False
    diagnostics: list[Diagnostic] = field(default_factory=list)
    registry_root: Optional[object] = None  # the registry tree it was resolved from (a Path)
    tp_from: Optional[str] = None  # who set the TP size: "--tp" (the caller), a profile's name, None (default 1)
    command_line: Optional[object] = None  # the cmdline.CommandLine of --set / --tp, when they were typed

    @property
    def ok(self) -> bool:
        return not any(d.level == "error" for d in self.diagnostics)

    # The manifest's lookups, one definition for both sets (they need only ``items`` of ``variant`` and ``value``).
    value = manifest.Manifest.value
    non_stock = manifest.Manifest.non_stock
    hash = manifest.Manifest.hash

    def active(self) -> list[Resolved]:
        return [r for r in self.items.values() if r.active]

    def env(self) -> dict[str, str]:
        """Environment variables to export: every knob with a value that the plugin or vLLM reads (not launcher
        knobs: the launcher turns them into vLLM's flags), then the profile's extra env."""
        out = {r.variant.knob: r.value for r in sorted(self.items.values(), key=lambda r: r.variant.knob)
               if r.value not in (None, "") and r.variant.category != "launcher"}
        out.update(self.extra_env)
        return out

    def to_manifest(self, warnings=(), gates=None) -> dict:
        """The manifest of this set, with the fingerprint of the registry it was resolved from."""
        root = self.registry_root or default_registry_root()
        fp = manifest.registry_fingerprint(root, adapters_path())
        return manifest.from_resolved(self, fp, warnings, gates).to_dict()

    @classmethod
    def from_manifest(cls, data: Mapping, reg: Registry) -> "ResolvedSet":
        """Rebuild a resolved set from a manifest, its values re-checked against this registry and its hash;
        ValueError when ``data`` is not a manifest's shape."""
        problem = manifest_problem(data)
        if problem:
            raise ValueError(problem)
        diags: list[Diagnostic] = []
        items: dict[str, Resolved] = {}
        vals = data.get("values", {})
        for vid, v in reg.variants.items():
            entry = vals.get(vid)
            if entry is None:
                diags.append(Diagnostic("error", "manifest", f"manifest has no value for variant '{vid}' "
                                        "(written by another registry?)", items=[vid]))
                continue
            value = entry.get("value")
            if value is not None:
                try:
                    value = v.normalize(value)
                except ValueError as exc:
                    diags.append(Diagnostic("error", "bad-value", f"{v.knob}={value!r} in the manifest: {exc}",
                                            items=[vid]))
            origin = (Origin.from_dict(entry["origin"]) if isinstance(entry.get("origin"), dict)
                      else Origin(entry.get("layer", "override"), detail=entry.get("source", "manifest")))
            items[vid] = Resolved(v, value, origin)
        for vid in vals:
            if vid not in reg.variants:
                diags.append(Diagnostic("error", "manifest", f"manifest names unknown variant '{vid}'", items=[vid]))
        rs = cls(profile=data.get("profile", "?"), model=data.get("model"), tp=int(data.get("tp", 1)),
                 platform=data.get("platform"), release=data.get("release"), chain=list(data.get("chain", [])),
                 items=items, extra_env=dict(data.get("extra_env", {})), serve_args=list(data.get("serve_args", [])),
                 model_path=data.get("model_path"), hardware=data.get("hardware"),
                 gpu_memory_utilization=data.get("gpu_memory_utilization"), strict=bool(data.get("strict")),
                 diagnostics=diags)
        if not diags and data.get("hash") and data["hash"] != rs.hash:
            rs.diagnostics.append(Diagnostic("error", "manifest-hash", f"manifest hash {data['hash']} does not match "
                                             f"its values ({rs.hash}): edited, or written by another registry"))
        return rs


# ------------------------------------------------------------------------------------------ helpers


#: Unknown knobs of one resolve that get a did-you-mean hint (each is a fuzzy match against every name;
#: a profile with 100k unknown knobs still resolves in seconds).
MAX_HINTS = 100


def suggest(name: str, candidates: Iterable[str]) -> Optional[str]:
    """A did-you-mean hint, or None; names that start with what was typed come first."""
    cands = list(candidates)
    prefixed = [c for c in cands if name and c.lower().startswith(name.lower())]
    if prefixed:
        best = difflib.get_close_matches(name.lower(), [c.lower() for c in prefixed], n=1, cutoff=0.0)
        return f"did you mean {next(c for c in prefixed if c.lower() == best[0]) if best else prefixed[0]}?"
    m = difflib.get_close_matches(name, cands, n=1, cutoff=0.6)
    if not m:
        m = difflib.get_close_matches(name.upper(), [c.upper() for c in cands], n=1, cutoff=0.6)
        if m:
            m = [next(c for c in cands if c.upper() == m[0])]
    return f"did you mean {m[0]}?" if m else None


def primary_model(reg: Registry) -> Optional[ModelSpec]:
    """The model marked ``primary`` in models.toml (None if none is)."""
    return next((m for m in reg.models.values() if m.primary), None)


def scope_matches(reg: Registry, scope: str, model: Optional[str], tp: int) -> bool:
    """Whether a release change's scope (``all``, a model's ``scope``, ``tpN``: the primary model at TP N)
    covers ``model`` (None: the primary) at ``tp``."""
    scope = scope.strip().lower()
    if scope == "all":
        return True
    primary = primary_model(reg)
    name = model or (primary.name if primary else None)
    if scope.startswith("tp"):
        return primary is not None and name == primary.name and scope == f"tp{tp}"
    spec = reg.models.get(name) if name else None
    return spec is not None and spec.scope == scope


def value_at_release(reg: Registry, v: Variant, release: str, model: Optional[str], tp: int) -> Optional[str]:
    """The variant's default at ``release``: today's default with every later release's changes undone."""
    order = reg.release_order()
    if release not in order:
        raise KeyError(release)
    idx = order.index(release)
    if v.since and v.since in order and order.index(v.since) > idx:
        return v.stock  # the knob did not exist yet: its stock path ran
    cur = v.default_for(model, tp)
    for later in reversed(order[idx + 1:]):
        for ch in reg.releases[later].default_changes:
            if ch.knob != v.knob or not scope_matches(reg, ch.tp, model, tp):
                continue
            try:
                to = v.normalize(ch.to)
            except ValueError:
                continue
            if cur != to:
                continue
            try:
                cur = v.normalize(ch.from_) if not ch.from_.startswith("(") else v.stock
            except ValueError:
                cur = v.stock
    return cur


def release_credit(reg: Registry, v: Variant, base: str, model: Optional[str], tp: int, value: Optional[str]) -> str:
    """``release X`` for a value a profile takes from release ``base``: a release of this project is named only
    when it set the value (else the release it extends, recursively), e.g.
    ``release v0.3.2-r9k.1 (r9k-stack, extends v0.3.2)``."""
    rel = reg.releases.get(base)
    seen = {base}
    order = reg.release_order()
    while rel is not None and rel.project and rel.previous in reg.releases and rel.previous not in seen:
        newer = v.since in order and order.index(v.since) > order.index(rel.previous)  # no such knob there yet
        if newer or value_at_release(reg, v, rel.previous, model, tp) != value:
            return f"release {base} ({rel.project}, extends {rel.previous})"
        base = rel.previous
        seen.add(base)
        rel = reg.releases[base]
    return f"release {base}"


def profile_chain(reg: Registry, name: str) -> tuple[list[Profile], Optional[str], list[Diagnostic]]:
    """The extends chain of a profile, base first, and the release (or 'stock') at its root."""
    chain: list[Profile] = []
    seen: list[str] = []
    diags: list[Diagnostic] = []
    cur: Optional[str] = name
    base: Optional[str] = None
    while cur is not None:
        if cur in seen:
            file, line, col = reg.locate("profile", seen[-1], ("extends",))
            cycle = " -> ".join(seen + [cur])
            diags.append(Diagnostic("error", "extends-cycle", f"profiles extend each other in a cycle: {cycle}",
                                    file, line, col, seen + [cur]))
            break
        prof = reg.profiles.get(cur)
        if prof is None and cur in reg.profile_problems:
            diags.extend(reg.profile_problems[cur])  # its file does not load: its own located errors
            break
        if prof is None:
            if not seen:
                diags.append(Diagnostic("error", "unknown-profile", f"no profile named '{cur}'", items=[cur],
                                        hint=suggest(cur, reg.profiles) or f"known: {', '.join(sorted(reg.profiles))}"))
            else:
                file, line, col = reg.locate("profile", seen[-1], ("extends",))
                diags.append(Diagnostic("error", "unknown-extends", f"profile '{seen[-1]}' extends '{cur}', which is "
                                        "neither a profile, 'stock' nor 'release:VERSION'", file, line, col,
                                        [seen[-1], cur], hint=suggest(cur, list(reg.profiles) +
                                                                      [f"release:{r}" for r in reg.releases])))
            break
        seen.append(cur)
        chain.append(prof)
        ext = prof.extends
        if ext is None:
            cur = None
        elif ext == "stock":
            base = "stock"
            cur = None
        elif ext.startswith("release:"):
            rel = ext.split(":", 1)[1]
            if rel not in reg.releases:
                file, line, col = reg.locate("profile", prof.name, ("extends",))
                diags.append(Diagnostic("error", "unknown-release", f"profile '{prof.name}' extends unknown release "
                                        f"'{rel}'", file, line, col, [prof.name, rel],
                                        hint=suggest(rel, reg.releases) or f"known: {', '.join(reg.release_order())}"))
            else:
                base = rel
            cur = None
        else:
            cur = ext
    chain.reverse()
    return chain, base, diags


# ------------------------------------------------------------------------------------------ resolve


def resolve(
    reg: Registry,
    profile: str,
    tp: Optional[int] = None,
    env: Optional[Mapping[str, str]] = None,
    sets: Optional[Mapping[str, object]] = None,
    platform: Optional[str] = None,
    strict: Optional[bool] = None,
) -> ResolvedSet:
    """Resolve ``profile`` (at ``tp``, else the profile's TP size) against ``env`` and ``sets``."""
    env = dict(os.environ) if env is None else dict(env)
    command_line = getattr(sets, "command_line", None)  # cmdline.Overrides: where each --set was typed
    sets = dict(sets or {})
    chain, base, diags = profile_chain(reg, profile)

    model = next((p.model for p in reversed(chain) if p.model), None)
    prof_tp = next((p.tp for p in reversed(chain) if p.tp), None)
    tp_from = "--tp" if tp else next((p.name for p in reversed(chain) if p.tp), None)
    tp = int(tp or prof_tp or 1)
    plat = platform or next((p.platform for p in reversed(chain) if p.platform), None)
    hardware = next((p.hardware for p in reversed(chain) if p.hardware), None)
    util = next((p.gpu_memory_utilization for p in reversed(chain) if p.gpu_memory_utilization), None)
    model_path = next((p.model_path for p in reversed(chain) if p.model_path), None)
    strict_flag = bool(strict) if strict is not None else any(p.strict for p in chain) or envvars.STRICT.on(env)
    serve_args: list[str] = []
    extra_env: dict[str, str] = {}
    for p in chain:
        serve_args += p.serve_args
        extra_env.update(p.env)
    if model and model not in reg.models:
        file, line, col = reg.locate("profile", next(p.name for p in reversed(chain) if p.model), ("model",))
        diags.append(Diagnostic("error", "unknown-model", f"unknown model '{model}'", file, line, col, [model],
                                hint=suggest(model, reg.models) or f"known: {', '.join(sorted(reg.models))}"))

    items: dict[str, Resolved] = {}
    release_order = reg.release_order()
    for vid, v in reg.variants.items():
        file, line = reg.origins.get(("variant", vid), ("registry", 0))
        r = Resolved(v, v.default_for(model, tp, plat), Origin("registry", file, line or None))
        if base == "stock":
            r.override(v.stock, Origin("release", detail="stock values (extends = \"stock\")"))
        elif base in reg.releases and base != (release_order[-1] if release_order else None):
            val = value_at_release(reg, v, base, model, tp)
            if val != r.value:
                rfile = reg.origins.get(("release", base), (None, 0))[0]
                r.override(val, Origin("release", rfile, detail=release_credit(reg, v, base, model, tp, val)))
            else:  # the release's value is the registry's default: still the release's
                r.origin = Origin("release", file, line or None, release_credit(reg, v, base, model, tp, val))
        elif base is not None:  # the latest release: its defaults are the registry's
            r.origin = Origin("release", file, line or None, release_credit(reg, v, base, model, tp, r.value))
        items[vid] = r

    unknown: list[int] = [0]

    def apply(key: str, raw: object, origin: Origin, where=(None, None, None), label: Optional[str] = None) -> None:
        source = label or str(origin)
        v = reg.find_variant(key)
        if v is None:
            unknown[0] += 1  # a did-you-mean costs a fuzzy match against every name: the first ones only
            hint = suggest(key, list(reg.knobs()) + list(reg.variants)) if unknown[0] <= MAX_HINTS else None
            diags.append(Diagnostic("error", "unknown-variant", f"unknown knob or variant '{key}' ({source})",
                                    where[0], where[1], where[2], [key], hint=hint))
            return
        try:
            val = v.normalize(raw)
        except ValueError as exc:
            diags.append(Diagnostic("error", "bad-value", f"{v.knob}={raw!r} ({source}): {exc}", where[0], where[1],
                                    where[2], [v.id, v.knob], hint=f"allowed: {v.allowed_text()}"))
            return
        items[v.id].override(val, origin)

    for p in chain:
        seen: dict[str, tuple[str, Optional[int]]] = {}  # variant id -> (the key that set it, its line)
        for key, raw in p.knobs.items():
            file, line, col = reg.locate("profile", p.name, ("knobs", key))
            v = reg.find_variant(key)
            if v is not None and v.id in seen:  # R9K_ROUTER and router_gemm: one knob, set twice
                k0, l0 = seen[v.id]
                diags.append(Diagnostic("error", "duplicate-knob", f"{key} sets knob {v.knob} again: {k0} set it "
                                        f"already (line {l0}); only one of them may stay", file, line, col,
                                        [v.id, p.name]))
                continue
            if v is not None:
                seen[v.id] = (key, line)
            origin = Origin("profile", file, line) if file else Origin("profile", detail=p.name)
            apply(key, raw, origin, (file, line, col))

    declared = reg.knobs()
    for name in sorted(env):
        if name in declared:
            apply(name, env[name], Origin("environment", detail=f"environment {name}", key=name))
        elif name.startswith(envvars.PREFIX) and not envvars.is_control(name):
            diags.append(Diagnostic("error" if strict_flag else "warning", "unknown-env",
                                    f"environment variable {name} looks like a knob but is not declared in the "
                                    "registry; it is ignored", items=[name],
                                    hint=suggest(name, declared)))
    for key, raw in sets.items():
        apply(key, raw, Origin("override", detail=f"--set {key}", key=key),
              *((command_line.set_where(key), command_line.set_text(key)) if command_line else ()))

    return ResolvedSet(profile=profile, model=model, tp=tp, platform=plat, release=base,
                       chain=[p.name for p in chain], items=items, extra_env=extra_env, serve_args=serve_args,
                       model_path=model_path, hardware=hardware.plain() if hardware else None,
                       gpu_memory_utilization=util, strict=strict_flag, diagnostics=diags,
                       registry_root=reg.root, tp_from=tp_from, command_line=command_line)
