"""The project's kernels: one subpackage per fused op, each with its stock reference, Triton kernel,
gate test and benchmark next to each other.

Importing this package is cheap: it imports neither torch nor triton. The ops register themselves in
:mod:`r9k.kernels.ops` when their module is imported; :func:`r9k.kernels.ops.load_all` imports them.
"""
