"""Model-registry hooks (``ModelRegistry.register_model(arch, "module:Class")``), for a piece of a model that runs
in a plain ``nn.Module`` vLLM offers no layer-level extension point for (notes/independence.md). The class is
given as a string, so only a process that resolves the architecture imports it.
"""
from __future__ import annotations

import logging

logger = logging.getLogger("vllm.r9k")

#: architecture -> this project's subclass of vLLM's model class
MODELS = {
    "Qwen3NextForCausalLM": "r9k.plugin.layers.qwen3_next:R9kQwen3NextForCausalLM",
}


def install_qwen3_next(registry_module) -> None:
    """``model_registry:Qwen3NextForCausalLM``: vLLM builds :class:`R9kQwen3NextForCausalLM` for it."""
    _register(registry_module, "Qwen3NextForCausalLM")


def _register(registry_module, arch: str) -> None:
    reg = registry_module.ModelRegistry
    ref = MODELS[arch]
    current = reg.models.get(arch)
    if current is not None and getattr(current, "module_name", None) == ref.split(":")[0]:
        return  # already ours (idempotent)
    reg.register_model(arch, ref)
    logger.debug("r9k: registered %s for architecture %s", ref, arch)
