"""Every benchmark of the project, apart from the product packages (it imports them; none of them imports it):

* :mod:`.kernels`      every kernel benchmark (``bench_<op>.py``) and their driver (``python -m r9k.bench.kernels``);
* :mod:`.timing`       the CUDA-graph timing harness they share;
* :mod:`.ncu_calls`    one launch of each GEMM kernel for Nsight Compute (``scripts/gpu.sh ncu``);
* ``bench_load``, ``bench_register``, ``bench_status``, ``bench_tui``: what the registry load, the plugin's
  start-up, the status and the control panel cost.

The decode-step model and its benchmark live in ``r9k.r9kctl.decode_step``.
"""
