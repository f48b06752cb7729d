"""What the command line needs from the plugin, in one place: ``r9kctl`` imports nothing else of
``r9k.plugin`` (tests/core/test_import_map.py checks it). Each name is the plugin's own, re-exported;
importing this module loads no torch and no vLLM.

* models the plugin builds: :func:`resolve_model_ref` (a ``tiny:`` reference to a checkpoint in the cache),
  :data:`ARCHITECTURE` and :func:`precheck` (the Flash-Next checkpoint check before anything starts);
* the status: :func:`merged_status` (one view of every process's section), :func:`kv_cache_line`;
* where vLLM's sources are (``r9kctl doctor``): :func:`vllm_source_root`, the folder the kernels' peer loader reads;
* the model runners the plugin hooks (``r9kctl doctor``'s runner check): :data:`RUNNERS`, :data:`HOOKED`.
"""
from __future__ import annotations

from .models.checkpoint import ARCHITECTURE, precheck
from .report import HOOKED, RUNNERS, merged_status
from .report import kv_line as kv_cache_line
from .tiny_model import resolve_model_ref
from ..kernels._triton.vllm_peer import source_root as vllm_source_root

__all__ = ["ARCHITECTURE", "HOOKED", "RUNNERS", "kv_cache_line", "merged_status", "precheck", "resolve_model_ref", "vllm_source_root"]
