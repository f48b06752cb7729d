"""What vLLM applied: a launcher knob's request compared with the final config (fields named as in
vLLM 0.32's VllmConfig, checked here), mismatches listed, strict mode refuses."""
from __future__ import annotations

import enum
from types import SimpleNamespace as NS

import pytest

import r9k.plugin as plugin
from r9k.plugin import report
from r9k.plugin.startup import StartupError
from r9k.registry import envvars


def _cfg(max_num_seqs=16, cudagraph_sizes=(1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256), tp=4, util=0.98,
         batched=4096):
    return NS(parallel_config=NS(tensor_parallel_size=tp, distributed_executor_backend="mp"),
              scheduler_config=NS(max_num_seqs=max_num_seqs, max_num_batched_tokens=batched),
              cache_config=NS(gpu_memory_utilization=util, kv_cache_memory_bytes=None),
              compilation_config=NS(cudagraph_capture_sizes=list(cudagraph_sizes), cudagraph_mode=None, mode=None),
              attention_config=NS(backend=None), kernel_config=NS(moe_backend="auto", linear_backend="auto"),
              mamba_config=NS(backend="TRITON"), model_config=NS(dtype="bfloat16"), device_config=NS(device_type="cuda"),
              speculative_config=NS(method="mtp", num_speculative_tokens=3),
              offload_config=NS(uva=NS(cpu_offload_gb=0.0)))


def test_the_compared_fields_exist_in_vllms_config():
    from vllm.config import CacheConfig, CompilationConfig, ParallelConfig, SchedulerConfig, SpeculativeConfig

    for cls, field in ((SchedulerConfig, "max_num_seqs"), (SchedulerConfig, "max_num_batched_tokens"),
                       (CacheConfig, "gpu_memory_utilization"), (CacheConfig, "kv_cache_memory_bytes"),
                       (CompilationConfig, "cudagraph_capture_sizes"), (CompilationConfig, "cudagraph_mode"),
                       (ParallelConfig, "tensor_parallel_size"), (SpeculativeConfig, "method"),
                       (SpeculativeConfig, "num_speculative_tokens")):
        assert field in cls.__dataclass_fields__, (cls, field)


def test_requests_are_compared_with_the_final_config(registry):
    from r9k.registry.resolve import resolve

    rs = resolve(registry, "tp4-default", env={})
    env = {"GPU_MAX_HW_QUEUES": "1", "HSA_ENABLE_MWAITX": "1", "NCCL_PROTO": "Simple"}
    res = report.applied_compare(rs, _cfg(), env)
    by = {r["knob"]: r for r in res["rows"]}
    assert by["NSEQ"]["state"] == "applied" and by["NSEQ"]["where"] == "scheduler_config.max_num_seqs"
    assert by["UTIL"]["state"] == "applied" and by["CGSIZES"]["state"] == "applied"
    assert by["HWQ"]["state"] == "applied" and by["(tp)"]["state"] == "applied"
    assert res["mismatches"] == []

    # vLLM clamped the batch and dropped capture sizes; a variable did not reach the server
    res = report.applied_compare(rs, _cfg(max_num_seqs=8, cudagraph_sizes=(1, 2, 4, 8)),
                          {"HSA_ENABLE_MWAITX": "1", "NCCL_PROTO": "Simple"})
    bad = {m["knob"]: m for m in res["mismatches"]}
    assert set(bad) == {"NSEQ", "CGSIZES", "HWQ"}
    assert bad["NSEQ"]["applied"] == "8" and bad["NSEQ"]["requested"] == "--max-num-seqs 16"
    lines = report.applied_lines(res, "r9k x:")
    assert any("MISMATCH" in ln and "NSEQ" in ln for ln in lines) and "3 mismatch(es)" in lines[0]


