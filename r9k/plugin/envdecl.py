"""Declaring this project's knobs to vLLM's environment-variable registry (``vllm.envs``).

vLLM keeps one dict, ``vllm.envs.environment_variables`` (name -> zero-argument getter). What is in
it is known to vLLM: it does not warn about it as unknown (``Platform.validate_environ`` warns on
unknown ``VLLM_*`` names), copies it to Ray workers, and hashes the getter's value into the
torch.compile cache key (``vllm.envs.compile_factors``: every declared variable but a fixed ignore
list).

So every knob of the registry is declared, with a getter that depends on whether the knob changes
the compiled graph (``Variant.graph_affecting``, derived from what the switch changes: registry/effects.py):

* graph-affecting knobs return the value *resolved* for this process (profile, environment or
  manifest), so switching e.g. ``R9K_ROUTER`` between ``r9k`` and ``stock`` yields another compile
  cache directory instead of loading a graph compiled for the other implementation;
* every other knob returns None: known to vLLM (no warning, copied to Ray workers) but constant in
  the cache key, so it does not cause needless recompiles. Its value is read from the resolved set
  (``r9k.plugin.report.active_set()``), not from ``vllm.envs``.

The plugin's own control variables are declared the same way (constant None). Launcher knobs
(category ``launcher``: ``UTIL``, ``EAGER``, ...) are not: ``r9kctl launch`` turns them into vLLM's own
flags and variables; their bare names never reach vLLM. The *variables* a launcher knob sets (``sets``
of kind ``env``, e.g. ``GPU_MAX_HW_QUEUES``) are declared (constant None: not in the cache key), so that
vLLM's Ray executor copies them to its workers like its own (``vllm/ray/ray_env.py``: every declared name).
"""
from __future__ import annotations

from typing import Callable, Optional

from ..registry import envvars

#: The control variables declared to vLLM (those marked ``vllm`` in :mod:`r9k.registry.envvars`).
CONTROL_VARS = envvars.declared_to_vllm()

# Marks getters installed by this module, so a second declaration replaces only its own entries.
_MARK = "_r9k_declared"


def _const_none() -> None:
    return None


def _getter(value: Optional[str]) -> Callable[[], Optional[str]]:
    def get() -> Optional[str]:
        return value

    return get


def declare(rs, env_vars: Optional[dict] = None) -> dict[str, str]:
    """Declare every knob of ``rs`` (a ResolvedSet) and the control variables.

    Returns {name: "graph" | "declared"} for what was added. A name vLLM itself already defines is
    left alone (vLLM's own getter stays authoritative for its own variables).
    """
    if env_vars is None:
        import vllm.envs as envs

        env_vars = envs.environment_variables
    added: dict[str, str] = {}
    for r in rs.items.values():
        v = r.variant
        if v.category == "launcher":
            if v.sets is not None and v.sets.kind == "env" and env_vars.get(v.sets.name) is None:
                fn = _getter(None)
                setattr(fn, _MARK, True)
                env_vars[v.sets.name] = fn
                added[v.sets.name] = "declared"
            continue
        existing = env_vars.get(v.knob)
        if existing is not None and not getattr(existing, _MARK, False):
            continue
        getter = _getter(r.value) if v.graph_affecting else _const_none
        setattr(getter, _MARK, True)
        env_vars[v.knob] = getter
        added[v.knob] = "graph" if v.graph_affecting else "declared"
    for name in CONTROL_VARS:
        existing = env_vars.get(name)
        if existing is None or getattr(existing, _MARK, False):
            fn = _getter(None)
            setattr(fn, _MARK, True)
            env_vars[name] = fn
            added.setdefault(name, "declared")
    return added
