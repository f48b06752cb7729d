"""Validation in two phases: schema (the loader: every file parses and matches, errors located), then
references and semantics (ids, knobs, releases, ``extends`` cycles, values, requires/conflicts, status,
TP and platform support, the memory budget, undeclared ``R9K_`` variables, gate freshness).

Exit codes (``Report.exit_code``): 0 clean, 1 warnings under ``strict``, 2 errors.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from . import availability, manifest
from .manifest import Impl
from .errors import Diagnostic, RegistryError
from .loader import Registry, load_registry
from .memory import Budget, budget
from .resolve import ResolvedSet, primary_model, resolve, scope_matches, suggest
from . import ledger
from .vllm_map import check_caller_env, check_launch_refusals, check_mappings, check_profile_launch
from .vllm_interface import target
from .ledger import platform_matches
from .consistency import (budget_diagnostics, check_consistency, check_resolved, group_cascades, set_by, tp_text,
                          tp_where, value_where)

VERSION_RE = re.compile(r"^v\d+\.\d+\.\d+")


@dataclass
class Report:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    profiles: dict[str, ResolvedSet] = field(default_factory=dict)
    budgets: dict[str, Optional[Budget]] = field(default_factory=dict)
    registry: Optional[Registry] = None
    availability: dict[str, dict] = field(default_factory=dict)  # profile -> variant id -> availability.Decision
    gates: dict[str, str] = field(default_factory=dict)  # profile -> gate summary line (ledger.summary)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.level == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.level == "warning"]

    def exit_code(self, strict: bool = False) -> int:
        if self.errors:
            return 2
        if strict and self.warnings:
            return 1
        return 0

    def add(self, d: Diagnostic) -> None:
        """Append ``d`` unless the same diagnostic is there (a set of keys, rebuilt when the list was changed)."""
        key = (d.level, d.code, d.message, d.file, d.line)
        seen = self.__dict__.get("_seen")
        if seen is None or seen[0] is not self.diagnostics or seen[1] != len(self.diagnostics):
            seen = [self.diagnostics, len(self.diagnostics),
                    {(x.level, x.code, x.message, x.file, x.line) for x in self.diagnostics}]
            self.__dict__["_seen"] = seen
        if key not in seen[2]:
            self.diagnostics.append(d)
            seen[2].add(key)
            seen[1] += 1

    def to_dict(self) -> dict:
        return {
            "ok": not self.errors,
            "errors": [d.to_dict() for d in self.errors],
            "warnings": [d.to_dict() for d in self.warnings],
            "profiles": {
                name: {"hash": rs.hash, "tp": rs.tp, "model": rs.model, "active": len(rs.active()),
                       "budget": self.budgets[name].to_dict() if self.budgets.get(name) else None,
                       "availability": availability_dict(self.availability.get(name, {})),
                       "gates": self.gates.get(name)}
                for name, rs in self.profiles.items()
            },
        }


#: variables that decide which code a process loads (the dynamic loader's, Python's, the shells'): a profile's
#: ``[env]`` may set them, with a warning
CODE_LOADING_ENV = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PATH", "PYTHONPATH", "PYTHONHOME",
                              "PYTHONSTARTUP", "PYTHONUSERBASE", "BASH_ENV", "ENV"})


def availability_dict(decisions: Mapping) -> dict:
    """The per-profile availability report: counts, installed knobs, fallbacks with their reason."""
    c = availability.counts(decisions)
    return {"installed": c[Impl.FUSED], "fallback": c[Impl.FALLBACK], "env_only": c[Impl.ENV],
            "installed_variants": [v.knob for v in decisions.values() if v.state is Impl.FUSED],
            "fallbacks": {v.knob: v.reason for v in decisions.values() if v.state is Impl.FALLBACK}}


# ----------------------------------------------------------------------------------- registry-wide


def check_registry(reg: Registry, report: Report) -> None:
    """References inside the registry: requires/conflicts ids, releases named in histories and
    measurements, knobs named in release files, the release chain."""
    ids = set(reg.variants)
    for vid, v in reg.variants.items():
        for kind in ("requires", "conflicts"):
            for other in getattr(v, kind):
                if other not in ids:
                    report.add(Diagnostic("error", "unknown-reference", f"variant '{vid}' {kind} unknown variant "
                                          f"'{other}'", *reg.locate("variant", vid, (kind,)), [vid, other],
                                          hint=suggest(other, ids)))
        if vid in v.requires and vid in v.conflicts:
            report.add(Diagnostic("error", "self-conflict", f"variant '{vid}' both requires and conflicts with "
                                  "itself", *reg.locate("variant", vid, ("conflicts",)), [vid]))
        for kind, recs in (("history", v.history), ("measured", v.measured)):
            for rec in recs:
                if VERSION_RE.match(rec.release) and rec.release not in reg.releases:
                    report.add(Diagnostic("error", "unknown-release", f"variant '{vid}' {kind} names unknown release "
                                          f"'{rec.release}'", *reg.locate("variant", vid, (kind,)), [vid, rec.release],
                                          hint=suggest(rec.release, reg.releases)))
        if v.since and VERSION_RE.match(v.since) and v.since not in reg.releases:
            f, ln, col = reg.locate("variant", vid, ("since",))
            report.add(Diagnostic("error", "unknown-release", f"variant '{vid}' since unknown release '{v.since}'",
                                  f, ln, col, [vid, v.since]))
    adapters = availability.load_adapters()
    for f, ln, col, msg in adapters.problems:
        report.add(Diagnostic("error", "adapter", msg, f, ln, col))
    for vid, fld, msg in availability.declaration_problems(reg.variants, adapters):
        at = reg.locate("variant", vid, ("implementation", fld) if fld != "gate" else ("gate",))
        report.add(Diagnostic("warning", "undeclared-implementation", f"variant '{vid}': {msg}", *at, [vid]))
    knobs = reg.knobs()
    for ver, rel in reg.releases.items():
        if rel.previous and rel.previous not in reg.releases:
            report.add(Diagnostic("error", "unknown-release", f"release {ver} names unknown previous release "
                                  f"'{rel.previous}'", *reg.locate("release", ver, ("previous",)), [ver]))
        for i, ch in enumerate(rel.default_changes):
            if ch.knob not in knobs:
                report.add(Diagnostic("error", "unknown-knob", f"release {ver} changes the default of unknown knob "
                                      f"'{ch.knob}'", *reg.locate("release", ver, ("default_changes", i, "knob")),
                                      [ver, ch.knob], hint=suggest(ch.knob, knobs)))
    latest = reg.latest_release()
    if latest:
        # The registry's defaults are the latest release's: each of its changes must be visible there.
        primary = primary_model(reg)
        for i, ch in enumerate(reg.releases[latest].default_changes if primary else []):
            v = reg.find_variant(ch.knob)
            if v is None:
                continue
            for tp in primary.tp_sizes:
                if not scope_matches(reg, ch.tp, primary.name, tp):
                    continue
                try:
                    to = v.normalize(ch.to)
                except ValueError:
                    to = ch.to
                have = v.default_for(primary.name, tp)
                if have != to:
                    report.add(Diagnostic("warning", "release-default-mismatch",
                                          f"release {latest} sets {ch.knob}={ch.to} at tp{tp}, but the registry's "
                                          f"default there is {have!r}",
                                          *reg.locate("release", latest, ("default_changes", i)), [v.id, latest]))


# ----------------------------------------------------------------------------------- per profile


def _platform_summary(rs: ResolvedSet, fallbacks: list[Diagnostic], strict: bool) -> list[Diagnostic]:
    """The "cannot run on this platform" diagnostics of a profile: one per variant as warnings; under strict
    mode one line for the profile, so that a real fault is not buried under them."""
    if not strict or len(fallbacks) <= 1:
        return fallbacks
    first = fallbacks[0]
    knobs = ", ".join(d.message.split(":", 1)[0] for d in fallbacks)
    items = list(dict.fromkeys(i for d in fallbacks for i in d.items))
    return [Diagnostic("error", "no-implementation",
                       f"profile '{rs.profile}' is strict and {len(fallbacks)} of its variants cannot run on platform "
                       f"'{rs.platform or 'unknown'}': {knobs} (without strict mode the plugin keeps vLLM's own "
                       f"path for each; `r9kctl validate -p {rs.profile}` lists why)",
                       first.file, first.line, first.col, items)]


def check_profile(reg: Registry, rs: ResolvedSet, report: Report) -> Optional[Budget]:
    for d in rs.diagnostics:
        report.add(d)
    if not rs.chain:
        return None
    name = rs.profile
    items = rs.items
    strict = rs.strict
    decisions = availability.plan(manifest.from_resolved(rs), adapters=availability.load_adapters())
    report.availability[name] = decisions

    if rs.model and rs.model in reg.models and not reg.models[rs.model].supports_tp(rs.tp):
        m = reg.models[rs.model]
        f, ln, col = tp_where(reg, rs)  # the profile of the chain that sets tp, or --tp
        report.add(Diagnostic("error", "unsupported-tp", f"profile '{name}': model '{rs.model}' is not described at "
                              f"TP{rs.tp} ({tp_text(rs)}; known: {', '.join(sorted(m.kv_bytes_per_token))})", f, ln,
                              col, [name]))

    fallbacks: list[Diagnostic] = []
    for vid, r in items.items():
        v = r.variant
        # the layer that set the value (its file, line and column) and " (set by --set K=V, overriding ...)"
        # where that helps: looked up only for a value a check refuses
        def where(r=r) -> tuple:
            return value_where(reg, rs, r)

        def by(r=r) -> str:
            return set_by(rs, r)

        if r.active and v.status.state in ("rejected", "removed") and r.value != v.default_for(rs.model, rs.tp):
            report.add(Diagnostic("error", f"{v.status.state}-variant",
                                  f"{v.knob}={r.value}{by()} switches on {v.status.state} variant '{vid}': "
                                  f"{v.status.reason}", *where(), [vid, name]))
        if r.active and v.supported_tp and rs.tp not in v.supported_tp:
            # the value or the TP size is at fault: the one the user gave last (--tp over a file's value)
            at = tp_where(reg, rs) if rs.tp_from == "--tp" and r.layer != "override" else where()
            report.add(Diagnostic("error", "unsupported-tp", f"{v.knob}={r.value}{by()}: variant '{vid}' supports TP "
                                  f"sizes {v.supported_tp}, not {rs.tp} ({tp_text(rs)})", *at, [vid, name]))
        if r.active and rs.model in reg.models and not v.applies_to(rs.model):
            report.add(Diagnostic("error", "unsupported-model", f"{v.knob}={r.value}{by()}: variant '{vid}' does not apply "
                                  f"to model {rs.model} (applies to: {', '.join(v.models) or 'all but ' + ', '.join(v.excluded_models)})", *where(), [vid, name]))
        av = decisions[vid]
        if av.state is Impl.FALLBACK:
            fallbacks.append(Diagnostic("error" if strict else "warning", "no-implementation",
                                        f"{v.knob}={r.value}{by()}: variant '{vid}' cannot run here: {av.reason}; the "
                                        f"plugin keeps vLLM's own path ({v.knob}={v.stock})", *where(), [vid, name]))
        if r.value is not None and r.active:
            for req in v.requires:
                other = items.get(req)
                if other is None or other.active:
                    continue
                is_switch = v.stock is not None
                if not is_switch and r.layer in ("registry", "release"):
                    continue  # a tuning default left behind by a switched-off fusion: harmless
                report.add(Diagnostic("error" if is_switch else "warning", "requires",
                                      f"profile '{name}': {v.knob}={r.value}{by()} requires variant '{req}' ({other.variant.knob}), which is "
                                      f"{'off' if other.value in (None, '', '0') else 'at ' + repr(other.value)}"
                                      f"{set_by(rs, other)}" + ("" if is_switch else ": it has no effect"), *where(),
                                      [vid, req, name]))
            for con in v.conflicts:
                other = items.get(con)
                if other is not None and other.active:
                    report.add(Diagnostic("error", "conflicts", f"{v.knob}={r.value}{by()} conflicts with "
                                          f"{other.variant.knob}={other.value}{set_by(rs, other)} (variant '{con}')",
                                          *where(), [vid, con, name]))

    for d in _platform_summary(rs, fallbacks, strict):
        report.add(d)

    prof = reg.profiles.get(name)
    if prof:
        knobs = reg.knobs()
        for key in prof.env:
            if key in knobs:
                report.add(Diagnostic("warning", "knob-in-env", f"{key} is a declared knob; set it under [knobs] so it "
                                      "is validated and shows its provenance",
                                      *reg.locate("profile", name, ("env", key)), [key, name]))
            elif key in CODE_LOADING_ENV:
                report.add(Diagnostic("warning", "code-loading-env", f"[env] sets {key}: it changes which code every "
                                      "vLLM process loads; make sure this profile's file comes from someone you trust",
                                      *reg.locate("profile", name, ("env", key)), [key, name]))

    budget_errors: list = []
    b = budget(reg, rs, budget_errors)
    for d in budget_diagnostics(reg, rs, b, budget_errors):  # each names the knob, its value and its line
        report.add(d)
    check_resolved(reg, rs, report)
    _check_gates(reg, rs, report)
    return b


def gate_states(reg: Registry):
    """The ledger's gate states, once per registry object and ledger file version."""
    path = ledger.ledger_path(reg)
    try:
        st = path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None
    return reg.cached(("gate_states", str(path), stamp), lambda: ledger.gate_states(reg))


