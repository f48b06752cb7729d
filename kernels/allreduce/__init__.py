"""The N-rank all-reduce variants (registry area ``comm``): one-shot, two-shot, the compressed
(Walsh-Hadamard-rotated, block-quantized) wire and the 4-rank 2x2 hierarchical schedule.

* :mod:`.algorithms`: the schedules over a ``torch.distributed`` group and the size rule that picks one
  (:class:`~.algorithms.Config`, from the registry's thresholds).
* :mod:`.quant`: the wire format in plain PyTorch (the reference codec).
* :mod:`.triton_kernel`: the codec's Triton kernels (imported on demand: it needs Triton).
* :mod:`.reference`: the stock path (``torch.distributed.all_reduce``: NCCL on GPUs), the fp64 sum and the
  stated error bounds.

The GPU transport (peer memory through PyTorch symmetric memory or CUDA IPC, multicast never used) is not
here yet: its kernels need a machine with several GPUs (notes/allreduce.md).
"""

#: Why no registry variant names this folder as its implementation yet (tests/plugin/test_declared_once.py
#: accepts a kernel folder without a variant only with such a reason): the schedules are not installed in vLLM.
NOT_SERVED = ("not installed where vLLM all-reduces yet (its communicator classes); the registry's all-reduce "
              "variants stay env-only, the original's HIP code (notes/allreduce.md)")
