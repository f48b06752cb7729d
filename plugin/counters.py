"""Per-process counters of what this project's adapters installed and how often their kernels ran.

Two moments feed it:

* model construction: every adapter calls :func:`layer` once per layer instance it looked at, with
  ``installed=True`` (the layer runs this project's kernel) or ``installed=False`` and the reason the
  layer keeps vLLM's own path (quantized, bias, dtype, shape, TP, ...);
* every call: the adapter's torch custom op calls :func:`hit` with ``path="fused"`` when the kernel
  ran, or ``"fallback:<why>"`` (e.g. ``"fallback:rows>16"``) when that call went to the torch path.
  The call sits *inside* the custom op, i.e. it runs at execution time, also under torch.compile
  (a counter in a traced ``forward`` would count the trace, not the calls). Under CUDA graphs a
  replay runs no Python: calls then count the captures, not the replays (the status says so).

:func:`snapshot` is what the status file, ``/r9k/status`` and ``r9kctl status`` report::

    {op: {"installed": [layer names], "kept": {reason: [layer names]}, "calls": {path: n}}}

Process-local and lock-free: :func:`hit` is two dict lookups and one integer add (~0.1-0.3 us on this
machine, see notes/adapters.md). vLLM runs a model's forward on one thread per worker process; a lost
increment under a free-threaded race would only undercount, never invent a call. Imports nothing.
"""
from __future__ import annotations

#: op -> {"installed": [layer], "kept": {reason: [layer]}}; filled at model construction.
_LAYERS: dict[str, dict] = {}
#: op -> {path: calls since process start}.
_CALLS: dict[str, dict[str, int]] = {}


def layer(op: str, layer_name: str, installed: bool, reason: str = "") -> None:
    """Record, at model construction, whether one layer instance runs ``op``'s kernel."""
    entry = _LAYERS.get(op)
    if entry is None:
        entry = _LAYERS[op] = {"installed": [], "kept": {}}
    if installed:
        entry["installed"].append(layer_name)
    else:
        entry["kept"].setdefault(reason or "unspecified", []).append(layer_name)


def relabel(op: str, layer_name: str, installed: bool, reason: str = "") -> None:
    """Move a layer recorded by :func:`layer` (e.g. installed at construction, found ineligible when
    its weights or output dtype became known)."""
    entry = _LAYERS.get(op)
    if entry is not None:
        if layer_name in entry["installed"]:
            entry["installed"].remove(layer_name)
        for r, names in list(entry["kept"].items()):
            if layer_name in names:
                names.remove(layer_name)
                if not names:
                    del entry["kept"][r]
    layer(op, layer_name, installed, reason)


def hit(op: str, path: str = "fused") -> None:
    """Count one call of ``op``: ``path`` is ``"fused"`` or ``"fallback:<why>"``."""
    try:
        _CALLS[op][path] += 1
    except KeyError:  # first call of this op or path
        _CALLS.setdefault(op, {}).setdefault(path, 0)
        _CALLS[op][path] += 1


def snapshot() -> dict:
    """A copy: ``{op: {"installed": [...], "kept": {reason: [...]}, "calls": {path: n}}}``."""
    out: dict[str, dict] = {}
    for op, entry in _LAYERS.items():
        out[op] = {"installed": list(entry["installed"]),
                   "kept": {r: list(names) for r, names in entry["kept"].items()},
                   "calls": {}}
    for op, paths in list(_CALLS.items()):
        out.setdefault(op, {"installed": [], "kept": {}, "calls": {}})["calls"] = dict(paths)
    return out


def calls(op: str, path: str = "fused") -> int:
    """Calls of ``op`` on ``path`` so far (tests, benchmarks)."""
    return _CALLS.get(op, {}).get(path, 0)


def reset() -> None:
    """Forget everything (tests only)."""
    _LAYERS.clear()
    _CALLS.clear()