def _check_gates(reg: Registry, rs: ResolvedSet, report: Report) -> None:
    """The gate rule (registry/ledger.py gate_findings) as warnings (so --strict and strict mode refuse)."""
    try:
        states = gate_states(reg)
    except Exception as exc:  # a broken ledger must not hide the rest of the report
        report.add(Diagnostic("warning", "gate-ledger", f"cannot read the gate ledger: {exc}"))
        return
    for d in getattr(states, "problems", ()):  # one located warning per ledger line skipped
        report.add(d)

    active = [r.variant for r in rs.active()]
    for code, v, key, msg in ledger.gate_findings(active, states, platform=rs.platform):
        report.add(Diagnostic("warning", code, msg, *reg.locate("variant", v.id, key), [v.id, rs.profile]))
    report.gates[rs.profile] = ledger.summary(active, states, rs.platform)


# ----------------------------------------------------------------------------------- entry points


def check_model_ranges(reg, rs, report) -> None:
    """A knob's value bounded by the served model's facts (``[model] ranges``): one located error per value
    outside, at the layer that set it."""
    m = reg.models.get(rs.model) if rs.model else None
    if m is None or not m.ranges:
        return
    for r in rs.items.values():
        rng = m.ranges.get(r.variant.knob)
        if rng is None or r.value in (None, ""):
            continue
        try:
            x = float(r.value)
        except ValueError:
            continue
        if (rng.min is None or x >= rng.min) and (rng.max is None or x <= rng.max):
            continue
        where = value_where(reg, rs, r)
        if where[0] is None:
            where = reg.locate("model", m.name, ("ranges",))
        lo = "" if rng.min is None else f"{rng.min:g}"
        hi = "" if rng.max is None else f"{rng.max:g}"
        own = r.variant.range.min if r.variant.range is not None else None
        takes = "no value" if rng.max is not None and own is not None and rng.max < own else f"{lo}..{hi}"
        report.add(Diagnostic("error", "model-range", f"{r.variant.knob}={r.value}{set_by(rs, r)}: model {m.name} "
                              f"takes {takes} ({rng.basis})", file=where[0], line=where[1], col=where[2],
                              items=[r.variant.id, rs.profile]))


