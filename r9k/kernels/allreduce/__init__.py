"""The N-rank all-reduce variants (registry area ``comm``): one-shot, two-shot, the compressed
(Walsh-Hadamard-rotated, block-quantized) wire and the 4-rank 2x2 hierarchical schedule (notes/allreduce.md).

Op ``allreduce`` (variant ``p2p_allreduce_hook``, knob R9K_R4D_AR): stock :func:`.reference.all_reduce_stock`,
fused :func:`.algorithms.variant_all_reduce` (the schedule :class:`~.algorithms.Config` picks for the message's
size). The GPU transport (peer memory) is not here yet: its kernels need a machine with several GPUs."""
from ..ops import KernelOp, register

from . import algorithms, reference

register(KernelOp(name="allreduce", variant="p2p_allreduce_hook", stock=reference.all_reduce_stock,
                  fused=algorithms.variant_all_reduce, fused_values=frozenset({"1"})))

__all__ = ["algorithms", "reference"]
