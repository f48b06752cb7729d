"""KV-cache capacity: the registry's prediction beside what vLLM actually allocated, with the difference.

vLLM 0.32 profiles memory in the engine core, allocates the KV cache, and hands the result to the API server in
the ready handshake (``vllm/v1/engine/core_client.py``): ``vllm_config.cache_config.num_gpu_blocks`` (blocks
after profiling), ``.block_size`` and ``.kv_cache_size_tokens`` (vLLM's own group-aware capacity, the "KV cache
size: N tokens" line of its log). The endpoint plugin's ``init_state`` runs after that handshake;
:func:`on_engine_ready` reads the three there, compares them with the registry's budget
(``r9k.registry.memory.budget`` of the active set), logs one line and puts the comparison into this process's
status section (``kv_cache``: ``/r9k/status``, ``r9kctl status``).
"""
from __future__ import annotations

import logging
from typing import Optional

from . import startup

logger = logging.getLogger("vllm.r9k")

_report: Optional[dict] = None


def applied_args(vllm_config) -> list[str]:
    """The vLLM arguments a hybrid model's capacity depends on, as vLLM applied them (``--max-model-len``, prefix
    caching): the profile's ``serve_args`` are what the manifest carries, but ``r9kctl launch ... -- --max-model-len
    N`` (or vLLM's own defaulting) can change them, and the prediction must be of the engine that runs."""
    out: list[str] = []
    n = getattr(getattr(vllm_config, "model_config", None), "max_model_len", None)
    if isinstance(n, int) and n > 0:
        out += ["--max-model-len", str(n)]
    pc = getattr(getattr(vllm_config, "cache_config", None), "enable_prefix_caching", None)
    if isinstance(pc, bool):
        out.append("--enable-prefix-caching" if pc else "--no-enable-prefix-caching")
    return out


def predicted(active, vllm_config=None) -> tuple[Optional[int], str]:
    """The registry's KV tokens for the active set (with what vLLM applied of the arguments the prediction
    depends on, when ``vllm_config`` is given: :func:`applied_args`), and what it is based on."""
    from ..registry.memory import budget

    from ..registry.resolve import ResolvedSet

    reg = startup._load_registry()
    rs = ResolvedSet.from_manifest(active.rs.to_dict(), reg)  # the engine's shape of the manifest, for budget()
    applied = applied_args(vllm_config)
    rs.serve_args = list(rs.serve_args) + applied  # vLLM's last value of an option wins, as in its parser
    b = budget(reg, rs)
    if b is None:
        return None, f"no memory budget for model {rs.model} at TP{rs.tp} (registry/models.toml)"
    how = "fixed KV budget" if b.fixed_kv_bytes is not None else f"UTIL {b.utilization:g}"
    at = f", max-model-len {b.hybrid.max_model_len} as vLLM applied it" if b.hybrid is not None and applied else ""
    return b.kv_tokens, f"registry budget ({rs.model}, TP{rs.tp}, {how}{at})"


def allocated(vllm_config) -> dict:
    """What vLLM allocated: blocks, block size, blocks x block size, and vLLM's own capacity figure."""
    cc = getattr(vllm_config, "cache_config", None)
    blocks = getattr(cc, "num_gpu_blocks", None)
    size = getattr(cc, "block_size", None)
    out = {"blocks": blocks, "block_size": size,
           "allocated_tokens": blocks * size if blocks and size else None,
           "vllm_capacity_tokens": getattr(cc, "kv_cache_size_tokens", None)}
    return out


def compare(pred: Optional[int], basis: str, alloc: dict) -> dict:
    """The report: prediction, allocation and the difference (allocated - predicted)."""
    actual = alloc.get("vllm_capacity_tokens") or alloc.get("allocated_tokens")
    rep = {"predicted_tokens": pred, "predicted_basis": basis, **alloc, "actual_tokens": actual,
           "difference_tokens": None, "difference_pct": None}
    if pred is not None and actual is not None:
        rep["difference_tokens"] = actual - pred
        rep["difference_pct"] = 100.0 * (actual - pred) / pred if pred else None
    return rep


def line(rep: dict) -> str:
    """One line for the startup log and ``r9kctl status``."""
    def n(x):
        return "-" if x is None else f"{x:,}"

    alloc = f"{n(rep.get('blocks'))} blocks x {n(rep.get('block_size'))}"
    diff = "-" if rep.get("difference_tokens") is None else (
        f"{rep['difference_tokens']:+,}" + (f" ({rep['difference_pct']:+.1f}%)" if rep.get("difference_pct") is not
                                             None else ""))
    return (f"KV cache: predicted {n(rep.get('predicted_tokens'))} tokens ({rep.get('predicted_basis')}), "
            f"allocated {n(rep.get('actual_tokens'))} tokens ({alloc}), difference {diff}")


def on_engine_ready(engine_client) -> Optional[dict]:
    """Called once the engine is up (the endpoint plugin's ``init_state``): compute, log, record."""
    global _report
    from . import _active, _emit  # at call time: register() binds the plugin's active set after this import

    if _active is None:
        return None
    try:
        pred, basis = predicted(_active, getattr(engine_client, "vllm_config", None))
    except Exception as exc:  # the comparison is informative; never stop the server for it
        pred, basis = None, f"no prediction: {exc}"
    _report = compare(pred, basis, allocated(getattr(engine_client, "vllm_config", None)))
    _emit(logging.INFO, f"r9k {_active.hash}: {line(_report)}")
    try:
        from . import _write_status, dispatch

        _write_status(dispatch.get_table())
    except Exception as exc:  # noqa: BLE001
        logger.warning("r9k: cannot record the KV-cache comparison: %s", exc)
    return _report


def current() -> Optional[dict]:
    """This process's comparison (None until the engine is ready, or in a process that is not the server)."""
    return _report
