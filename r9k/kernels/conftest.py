"""Shared pytest set-up for the kernel gate tests (both kernel areas rely on it).

* Without a CUDA device, ``TRITON_INTERPRET=1`` is set here, before any test module (and so any
  ``@triton.jit`` kernel) is imported: Triton decides at decoration time whether a kernel runs on the
  GPU or in its CPU interpreter.
* Tests marked ``@pytest.mark.gpu`` are skipped, with the reason, when no CUDA device is visible.
* Fixtures: ``device`` ("cuda" or "cpu"), ``poison`` (fill an output with NaN, or a sentinel for integer
  tensors, before a kernel call so unwritten elements show), ``seed`` and ``rng`` (a fresh seed for every
  test, printed so a failure can be replayed with ``R9K_TEST_SEED=<seed>``).
"""
from __future__ import annotations

import os

import pytest

try:
    import torch

    HAS_CUDA = torch.cuda.is_available()
except ImportError:  # the core test-suite runs without torch; kernel tests then skip on import
    torch = None
    HAS_CUDA = False

if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

GPU_SKIP_REASON = (
    "needs a CUDA GPU (none visible here); the real-shape gates run on the H200 through "
    "scripts/gpu.sh gates (all kernels; results imported with r9kctl gate --import-junit)"
)


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # a marker, not a keyword: a folder named gpu matches those
            item.add_marker(skip)


@pytest.fixture
def device() -> str:
    return "cuda" if HAS_CUDA else "cpu"


@pytest.fixture
def seed() -> int:
    """A fresh seed per test (or ``R9K_TEST_SEED`` to replay one); printed with the test's output."""
    env = os.environ.get("R9K_TEST_SEED")
    s = int(env) if env else int.from_bytes(os.urandom(4), "little")
    print(f"seed={s}")
    return s


@pytest.fixture
def rng(seed, device):
    """A torch.Generator on the test's device, seeded with this test's fresh seed."""
    if torch is None:
        pytest.skip("torch is not installed")
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def _poison(t):
    """Fill ``t`` in place with a value no kernel writes by accident; returns ``t``."""
    if t.dtype.is_floating_point:
        if t.dtype in (torch.float8_e4m3fn,):
            t.view(torch.uint8).fill_(0x7F)  # e4m3fn NaN
        else:
            t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(torch.iinfo(t.dtype).min)
    return t


@pytest.fixture
def poison():
    return _poison
