"""Predicted vs allocated KV cache (plugin/report.py): the registry's budget beside vLLM's allocation."""
from types import SimpleNamespace

from r9k.plugin import report
from r9k.plugin.report import merged_status
from r9k.registry import envvars, load_registry
from r9k.registry.memory import budget
from r9k.registry.resolve import resolve


def test_prediction_allocation_and_difference():
    reg = load_registry()
    rs = resolve(reg, "cpu-smoke", env={})
    from r9k.registry.manifest import from_resolved

    pred, basis = report.kv_predicted(SimpleNamespace(rs=from_resolved(rs)))  # the plugin's shape: the manifest
    assert pred == budget(reg, rs).kv_tokens and "fixed KV budget" in basis
    cfg = SimpleNamespace(cache_config=SimpleNamespace(num_gpu_blocks=60_000, block_size=16,
                                                       kv_cache_size_tokens=None))
    rep = report.kv_compare(pred, basis, report.kv_allocated(cfg))
    assert rep["allocated_tokens"] == rep["actual_tokens"] == 960_000
    assert rep["difference_tokens"] == 960_000 - pred
    assert round(rep["difference_pct"], 6) == round(100 * (960_000 - pred) / pred, 6)
    text = report.kv_line(rep)
    assert f"predicted {pred:,} tokens" in text and "allocated 960,000 tokens (60,000 blocks x 16)" in text
    # vLLM's own group-aware capacity wins where it reports one (hybrid models)
    cfg.cache_config.kv_cache_size_tokens = 900_000
    assert report.kv_compare(pred, basis, report.kv_allocated(cfg))["actual_tokens"] == 900_000


def test_no_allocation_yet_is_no_difference():
    rep = report.kv_compare(1000, "x", report.kv_allocated(SimpleNamespace()))
    assert rep["actual_tokens"] is None and rep["difference_tokens"] is None
    assert "difference -" in report.kv_line(rep)


def test_the_status_carries_it(tmp_path):
    import json

    sec = {"profile": "p", "hash": "h", "tp": 1, "model": "m", "platform": "cpu", "origin": "o", "strict": False,
           "values": {}, "non_stock": [], "process": {"name": "MainProcess", "pid": 1,
                                                                        "role": "main", "rank": 0},
           "kv_cache": {"predicted_tokens": 10, "actual_tokens": 12, "difference_tokens": 2}}
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"processes": {"MainProcess": sec}, "hash": "h"}))
    assert merged_status(None, str(f))["kv_cache"]["difference_tokens"] == 2


def test_init_state_records_it_in_the_route_and_the_log(plugin_env):
    """The endpoint plugin's init_state (after vLLM's ready handshake) compares, logs one line and the route
    answers it."""
    import asyncio

    import r9k.plugin as plugin
    from r9k.plugin import report

    lines = []
    plugin_env.setenv(envvars.PROFILE.name, "cpu-smoke")
    plugin_env.setattr(report, "emit", lambda level, line: lines.append(line))
    plugin_env.setattr(report, "_kv", None)
    plugin.register()
    cc = SimpleNamespace(num_gpu_blocks=65_536, block_size=16, kv_cache_size_tokens=None)
    client = SimpleNamespace(vllm_config=SimpleNamespace(cache_config=cc))
    plugin_env.setattr(report, "check_applied", lambda *a, **k: None)  # not this test's subject
    asyncio.run(report.endpoint_plugin().init_state(client, None, None))
    body = report.current_status()
    kv = body["kv_cache"]
    assert kv["actual_tokens"] == 65_536 * 16 and kv["predicted_tokens"] and kv["difference_tokens"] is not None
    assert any(f"r9k {report.active_set().hash}: KV cache: predicted" in ln for ln in lines), lines


def test_the_prediction_is_of_the_max_model_len_vllm_applied():
    """A hybrid model's capacity depends on max-model-len (vLLM reports blocks / blocks-a-request x max-model-len);
    ``r9kctl launch --profile P -- --max-model-len N`` makes vLLM apply N, not the profile's, and the prediction
    follows what the engine applied (it read only the profile's before)."""
    from r9k.registry.manifest import from_resolved

    reg = load_registry()
    rs = resolve(reg, "cpu-qwen3-next", env={})
    active = SimpleNamespace(rs=from_resolved(rs))
    as_declared, basis = report.kv_predicted(active)
    assert as_declared == budget(reg, rs).kv_tokens and "as vLLM applied" not in basis
    cfg = SimpleNamespace(model_config=SimpleNamespace(max_model_len=64),
                          cache_config=SimpleNamespace(enable_prefix_caching=True))
    pred, basis = report.kv_predicted(active, cfg)
    rs.serve_args = list(rs.serve_args) + ["--max-model-len", "64"]
    assert pred == budget(reg, rs).kv_tokens != as_declared
    assert "max-model-len 64 as vLLM applied it" in basis
    # the same max-model-len as the profile's predicts the same as the manifest alone
    cfg.model_config.max_model_len = 512
    assert report.kv_predicted(active, cfg)[0] == as_declared
    assert report.kv_applied_args(None) == [] and report.kv_applied_args(SimpleNamespace()) == []
