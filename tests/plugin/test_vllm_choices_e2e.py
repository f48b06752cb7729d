"""End to end on vLLM's CPU backend (issue 25): the shipped cpu-smoke profile sets two of vLLM's own switches away
from vLLM's CPU defaults (``CUSTOM_OP_RMS_NORM = "+"``: RMSNorm as vLLM's custom op where the CPU backend's
inductor compile defaults every custom op to native; ``VLLM_CPU_ATTN_SPLIT_KV = 0``). One real vLLM start:
``/r9k/status`` (and ``r9kctl status``) shows each requested and what vLLM chose, in the layer kind it decides
(custom op rms_norm enabled in every RMSNorm layer while silu_and_mul stays native; the CPU attention backend's
variable as vLLM reads it), 0 mismatches; flipping one of them is then a mismatch against what this server
chose (the unit-level flip: a second start is too slow on 2 cores). The server is the shared cpu-smoke one
(tests/servers.SharedServer): the shipped profile's own set, as ``r9kctl launch --profile cpu-smoke`` starts it. Greedy output: 8 tokens per prompt, the
bound the smoke test states (equality with another start is tests/plugin/test_e2e_adapters.py's job).
"""
from __future__ import annotations

import subprocess

import pytest

from .test_e2e_cpu_smoke import R9KCTL, SharedServer, completions, read_status

pytestmark = pytest.mark.e2e
E2E_MINUTES = 2  # its wall time in the CI rehearsal of 2026-12-01 (100 s): tests/conftest.py runs it early


@pytest.mark.xdist_group(SharedServer.GROUP)
def test_cpu_profile_vllm_switches_requested_and_chosen(cpu_smoke_server):
    from r9k.plugin import report
    from r9k.registry import load_registry
    from r9k.registry.resolve import resolve

    env, port = cpu_smoke_server.env, cpu_smoke_server.port
    outs = completions(port)  # greedy, MAX_TOKENS each (asserted there)
    status = read_status(env, port, cpu_smoke_server.tmp)
    text = subprocess.run(R9KCTL + ["--plain", "status", "--url", f"http://127.0.0.1:{port}"], env=env,
                          capture_output=True, text=True, timeout=120).stdout
    assert len(outs) == 3
    ch = status["vllm_choices"]
    assert ch, "no process recorded vLLM's choices"
    rows = {r["knob"]: r for r in ch["rows"]}
    rms = rows["CUSTOM_OP_RMS_NORM"]
    assert rms["requested"] == "+" and rms["layer"] == "custom-op" and rms["state"] == "applied", rms
    assert rms["chosen"].startswith("+")
    split = rows["VLLM_CPU_ATTN_SPLIT_KV"]
    assert split["requested"] == "0" and split["layer"] == "attention" and split["state"] == "applied", split
    assert split["chosen"].startswith("0") and "CPU_ATTN" in split["note"]
    assert ch["mismatches"] == []
    # per layer: the attention backend vLLM picked on the CPU, the ops' paths
    assert set(ch["layers"]["attention"]) == {"CPU_ATTN"}
    assert ch["custom_ops"]["rms_norm"]["enabled"] is True and ch["custom_ops"]["rms_norm"]["layers"] >= 2
    assert ch["custom_ops"]["silu_and_mul"]["enabled"] is False  # vLLM's CPU default (inductor: native)
    assert "moe" in ch["layers"]  # the tiny Qwen2-MoE's experts: vLLM's MoE method and backend
    assert ch["r9k_tuned"], "the router kernel package's tuned-config source"
    assert all(t["source"].startswith("default rules") for t in ch["r9k_tuned"].values())  # no file for cpu
    # the launcher side: the custom_ops entry reached vLLM's final config
    app = {r["knob"]: r for r in status["applied"]["rows"]}
    assert app["CUSTOM_OP_RMS_NORM"]["state"] == "applied", app
    assert "what vLLM chose per layer" in text and "CUSTOM_OP_RMS_NORM" in text and "CPU_ATTN" in text

    # flipping a switch: the same server's choices are now a mismatch for it (and in strict mode a refusal)
    reg = load_registry()
    flipped = resolve(reg, "cpu-smoke", env={}, sets={"CUSTOM_OP_RMS_NORM": "-"})
    frows = {r["knob"]: r for r in report.choices_compare(flipped, ch, environ={"VLLM_CPU_ATTN_SPLIT_KV": "0"})}
    assert frows["CUSTOM_OP_RMS_NORM"]["state"] == "mismatch"
