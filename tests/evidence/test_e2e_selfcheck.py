"""The startup self-check in a real vLLM server (CPU backend): a router kernel that returns zeros is refused.

One server start: ``r9kctl launch --profile cpu-smoke --strict`` (the tiny Qwen2-MoE whose router runs this
project's Triton kernel under the interpreter). The kernel is broken by a test-only module, not by editing it:
a ``sitecustomize.py`` on PYTHONPATH (so it runs in every vLLM process) loads the mutation-test plugin
(r9kctl/evidence/mutate.py) with ``envvars.MUTATE`` making ``router_gemm`` return ``out.zero_()``. Without
the self-check this server would serve garbage with status "fused"; with it, strict mode must refuse to
start, naming the op and the error.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

from r9k.registry import envvars
from servers import CPU_BIND, stop_group

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]

ZEROS = [{"module": "r9k.kernels.router.triton_kernel", "old": "    return skinny_gemm(x, w, out=out)\n",
          "new": "    return skinny_gemm(x, w, out=out).zero_()\n"}]


def test_strict_server_refuses_a_router_kernel_that_returns_zeros(tmp_path, free_port):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text("import r9k.r9kctl.evidence.mutate  # noqa: F401 - test-only\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("R9K_", "VLLM_"))}
    env.pop("TRITON_INTERPRET", None)  # the profile sets it
    # vLLM's cache: the session's, shared by its launches (tests/plugin/test_e2e_cpu_smoke.vllm_cache)
    env.update({envvars.CACHE_DIR.name: str(tmp_path / "r9k-cache"), "VLLM_CACHE_ROOT": str(tmp_path.parent / "vllm-cache"),
                "PYTHONUNBUFFERED": "1", envvars.MUTATE.name: json.dumps(ZEROS), **CPU_BIND,
                "PYTHONPATH": os.pathsep.join([str(hook)] + [p for p in [os.environ.get("PYTHONPATH")] if p])})
    argv = [sys.executable, "-m", "r9k.r9kctl.cli", "launch", "--profile", "cpu-smoke", "--strict",
            "--", "--port", str(free_port), "--host", "127.0.0.1"]
    log_path = tmp_path / "vllm.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 900
            while proc.poll() is None and time.monotonic() < deadline:
                if "Application startup complete" in log_path.read_text(errors="replace"):
                    break
                time.sleep(2)
        finally:
            served = proc.poll() is None
            stop_group(proc)
    text = log_path.read_text(errors="replace")
    assert not served, "the server started with a router kernel that returns zeros:\n" + text[-3000:]
    assert proc.returncode != 0
    assert "error[self-check]" in text and "router_gemm" in text and "relative L2 error" in text, text[-3000:]
