"""Shared Triton helpers of every kernel package: device helpers (``common``), arrival counters
(``counters``), the CUDA-graph timing harness (``timing``), programmatic dependent launch (``pdl``), vLLM's own
kernels loaded from its sources for side-by-side runs (``vllm_peer``), per-device tuned configs (``tuned``) and
the one benchmark driver (``bench``)."""
