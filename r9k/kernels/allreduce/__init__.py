"""The N-rank all-reduce variants (registry area ``comm``): one-shot, two-shot, the compressed
(Walsh-Hadamard-rotated, block-quantized) wire and the 4-rank 2x2 hierarchical schedule.

* :mod:`.algorithms`: the schedules over a ``torch.distributed`` group and the size rule that picks one
  (:class:`~.algorithms.Config`, from the registry's thresholds).
* :mod:`.quant`: the wire format in plain PyTorch (the reference codec).
* :mod:`.triton_kernel`: the codec's Triton kernels (imported on demand: it needs Triton).
* :mod:`.reference`: the stock path (``torch.distributed.all_reduce``: NCCL on GPUs), the fp64 sum and the
  stated error bounds.

Op ``allreduce`` (variant ``p2p_allreduce_hook``, knob R9K_R4D_AR): stock
:func:`.reference.all_reduce_stock` (the library's all-reduce), fused :func:`.algorithms.variant_all_reduce`
(the schedule :class:`~.algorithms.Config` picks for the message's size). The plugin installs it where vLLM
all-reduces (``r9k.plugin.allreduce``: the CPU backend's device communicator, the schedules over the same gloo
group; notes/allreduce.md).

The GPU transport (peer memory through PyTorch symmetric memory or CUDA IPC, multicast never used) is not
here yet: its kernels need a machine with several GPUs (notes/allreduce.md).
"""
from ..ops import KernelOp, register

from . import algorithms, reference

register(KernelOp(name="allreduce", variant="p2p_allreduce_hook", stock=reference.all_reduce_stock,
                  fused=algorithms.variant_all_reduce, fused_values=frozenset({"1"})))

__all__ = ["algorithms", "reference"]
