"""What a switch changes, and from that whether it is graph-affecting (part of vLLM's compile-cache key).

Graph-affecting: it changes the weights, the shapes or which kernels run inside the graph. :func:`changes`
derives it from the facts a variant declares; one whose facts do not say declares ``changes`` in its TOML.
``python -m r9k.registry.effects`` prints every variant's classification (tests/data/graph_affecting.txt).
"""
from __future__ import annotations

#: What puts a switch in the compile-cache key.
GRAPH = ("weights", "shapes", "ops")
#: Everything a switch can change: the three above, a kernel's parameters inside an unchanged op (``tuning``), a
#: collective behind vLLM's all-reduce op (``collective``), what happens outside the compiled graph (scheduling,
#: memory sizing, host processes: ``host``) and logging (``diagnostic``).
KINDS = GRAPH + ("tuning", "collective", "host", "diagnostic")

#: The layer kinds a vLLM switch chooses kernels for (VllmSwitch.decides): which kernels the graph launches.
_KERNEL_LAYERS = ("attention", "moe", "linear", "gdn", "custom-op", "decode", "sampler", "all")
_INSTALLED = ("model_registry:", "pluggable_layer:", "quantization:", "model_class:", "custom_op:", "ir_op:")


def changes(v) -> tuple[str, ...]:
    """What switching ``v`` changes: its declared ``changes``, else derived from its other facts."""
    if v.changes:
        return tuple(v.changes)
    ep = v.implementation.extension_point or "env-only"
    if v.category == "launcher":
        s = v.sets
        if s is not None and s.kind == "custom-op":
            return ("ops",)  # vLLM's kernel or the native torch path inside the graph
        if s is not None and s.kind == "json-field" and s.name == "--speculative-config":
            return ("shapes",)  # the tokens a step verifies
        if v.vllm is not None:
            if v.vllm.decides == "comm":
                return ("collective",)
            return ("ops",) if v.vllm.decides in _KERNEL_LAYERS else ("host",)
        return ("host",)
    if ep.startswith(_INSTALLED):
        return ("ops",)  # the plugin installs its own layer, model class or quantization method
    if ep.startswith("device_communicator:") or v.category == "comm":
        return ("collective",)
    return {"fusion": ("ops",), "tuning": ("tuning",), "diagnostic": ("diagnostic",)}[v.category]


def needs_declaring(category: str, extension_point: str) -> bool:
    """A kernel knob only exported (no extension point) says what it changes: nothing else tells."""
    return category == "kernel" and (extension_point or "env-only") == "env-only"


def graph_affecting(v) -> bool:
    return any(c in GRAPH for c in changes(v))


def table(reg) -> str:
    """One line per variant: id, knob, graph-affecting or not, what it changes, declared or derived."""
    rows = []
    for vid in sorted(reg.variants):
        v = reg.variants[vid]
        rows.append(f"{vid:40} {v.knob:34} {'graph' if graph_affecting(v) else '-':5} "
                    f"{','.join(changes(v)):14} {'declared' if v.changes else 'derived'}")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # pragma: no cover
    from . import load_registry

    print(table(load_registry()), end="")
