"""Tuned kernel configs per device: ``tuned_<device>.json`` beside each kernel, written by a ``--sweep``
benchmark on that device and gate-tested in the same run; without one the default-config rules apply."""
from __future__ import annotations

import json
import os
import re


def device_key() -> str:
    """A short name of the first CUDA device (``h200``, ``h100-80gb-hbm3`` ...), ``cpu`` without one;
    ``R9K_TUNED_DEVICE`` overrides it."""
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
    name = re.sub(r"^(nvidia|amd)\s+", "", device_name.strip().lower())
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-")


def tuned_path(kernel_dir: str) -> str:
    return os.path.join(kernel_dir, f"tuned_{device_key()}.json")


def load(kernel_dir: str) -> dict:
    return read(tuned_path(kernel_dir))


def read(path: str) -> dict:
    """A tuned-config file's JSON object (``{}`` when absent or unreadable: default configs)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
