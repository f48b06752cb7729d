"""Model architectures this plugin brings to vLLM (``ModelRegistry``), where vLLM's own cannot run.

``Qwen4ExpForCausalLM`` (Flash-Next; adapter ``model_registry:Qwen4ExpForCausalLM``): vLLM's own model is CUDA
and ROCm only, so on the CPU backend :class:`r9k.plugin.models.flash_next.FlashNextForCausalLM` serves it, with
this project's hyper-connection kernels. Elsewhere vLLM's own serves it, and the hc kernels (not wired into it)
are reported kept.
"""
from __future__ import annotations

import logging

logger = logging.getLogger("vllm.r9k")

REGISTRY_MODULE = "vllm.model_executor.models.registry"
FLASH_NEXT_ARCH = "Qwen4ExpForCausalLM"
FLASH_NEXT_CLASS = "r9k.plugin.models.flash_next:FlashNextForCausalLM"
#: the ops the Flash-Next build runs through the dispatch table
FLASH_NEXT_OPS = ("hc_mix", "qsa_glue")
#: op -> the op that takes its place in a module where both are chosen: the module records the first as kept,
#: with reason ``SUPERSEDED + other``, and the status reports it superseded, not installed
SUPERSEDED_BY = {"hc_mix": "hc_mix_fp8"}
SUPERSEDED = "superseded by "


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def register_architectures(registry_module) -> None:
    """In every active plugin process: on the CPU backend, vLLM builds this project's Flash-Next."""
    if _on_cpu():
        _register(registry_module)


def install_flash_next(registry_module) -> None:
    """``model_registry:Qwen4ExpForCausalLM``, the hc variants' adapter: on the CPU backend this project's
    Flash-Next; elsewhere said, not done."""
    from .. import report

    if not _on_cpu():
        for op in FLASH_NEXT_OPS:
            report.layer(op, FLASH_NEXT_ARCH, installed=False,
                           reason="vLLM's own Qwen4Exp serves this architecture here; the kernel is not wired into it")
        logger.warning("r9k: %s is served by vLLM's own Qwen4Exp on this platform; this project's %s kernels "
                       "are not wired into it and keep vLLM's path", FLASH_NEXT_ARCH, ", ".join(FLASH_NEXT_OPS))
        return
    _register(registry_module)


def _register(registry_module) -> None:
    reg = registry_module.ModelRegistry
    current = reg.models.get(FLASH_NEXT_ARCH)
    if current is not None and getattr(current, "module_name", None) == FLASH_NEXT_CLASS.split(":")[0]:
        return  # already ours (idempotent)
    reg.register_model(FLASH_NEXT_ARCH, FLASH_NEXT_CLASS)
    logger.debug("r9k: registered %s for architecture %s", FLASH_NEXT_CLASS, FLASH_NEXT_ARCH)
