"""``r9kctl show ID-or-KNOB``: everything the registry knows about one variant."""
from __future__ import annotations

from .common import fail, load
from .output import print_json, table


def add_parser(sub):
    p = sub.add_parser("show", help="show one variant: values, defaults, implementation, gate, history, measurements")
    p.add_argument("variant", help="variant id or knob (e.g. router_gemm or R9K_ROUTER)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=run)
    return p


def gate_state(reg, vid: str):
    """The gate ledger's state for a variant (None: no record), or a line saying the ledger is unreadable."""
    from ..registry import ledger

    try:
        return ledger.gate_states(reg).get(vid)
    except Exception as exc:  # noqa: BLE001 - shown to the user, not hidden
        return f"ledger unreadable: {exc}"


def describe(reg, v) -> list[tuple[str, str]]:
    """(field, text) pairs: the same content for `show` and the control panel's detail pane."""
    from ..registry.effects import changes
    from ..registry.memory import fmt_bytes

    rows: list[tuple[str, str]] = []
    add = lambda k, val: rows.append((k, val)) if val not in (None, "", []) else None
    add("id", v.id)
    add("knob", v.knob + (f" (also {', '.join(v.also_knobs)})" if v.also_knobs else ""))
    add("summary", v.summary)
    add("category / area", f"{v.category} / {v.area}")
    add("values", v.allowed_text())
    add("stock", v.stock if v.stock is not None else "(no stock path: a tuning value)")
    add("defaults", ", ".join(f"{k}={val}" for k, val in sorted(v.defaults.items())))
    for m, d in v.model_defaults.items():
        add(f"defaults ({m})", ", ".join(f"{k}={val}" for k, val in sorted(d.items())))
    for plat, d in sorted(v.platform_defaults.items()):
        add(f"defaults (platform {plat})", ", ".join(f"{k}={val}" for k, val in sorted(d.items())))
    if v.vllm is not None:  # one of vLLM's own switches (registry/variants/vllm.toml)
        add("vLLM versions", v.vllm.versions or "every described version")
        add("vLLM platforms", ", ".join(v.vllm.platforms) or "every platform")
        add("vLLM default", ", ".join(f"{k}: {val}" for k, val in sorted(v.vllm.default.items())))
        add("vLLM decides", f"{v.vllm.decides} (read in {v.vllm.source})")
    if v.models or v.excluded_models:
        add("models", ", ".join(v.models) if v.models else "all but " + ", ".join(v.excluded_models))
    add("status", f"{v.status.state}: {v.status.reason}")
    add("since", v.since)
    impl = v.implementation
    if impl.module:
        add("implementation", f"{impl.module}" + (f" (op {impl.op})" if impl.op else "") + " - this project")
        add("platforms", ", ".join(impl.platforms) if impl.platforms else "(not yet run anywhere)")
    else:
        add("implementation", "external to this project (the knob is exported for it)")
    add("extension point", impl.extension_point)
    if v.original:
        add("original", f"{v.original.repo}: {', '.join(v.original.files)} ({', '.join(v.original.platforms)})")
    if v.memory:
        if v.memory.bytes_per_gpu:
            add("memory", ", ".join(f"{k}: {fmt_bytes(b)} a GPU" for k, b in v.memory.bytes_per_gpu.items()))
        if v.memory.formula:
            add("memory formula", f"{v.memory.formula} (bytes a GPU; the dims are the model's, registry/models.toml)")
        add("memory basis", v.memory.basis)
        add("memory (original)", v.memory.note)
    if v.gate:
        g = v.gate
        add("gate", ", ".join(g.kind) or "-")
        add("gate tests", "\n".join(g.tests))
        add("gate (original tests)", ", ".join(g.original_tests))
        add("gate thresholds", ", ".join(f"{k}={val}" for k, val in g.thresholds.items()))
        add("gate eval", g.eval)
        st = gate_state(reg, v.id)
        if st is not None:
            add("gate state", st.line() if hasattr(st, "line") else str(st))
            if getattr(st, "per_platform", None):
                add("gate by platform", "\n".join(f"{p}: {s} ({st.evidence.get(p, 'nothing counts')})"
                                                   for p, s in st.per_platform.items()))
    add("requires", ", ".join(v.requires))
    add("conflicts", ", ".join(v.conflicts))
    add("history", "\n".join(f"{h.release} {h.tp}: {h.from_} -> {h.to}" + (f" ({h.note})" if h.note else "")
                              for h in v.history))
    add("measured", "\n".join(f"[{m.release}, {m.platform}] {m.metric}: {m.before or '?'} -> {m.after or '?'}"
                               + (f" {m.unit}" if m.unit else "") + (f"  ({m.method})" if m.method else "")
                               + (f"  - {m.note}" if m.note else "") for m in v.measured))
    if v.sets:
        add("sets", f"{v.sets.kind} {v.sets.name}")
    how = "declared" if v.changes else "derived"
    ga = "yes, part of vLLM's compile-cache key" if v.graph_affecting else "no"
    add("changes", f"{', '.join(changes(v))} ({how}; graph-affecting: {ga})")
    add("note", v.note)
    file, line = reg.origins.get(("variant", v.id), (None, None))
    add("declared in", f"{file}:{line}" if file else None)
    return rows


def run(args) -> int:
    from ..registry.resolve import suggest

    reg = load(args)
    v = reg.find_variant(args.variant)
    if v is None:
        hint = suggest(args.variant, list(reg.variants) + list(reg.knobs()))
        return fail(f"unknown variant or knob '{args.variant}'" + (f" ({hint})" if hint else ""), "unknown-variant")
    if args.format == "json":
        d = v.model_dump(mode="json", by_alias=True, exclude_none=True)
        st = gate_state(reg, v.id)
        if st is not None:
            d["gate_state"] = getattr(st, "state", str(st))
            if hasattr(st, "label"):
                d["gate_evidence"] = st.label()
                d["gate_by_platform"] = {p: {"state": s, "evidence": st.evidence.get(p)}
                                         for p, s in st.per_platform.items()}
        print_json(d)
        return 0
    table(["field", "value"], describe(reg, v), title=f"{v.id} ({v.knob})")
    return 0
