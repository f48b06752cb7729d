"""Declaring this project's knobs to vLLM's environment-variable registry (``vllm.envs.environment_variables``).

A declared variable is known to vLLM: no unknown-variable warning, copied to Ray workers, and its getter's
value hashed into the torch.compile cache key. So a graph-affecting knob (``Variant.graph_affecting``:
registry/effects.py) returns its resolved value (switching it yields another compile cache), every other knob,
the plugin's control variables and the variables a launcher knob sets (``sets`` of kind ``env``) return None
(known, but constant in the key). Launcher knobs themselves are not declared: ``r9kctl launch`` turns them into
vLLM's own flags and variables. A knob's value is read from the resolved set, never from ``vllm.envs``.
"""
from __future__ import annotations

from typing import Callable, Optional

from ..registry import envvars

#: The control variables declared to vLLM (those marked ``vllm`` in :mod:`r9k.registry.envvars`).
CONTROL_VARS = envvars.declared_to_vllm()

# Marks getters installed by this module, so a second declaration replaces only its own entries.
_MARK = "_r9k_declared"


def _getter(value: Optional[str]) -> Callable[[], Optional[str]]:
    def get() -> Optional[str]:
        return value

    setattr(get, _MARK, True)
    return get


def declare(rs, env_vars: Optional[dict] = None) -> dict[str, str]:
    """Declare every knob of ``rs`` (a ResolvedSet) and the control variables; returns {name: "graph" |
    "declared"} for what was added. A name vLLM itself defines keeps vLLM's getter."""
    if env_vars is None:
        import vllm.envs as envs

        env_vars = envs.environment_variables

    def ours_or_free(name: str) -> bool:
        existing = env_vars.get(name)
        return existing is None or getattr(existing, _MARK, False)

    added: dict[str, str] = {}
    for r in rs.items.values():
        v = r.variant
        if v.category == "launcher":
            if v.sets is not None and v.sets.kind == "env" and env_vars.get(v.sets.name) is None:
                env_vars[v.sets.name] = _getter(None)
                added[v.sets.name] = "declared"
        elif ours_or_free(v.knob):
            env_vars[v.knob] = _getter(r.value if v.graph_affecting else None)
            added[v.knob] = "graph" if v.graph_affecting else "declared"
    for name in CONTROL_VARS:
        if ours_or_free(name):
            env_vars[name] = _getter(None)
            added.setdefault(name, "declared")
    return added
