"""The kernel benchmarks, one module per op (``bench_<op>.py``), run by ``python -m r9k.bench.kernels [OP ...]``."""
