"""What a Flash-Next checkpoint must say for the plugin's CPU build to serve it (no torch, no vLLM): ``r9kctl
launch`` runs :func:`precheck` before anything starts, the model :func:`check_config` again when vLLM builds it.
One line per fault, naming the file and the field.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Optional
from ...registry import fileio
from ..quant import check_checkpoint

ARCHITECTURE = "Qwen4ExpForCausalLM"
GDN, QSA = "linear_attention", ("indexed_attention", "qwen_sparse_attention", "full_attention")


class CheckpointError(ValueError):
    """A checkpoint whose config does not describe this architecture: ``file``, ``detail`` (field: why)."""

    def __init__(self, file: str, detail: str):
        super().__init__(f"{file}: error[bad-config]: {detail} (architecture {ARCHITECTURE})")
        self.file, self.detail = file, detail


def check_config(config, max_model_len: Optional[int] = None) -> None:
    """Refuse, before any weight is read, a config this model cannot serve (one line naming the field)."""
    src = getattr(config, "_name_or_path", "") or "the checkpoint"

    def bad(field: str, why: str):
        raise CheckpointError(f"{src}/config.json", f"{field}: {why}")

    for field in ("hc_count", "hc_lowrank", "layer_types", "num_experts", "linear_num_value_heads"):
        if getattr(config, field, None) is None:
            bad(field, "missing")
    if config.hc_count < 2:
        bad("hc_count", f"{config.hc_count}; the hyper-connections need at least 2 streams")
    kinds = list(config.layer_types)
    if len(kinds) != config.num_hidden_layers:
        bad("layer_types", f"{len(kinds)} entries for num_hidden_layers = {config.num_hidden_layers}")
    unknown = sorted({k for k in kinds if k != GDN and k not in QSA})
    if unknown:
        bad("layer_types", f"unknown layer kinds {unknown}")
    if getattr(config, "ple_layer_ids", None):
        bad("ple_layer_ids", f"{list(config.ple_layer_ids)}: the per-layer n-gram embedding is not built on this backend")
    budget = getattr(config, "indexer_budget", None)
    context = getattr(config, "max_position_embeddings", None)
    if budget is not None and context is not None and budget > context:
        bad("indexer_budget", f"{budget} > max_position_embeddings {context}: the indexer would select more "
            "tokens than the model can ever hold")


def precheck(model_dir: str, max_model_len: Optional[int]) -> Optional[CheckpointError]:
    """For a local checkpoint of this architecture: why it cannot be served, or None (also for other models)."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return None

    try:
        cfg = json.loads(fileio.read_text(path, "checkpoint config"))
    except fileio.FileError as exc:
        return CheckpointError(str(path), f"unreadable: {exc}")
    except ValueError as exc:
        return CheckpointError(str(path), f"not JSON: {exc}")
    if not isinstance(cfg, dict) or ARCHITECTURE not in (cfg.get("architectures") or []):
        return None
    cfg = dict(cfg.get("text_config") or cfg, _name_or_path=str(model_dir))
    try:
        check_config(SimpleNamespace(**cfg), max_model_len)
        check_weights(str(model_dir))
    except CheckpointError as exc:
        return exc
    return None


def check_weights(model_dir: str) -> None:
    """A block-fp8 checkpoint's fp8 tensors and scales (:func:`r9k.plugin.quant.check_checkpoint`)."""
    fault = check_checkpoint(model_dir)
    if fault is not None:
        raise CheckpointError(fault.file, f"{fault.tensor}: {fault.why}")