def test_every_launcher_knob_is_compared_units_json_fields_and_not_applied(registry):
    """27b-tp2's KV budget goes in bytes (9 GiB), its drafter as --speculative-config fields; a knob no
    launched program reads (OVERLAYS) is listed as not applied, never as exported."""
    from r9k.registry.resolve import resolve

    rs = resolve(registry, "27b-tp2", env={})
    cfg = _cfg(tp=2, max_num_seqs=8, util=0.94)
    cfg.cache_config.kv_cache_memory_bytes = 9 * 2**30
    cfg.attention_config.backend = enum.Enum("AttentionBackendEnum", ["CUSTOM", "TRITON_ATTN"]).CUSTOM
    cfg.speculative_config = NS(method="dflash", model="DFlash2-FP8", num_speculative_tokens=7)
    cfg.cache_config.enable_prefix_caching = False
    env = {"GPU_MAX_HW_QUEUES": "1", "HSA_ENABLE_MWAITX": "1", "NCCL_PROTO": "Simple", "VLLM_KV_CACHE_LAYOUT": "LBHNC"}
    server = NS(chat_template="qwen-fixed")
    res = report.applied_compare(rs, cfg, env, server)
    rows = res["rows"]
    kv = next(r for r in rows if r["knob"] == "KVMEM")
    assert kv["state"] == "applied" and kv["applied"] == str(9 * 2**30) and kv["where"].endswith("kv_cache_memory_bytes")
    draft = [r for r in rows if r["knob"] == "DRAFT"]
    assert {r["where"] for r in draft} == {"speculative_config.model", "speculative_config.method",
                                           "speculative_config.num_speculative_tokens"}
    assert res["mismatches"] == [], res["mismatches"]
    # the 9-byte budget of the issue (the abbreviation vLLM accepted) is a mismatch
    cfg.cache_config.kv_cache_memory_bytes = 9
    assert [m["knob"] for m in report.applied_compare(rs, cfg, env, server)["mismatches"]] == ["KVMEM"]
    rs4 = resolve(registry, "tp4-default", env={})
    res4 = report.applied_compare(rs4, _cfg(), {"GPU_MAX_HW_QUEUES": "1", "HSA_ENABLE_MWAITX": "1", "NCCL_PROTO": "Simple"})
    ov = next(r for r in res4["rows"] if r["knob"] == "OVERLAYS")
    assert ov["state"] == "not-applied" and ov not in res4["mismatches"]
    assert any("not applied" in ln and "OVERLAYS" in ln for ln in report.applied_lines(res4, "r9k x:"))


def test_strict_mode_stops_on_a_mismatch(plugin_env, monkeypatch):
    monkeypatch.setattr(report, "emit", lambda level, line: None)
    plugin_env.setenv(envvars.PROFILE.name, "cpu-smoke")
    plugin.register()
    report.active_set().strict = True  # a strict launch (R9K_STRICT=1 would also make stale gates errors)
    with pytest.raises(StartupError) as ei:
        report.check_applied(_cfg(tp=2))  # the launch asked for TP 1
    assert "error[not-applied]" in str(ei.value) and "--tensor-parallel-size 1" in str(ei.value)
    st = report.current_status()
    assert st["applied"]["mismatches"][0]["knob"] == "(tp)"


def test_strict_mismatch_stops_at_vllms_final_config_before_the_engine(plugin_env, monkeypatch):
    """The hook on VllmConfig.__post_init__ (installed when vllm.config.vllm is imported) compares as soon as
    vLLM's configuration is final: in strict mode a mismatch raises there, before any weights load."""
    monkeypatch.setattr(report, "emit", lambda level, line: None)
    plugin_env.setenv(envvars.PROFILE.name, "cpu-smoke")
    plugin.register()
    cfg = _cfg(tp=2)  # the launch asked for TP 1

    class FakeVllmConfig:
        def __post_init__(self):
            self.__dict__.update(vars(cfg))

    mod = NS(VllmConfig=FakeVllmConfig)
    report.hook_final_config(mod)
    report.hook_final_config(mod)  # idempotent: wrapped once
    assert FakeVllmConfig.__post_init__.__wrapped__.__name__ == "__post_init__"
    FakeVllmConfig().__post_init__()  # not strict: no refusal here (init_state logs the table later)
    report.active_set().strict = True
    with pytest.raises(StartupError) as ei:
        FakeVllmConfig().__post_init__()
    assert "--tensor-parallel-size 1" in str(ei.value)


def test_the_launch_snapshot_carries_the_whole_mapping(registry):
    """Every vLLM process reads the set from the carried manifest (registry/manifest.py): the applied-check must see
    the same mapping there (units, JSON fields), or KVMEM=9 would be compared as 9 bytes."""
    from r9k.registry import manifest
    from r9k.registry.resolve import resolve

    rs = resolve(registry, "27b-tp2", env={})
    light = manifest.from_carrier(manifest.carrier(manifest.from_resolved(rs), "s"))[0]
    env = {"GPU_MAX_HW_QUEUES": "1", "HSA_ENABLE_MWAITX": "1", "NCCL_PROTO": "Simple", "VLLM_KV_CACHE_LAYOUT": "LBHNC"}
    full = report.applied_compare(rs, _cfg(tp=2), env)["rows"]
    assert report.applied_compare(light, _cfg(tp=2), env)["rows"] == full
    assert any(r["requested"] == f"--kv-cache-memory-bytes {9 * 2**30}" for r in full)


def test_a_vllm_version_no_release_was_validated_on_is_a_mismatch_row():
    ok = report.version_row("0.32.0+cpu")
    assert ok.state == "applied" and "v0.3.2" in ok.requested
    bad = report.version_row("0.33.0")
    assert bad.state == "mismatch" and bad.applied == "0.33.0" and "0.32" in bad.requested
