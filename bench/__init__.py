"""Every benchmark of the project, apart from the product packages (none of them imports this one; the
command line's ``r9kctl bench`` and ``r9kctl gate --pairs`` do):

* :mod:`.decode_step`  the decode-step model (one Flash-Next TP4 rank from the project's ops) and its benchmark;
* :mod:`.kernels`      every kernel benchmark (``bench_<op>.py``) and their driver (``python -m r9k.bench.kernels``);
* :mod:`.timing`       the CUDA-graph timing harness they share;
* :mod:`.ncu_calls`    one launch of each GEMM kernel for Nsight Compute (``scripts/gpu.sh ncu``);
* ``bench_load``, ``bench_register``, ``bench_status``, ``bench_tui``: what the registry load, the plugin's
  start-up, the status and the control panel cost.
"""