def validate(
    reg: Optional[Registry] = None,
    profile: Optional[str] = None,
    all_profiles: bool = False,
    tp: Optional[int] = None,
    env: Optional[Mapping[str, str]] = None,
    sets: Optional[Mapping[str, object]] = None,
    platform: Optional[str] = None,
    strict: bool = False,
    root: Optional[Path] = None,
    vllm_version: Optional[str] = None,
) -> Report:
    """Validate the registry and one profile (or all); schema errors from loading stop the semantic checks."""
    report = Report()
    if reg is None:
        try:
            reg = load_registry(root)
        except RegistryError as exc:
            for d in exc.diagnostics:
                report.add(d)
            return report
    report.registry = reg
    check_registry(reg, report)
    check_consistency(reg, report)
    if all_profiles or not profile:  # profiles whose files do not load (a profile's own are in its resolve)
        for problems in reg.profile_problems.values():
            for d in problems:
                report.add(d)
    names = sorted(reg.profiles) if all_profiles else ([profile] if profile else [])

    iface, asked = target(vllm_version)  # the vLLM the launch goes to: its flags and variables are the judge
    if iface is None:
        report.add(Diagnostic("warning", "vllm-interface", f"no vLLM interface description for vLLM {asked} ships "
                              "in registry/vllm/: launcher mappings and launches are not checked (generate one: "
                              "scripts/vllm_interface.py)"))
    else:
        check_mappings(reg, report, iface)
    if iface is not None and names:
        check_caller_env(reg, iface, report, env)
    for name in names:
        rs = resolve(reg, name, tp=tp, env=env, sets=sets,
                     platform=platform, strict=strict or None)
        report.profiles[name] = rs
        report.budgets[name] = check_profile(reg, rs, report)
        check_model_ranges(reg, rs, report)
        if iface is not None and not any(d.level == "error" and name in d.items for d in report.diagnostics):
            check_profile_launch(reg, rs, report, iface)
            check_launch_refusals(reg, rs, report, iface, env)
    group_cascades(report, reg)
    return report


def gate_labels(reg: Registry, rs) -> dict[str, str]:
    """Variant id -> its gate's state on the set's platform and where the evidence came from (``fresh (ran
    here)``, ``none on rocm-gfx1201``), for the non-stock variants with gate tests: carried in the manifest."""
    try:
        states = gate_states(reg)
    except Exception:  # noqa: BLE001 - an unreadable ledger is already a validation warning
        return {}
    plat = rs.platform
    out = {}
    for r in rs.non_stock():
        st = states.get(r.variant.id)
        if st is None:
            continue
        state, _ = st.on(plat)
        if plat and not any(platform_matches(p, plat) for p in st.per_platform):
            out[r.variant.id] = f"none on {plat}"
            continue
        ev = [e for p, e in st.evidence.items() if not plat or platform_matches(p, plat)]
        out[r.variant.id] = f"{state} ({'; '.join(dict.fromkeys(ev)) or 'nothing counts'})"
    return out
