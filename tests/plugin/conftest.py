"""Fixtures of the plugin tests.

* ``TRITON_INTERPRET=1`` when no CUDA device is visible, set before any kernel module is imported
  (Triton decides at decoration time whether a kernel runs on a GPU or in its CPU interpreter).
* ``plugin_env``: an environment without any ``R9K_*`` variable, a private cache directory, and a
  plugin that has not registered yet in this process (undone after the test).
* ``vllm_ctx``: a one-rank vLLM distributed context on the CPU, once per test module.
"""
from __future__ import annotations

import os

import pytest
from servers import free_port

from r9k.registry import envvars

try:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:
    pass


@pytest.fixture
def plugin_env(monkeypatch, tmp_path):
    from r9k.plugin import report
    import r9k.plugin as plugin

    for k in list(os.environ):
        if k.startswith(("R9K_", "_R9K_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv(envvars.CACHE_DIR.name, str(tmp_path / "cache"))
    import vllm.envs as envs
    from vllm.model_executor.custom_op import op_registry_oot

    from r9k.plugin.install import HOOKS

    saved_env_vars = dict(envs.environment_variables)
    saved_oot = dict(op_registry_oot)
    report.reset_for_tests()
    yield monkeypatch
    report.reset_for_tests()
    envs.environment_variables.clear()
    envs.environment_variables.update(saved_env_vars)
    op_registry_oot.clear()
    op_registry_oot.update(saved_oot)
    HOOKS.pending.clear()


@pytest.fixture(scope="module")
def vllm_ctx():
    """A one-rank vLLM distributed context (the layers need a TP group), on the CPU."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.distributed.parallel_state import model_parallel_is_initialized

    cfg = VllmConfig()
    with set_current_vllm_config(cfg):
        if not model_parallel_is_initialized():
            port = free_port()
            init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                         distributed_init_method=f"tcp://127.0.0.1:{port}")
            initialize_model_parallel(1, 1)
        yield cfg


@pytest.fixture(scope="session")
def registry():
    from r9k.registry import load_registry

    return load_registry()


@pytest.fixture
def seed() -> int:
    """A fresh seed per test (``envvars.TEST_SEED`` replays one); printed with a failing test's output."""
    import random

    s = int(envvars.TEST_SEED.get() or random.SystemRandom().randrange(2**31))
    print(f"seed={s}")
    return s
