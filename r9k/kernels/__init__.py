"""The project's kernels: one subpackage per fused op (stock reference, Triton kernel, gate test). Importing
this package imports neither torch nor triton; :func:`r9k.kernels.ops.load_all` imports the ops."""
