"""This project's per-op counters and its set's hash on vLLM's own Prometheus ``/metrics``.

The counters live in the worker and engine-core processes, which vLLM's metric objects do not reach with one
API server. So the API server carries one collector, registered in whichever registry vLLM mounts on
``/metrics`` (:func:`install` wraps ``get_prometheus_registry``), that reads at each scrape the figures
``/r9k/status`` answers (the status file and every counter file), per process:

- ``r9k_op_layers{op, process, state="fused"|"stock", reason}``: layers running this project's kernel or vLLM's;
- ``r9k_op_calls_total{op, process, path}``: calls per path (``fused``, ``fallback:<why>``);
- ``r9k_set_info{process, profile, hash, code}`` = 1: the set each process serves and its kernels' code identity.

Nothing is added to the calls' hot path.
"""
from __future__ import annotations

PROM_MODULE = "vllm.v1.metrics.prometheus"
MOUNT_MODULE = "vllm.entrypoints.serve.instrumentator.metrics"


def sections() -> list[dict]:
    """Every process section of this server with its counters (the API server's own included)."""
    from ..registry import envvars
    from . import report

    own = report.own_section()
    procs = report.file_sections(report._status_path or envvars.STATUS_FILE.get())[1]
    if own is not None:
        procs.setdefault(own["process"]["name"], own)
    return [procs[n] for n in sorted(procs)]


def families(secs: list[dict]):
    """The metric families of ``secs`` (status sections)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    layers = GaugeMetricFamily("r9k_op_layers", "Layers running this project's kernel (state fused) or vLLM's "
                               "path (state stock, with the reason), per op and process",
                               labels=["op", "process", "state", "reason"])
    calls = CounterMetricFamily("r9k_op_calls", "Calls of this project's ops per path (fused, fallback:<why>), "
                                "per op and process", labels=["op", "process", "path"])
    info = GaugeMetricFamily("r9k_set_info", "The r9k set each process serves (its values' hash) and the identity of "
                             "the kernel code it runs (plugin/codeid.py)", labels=["process", "profile", "hash", "code"])
    from . import codeid

    for s in secs:
        proc = str(s.get("process", {}).get("name", "?"))
        info.add_metric([proc, str(s.get("profile") or ""), str(s.get("hash") or ""),
                         codeid.combined(s.get("code") or {}) or ""], 1)
        for op, c in sorted((s.get("counters") or {}).items()):
            layers.add_metric([op, proc, "fused", ""], len(c.get("installed", [])))
            for reason, names in sorted((c.get("kept") or {}).items()):
                layers.add_metric([op, proc, "stock", reason], len(names))
            for path, n in sorted((c.get("calls") or {}).items()):
                calls.add_metric([op, proc, path], n)
    return [layers, calls, info]


class Collector:
    """A ``prometheus_client`` custom collector: the figures are read at scrape time."""

    def describe(self):
        return []  # no names to reserve: vLLM's registry checks none of ours

    def collect(self):
        try:
            yield from families(sections())
        except Exception:  # noqa: BLE001 - a scrape must never fail for this project's figures
            return


COLLECTOR = Collector()
_registered: list = []  # registries holding COLLECTOR (identity: a registry has no hash)


def add_to(registry):
    if not any(r is registry for r in _registered):
        registry.register(COLLECTOR)
        _registered.append(registry)
    return registry


def _wrap(module) -> None:
    orig = getattr(module, "get_prometheus_registry", None)
    if orig is None or getattr(orig, "_r9k", False):
        return

    def get_prometheus_registry(*a, **k):
        return add_to(orig(*a, **k))

    get_prometheus_registry._r9k = True  # type: ignore[attr-defined]
    get_prometheus_registry.__wrapped__ = orig  # type: ignore[attr-defined]
    module.get_prometheus_registry = get_prometheus_registry


def install(hooks) -> None:
    """In the API server: every registry vLLM mounts on ``/metrics`` gets the collector (post-import hooks; the
    mount module binds the function by name, so both modules are wrapped)."""
    hooks.add(PROM_MODULE, _wrap)
    hooks.add(MOUNT_MODULE, _wrap)
