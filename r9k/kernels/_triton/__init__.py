"""Shared Triton helpers of the kernel packages (device helpers, counters, launch counting, PDL, tuned
configs, vLLM's own kernels for side-by-side runs)."""
