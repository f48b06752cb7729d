"""Tuned kernel configs per device, in data files beside each kernel: ``tuned_<device>.json``, the device
named by :func:`device_key` (``NVIDIA H200`` -> ``h200``). On a device without a file (any other GPU, the
interpreter) the kernels use their default-config rules, which are correct everywhere; a file is written only by
a ``--sweep`` benchmark on that device and is gate-tested in the same device run.
"""
from __future__ import annotations

import json
import os
import re


def device_key() -> str:
    """A short name of this process's first CUDA device (``h200``, ``h100-80gb-hbm3`` ...), ``cpu`` without one.
    ``R9K_TUNED_DEVICE`` overrides it (tests; a device that should borrow another's configs)."""
    env = os.environ.get("R9K_TUNED_DEVICE")
    if env:
        return env
    try:
        import torch

        if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
            return "cpu"
        name = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001 - no device: the defaults apply
        return "cpu"
    return slug(name)


def slug(device_name: str) -> str:
    """``NVIDIA H200`` -> ``h200``; ``NVIDIA H100 80GB HBM3`` -> ``h100-80gb-hbm3``."""
    name = re.sub(r"^(nvidia|amd)\s+", "", device_name.strip().lower())
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-")


def tuned_path(kernel_dir: str) -> str:
    """The tuned-config file of the kernel package in ``kernel_dir`` for this device."""
    return os.path.join(kernel_dir, f"tuned_{device_key()}.json")


def load(kernel_dir: str) -> dict:
    """This device's tuned configs of the package (``{}`` when it has none)."""
    return read(tuned_path(kernel_dir))


def read(path: str) -> dict:
    """A tuned-config file's JSON object (``{}`` when it is absent or unreadable: default configs)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
