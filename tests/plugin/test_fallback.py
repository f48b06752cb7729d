"""Slow fallbacks (issue 38 item 2): a switch left to vLLM whose layers run another path than the fast one
declared for the platform is a warning naming the switch value that restores it (strict: a refusal)."""
from __future__ import annotations

import pytest

from r9k.plugin import fallback
from r9k.registry import load_registry
from r9k.registry.resolve import resolve


@pytest.fixture(scope="module")
def reg():
    return load_registry()


def _chosen(rms_enabled, attention=("CPU_ATTN",)):
    return {"layers": {"attention": {a: {"layers": 2, "first": "x"} for a in attention}},
            "custom_ops": {"rms_norm": {"layers": 5, "path": "forward_native", "enabled": rms_enabled}}}


def test_left_to_vllm_a_native_op_where_the_kernel_is_the_fast_path_is_a_fallback(reg):
    rs = resolve(reg, "cpu-smoke", env={}, sets={"CUSTOM_OP_RMS_NORM": ""})  # vLLM decides
    rows = fallback.find(rs, _chosen(False))
    assert [r["knob"] for r in rows] == ["CUSTOM_OP_RMS_NORM"], rows
    r = rows[0]
    assert r["fast"] == "+" and r["slow"] == ["-"] and r["slow_layers"] == 5 and r["platform"] == "cpu"
    assert r["restore"].startswith("CUSTOM_OP_RMS_NORM=+") and "custom_ops +/-rms_norm" in r["restore"]
    line = fallback.lines(rows, "r9k:")[0]
    assert "FALLBACK CUSTOM_OP_RMS_NORM" in line and "restore it with CUSTOM_OP_RMS_NORM=+" in line
    assert fallback.find(rs, _chosen(True)) == []  # vLLM took the fast path by itself
    assert fallback.find(rs, {"layers": {}, "custom_ops": {}}) == []  # no such layer: nothing to judge


def test_a_switch_the_profile_set_is_not_a_fallback_and_strict_refuses(reg):
    rs = resolve(reg, "cpu-smoke", env={})  # CUSTOM_OP_RMS_NORM = "+" (the profile)
    assert fallback.find(rs, _chosen(False)) == []  # a request vLLM did not follow is vllm_choices' mismatch
    rs = resolve(reg, "cpu-smoke", env={}, sets={"CUSTOM_OP_RMS_NORM": ""})
    res = dict(_chosen(False))
    emitted = []
    rows = fallback.check(rs, res, emitted.append)
    assert res["fallbacks"] == rows and len(emitted) == 1
    from r9k.plugin.startup import StartupError

    with pytest.raises(StartupError) as exc:
        fallback.refuse(rows)
    assert exc.value.lines[0].startswith("error[slow-fallback]: CUSTOM_OP_RMS_NORM") and "strict" in exc.value.lines[0]


def test_the_fast_path_is_the_platforms(reg):
    rs = resolve(reg, "tp2-default", env={})  # a GPU profile: attention left to vLLM
    rows = fallback.find(rs, _chosen(None, attention=("TRITON_ATTN",)), platform="cuda-h200")
    assert [(r["knob"], r["fast"], r["slow"]) for r in rows] == [("ATTENTION_BACKEND", "FLASH_ATTN", ["TRITON_ATTN"])]
    assert "ATTENTION_BACKEND=FLASH_ATTN" in rows[0]["restore"] and "--attention-backend" in rows[0]["restore"]
    assert fallback.find(rs, _chosen(None, attention=("FLASH_ATTN",)), platform="cuda-h200") == []
    assert fallback.find(rs, _chosen(None, attention=("TRITON_ATTN",)), platform="rocm-gfx1201") == []  # none declared


@pytest.mark.e2e
def test_e2e_cpu_smoke_left_to_vllm_warns_of_the_native_rms_norm(tmp_path):
    """One real start on vLLM's CPU backend with CUSTOM_OP_RMS_NORM unset (vLLM decides: its inductor compile
    makes every custom op native): the worker's log and the status name the fallback and its restoring value."""
    pytest.importorskip("vllm")
    from servers import base_env, launch_cpu_smoke, wait_healthy

    from .test_e2e_cpu_smoke import read_status

    env = base_env(tmp_path)
    srv, port = launch_cpu_smoke(env, tmp_path, "fallback", "CUSTOM_OP_RMS_NORM=")
    try:
        wait_healthy(srv, port)
        status = read_status(env, port, tmp_path)
        log = srv.text()
    finally:
        srv.stop()
    rows = {r["knob"]: r for r in status["vllm_choices"]["fallbacks"]}
    assert set(rows) == {"CUSTOM_OP_RMS_NORM"}, (rows, log[-4000:])
    assert rows["CUSTOM_OP_RMS_NORM"]["slow"] == ["-"] and rows["CUSTOM_OP_RMS_NORM"]["slow_layers"] >= 2
    warn = [ln for ln in log.splitlines() if "FALLBACK CUSTOM_OP_RMS_NORM" in ln]
    assert warn and "WARNING" in warn[0] and "restore it with CUSTOM_OP_RMS_NORM=+" in warn[0], log[-4000:]
