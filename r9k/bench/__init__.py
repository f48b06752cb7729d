"""Every benchmark of the project, apart from the product packages (it imports them; none of them imports it):
:mod:`.kernels` (``python -m r9k.bench.kernels``), the timing harness (:mod:`.timing`), :mod:`.ncu_calls` for
Nsight Compute, and what the registry load, the plugin's start-up, the status and the panel cost (``bench_*``).
"""
