"""Shared Triton helpers of every kernel package: device helpers (``common``), arrival counters
(``counters``), launch counting (``launches``), programmatic dependent launch (``pdl``), vLLM's own kernels
loaded from its sources for side-by-side runs (``vllm_peer``), per-device tuned configs (``tuned``). The
benchmarks and their timing harness live in ``bench/``."""
