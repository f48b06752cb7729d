"""The per-op counters and the set's hash on vLLM's own Prometheus /metrics (issue 38 item 3), labelled by op
and process: one collector in whichever registry vLLM mounts, reading every process's figures at scrape time."""
from __future__ import annotations

import re
import types
import urllib.request

import pytest

prometheus_client = pytest.importorskip("prometheus_client")

from r9k.plugin import metrics  # noqa: E402

SECS = [
    {"process": {"name": "MainProcess"}, "profile": "cpu-smoke", "hash": "abc123", "counters": {}},
    {"process": {"name": "VllmWorker-0"}, "profile": "cpu-smoke", "hash": "abc123",
     "counters": {"router": {"installed": ["model.layers.0.mlp.gate"], "kept": {"self-check failed": ["model.layers.1.mlp.gate"]},
                             "calls": {"fused": 7, "fallback:rows>16": 2}}}},
]


def _text(secs) -> str:
    reg = prometheus_client.CollectorRegistry()

    class C:
        def collect(self):
            yield from metrics.families(secs)

    reg.register(C())
    return prometheus_client.generate_latest(reg).decode()


def test_families_label_each_figure_by_op_and_process():
    t = _text(SECS)
    assert 'r9k_op_layers{op="router",process="VllmWorker-0",reason="",state="fused"} 1.0' in t
    assert 'r9k_op_layers{op="router",process="VllmWorker-0",reason="self-check failed",state="stock"} 1.0' in t
    assert 'r9k_op_calls_total{op="router",path="fused",process="VllmWorker-0"} 7.0' in t
    assert 'r9k_op_calls_total{op="router",path="fallback:rows>16",process="VllmWorker-0"} 2.0' in t
    assert 'r9k_set_info{code="",hash="abc123",process="MainProcess",profile="cpu-smoke"} 1.0' in t


def test_the_registry_vllm_mounts_gets_the_collector_once_in_either_mode():
    made = []

    def get_prometheus_registry():  # vLLM's multiprocess mode: a fresh registry each call
        made.append(prometheus_client.CollectorRegistry())
        return made[-1]

    mod = types.SimpleNamespace(get_prometheus_registry=get_prometheus_registry)
    metrics._wrap(mod)
    metrics._wrap(mod)  # idempotent
    a = mod.get_prometheus_registry()
    assert any(c is metrics.COLLECTOR for c in a._collector_to_names)
    same = prometheus_client.CollectorRegistry()  # one API server: the same global registry every call
    mod2 = types.SimpleNamespace(get_prometheus_registry=lambda: same)
    metrics._wrap(mod2)
    mod2.get_prometheus_registry()
    mod2.get_prometheus_registry()
    assert sum(c is metrics.COLLECTOR for c in same._collector_to_names) == 1


@pytest.mark.e2e
@pytest.mark.xdist_group("cpu-smoke-server")
def test_e2e_counters_and_hash_on_the_cpu_smoke_servers_metrics(cpu_smoke_server):
    from .test_e2e_cpu_smoke import completions, read_status

    port = cpu_smoke_server.port
    completions(port)
    status = read_status(cpu_smoke_server.env, port, cpu_smoke_server.tmp)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
        text = r.read().decode()
    assert "vllm:" in text, text[:2000]  # vLLM's own metrics are still there
    assert re.search(r'r9k_set_info\{code="[0-9a-f]*",hash="%s",process="MainProcess",profile="cpu-smoke"\} 1\.0' % status["hash"],
                     text), [ln for ln in text.splitlines() if ln.startswith("r9k_")]
    workers = {m for m in re.findall(r'r9k_set_info\{code="[0-9a-f]+",hash="[^"]*",process="([^"]+)"', text)
               if m != "MainProcess"}  # the model-building processes run kernels: their code identity is there
    assert workers, [ln for ln in text.splitlines() if ln.startswith("r9k_")]
    ops = {op for op, e in status["ops"].items() if e.get("installed")}
    assert ops, status["ops"]
    for op in ops:  # every op a worker runs: its fused layers and calls, labelled by the worker
        fused = re.findall(r'r9k_op_layers\{op="%s",process="([^"]+)",reason="",state="fused"\} (\d+)' % op, text)
        assert any(p in workers and int(float(n)) >= 1 for p, n in fused), (op, fused)
        assert re.search(r'r9k_op_calls_total\{op="%s",path="fused",process="[^"]+"\} [1-9]' % op, text), op
