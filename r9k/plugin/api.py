"""What the command line needs from the plugin, in one place: ``r9kctl`` imports nothing else of ``r9k.plugin``
(tests/core/test_import_map.py checks it). Importing this module loads no torch and no vLLM.
"""
from __future__ import annotations

from .models.checkpoint import ARCHITECTURE, precheck
from .report import HOOKED, RUNNERS, merged_status
from .report import kv_line as kv_cache_line
from .tiny_model import resolve_model_ref
from ..kernels._triton.vllm_peer import source_root as vllm_source_root

__all__ = ["ARCHITECTURE", "HOOKED", "RUNNERS", "kv_cache_line", "merged_status", "precheck", "resolve_model_ref", "vllm_source_root"]
