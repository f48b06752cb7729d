"""Counting what a decode step launches.

* :class:`LaunchCounter` (any machine, the interpreter included): every ATen op that does device work (not a
  view or an allocation) and every Triton launch, while active. It counts launch sites: a cuBLAS call that runs
  two kernels counts once, which is why the GPU figures come from the graph.
* :func:`graph_node_counts` (CUDA): the nodes of a captured CUDA graph by type, read from the driver."""
from __future__ import annotations

import contextlib
import ctypes
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# ATen ops that allocate without writing (no device work).
_ALLOC_ONLY = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "lift_fresh",
               "_local_scalar_dense", "resize_", "set_", "record_stream"}


def _is_launch(func) -> bool:
    """Whether an ATen overload does device work: neither a pure view nor an allocation."""
    name = func._schema.name.split("::")[-1]
    if name in _ALLOC_ONLY:
        return False
    rets = func._schema.returns
    if rets and all(r.alias_info is not None and not r.alias_info.is_write for r in rets):
        return False  # views: view, slice, select, transpose, expand, split, unbind, alias, detach...
    return True


class LaunchCounter(TorchDispatchMode):
    """``with LaunchCounter() as c: fn()`` -> ``c.total``, ``c.aten`` (Counter by op), ``c.triton`` (by kernel)."""

    def __init__(self):
        super().__init__()
        self.aten: Counter = Counter()
        self.triton: Counter = Counter()
        self._inside_triton = 0
        self._patches: list = []
        self.part: str | None = None
        self.by_part: Counter = Counter()  # launches per part (see part_scope)

    @property
    def total(self) -> int:
        return sum(self.aten.values()) + sum(self.triton.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self._inside_triton and _is_launch(func):
            self.aten[func._schema.name.split("::")[-1]] += 1
            self.by_part[self.part] += 1
        return func(*args, **(kwargs or {}))

    @contextlib.contextmanager
    def part_scope(self, name: str):
        """Attribute the launches inside to ``name`` (nested scopes: the innermost wins)."""
        prev, self.part = self.part, name
        try:
            yield
        finally:
            self.part = prev

    def __enter__(self):
        self._patch_triton()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            for cls, orig in self._patches:
                cls.run = orig
            self._patches.clear()

    def _patch_triton(self):
        classes = []
        try:
            from triton.runtime.jit import JITFunction

            classes.append(JITFunction)
        except ImportError:
            return
        try:
            from triton.runtime.interpreter import InterpretedFunction

            classes.append(InterpretedFunction)
        except ImportError:
            pass
        counter = self
        for cls in classes:
            orig = cls.run

            def run(fn_self, *args, __orig=orig, **kwargs):
                if kwargs.get("warmup"):
                    return __orig(fn_self, *args, **kwargs)
                counter.triton[getattr(fn_self, "__name__", None) or getattr(getattr(fn_self, "fn", None),
                                                                            "__name__", "triton")] += 1
                counter.by_part[counter.part] += 1
                counter._inside_triton += 1
                try:
                    return __orig(fn_self, *args, **kwargs)
                finally:
                    counter._inside_triton -= 1

            self._patches.append((cls, orig))
            cls.run = run


def count_launches(fn, *args, **kwargs) -> LaunchCounter:
    with LaunchCounter() as c:
        fn(*args, **kwargs)
    return c


# --------------------------------------------------------------------------------- CUDA graphs

_CU_KERNEL, _CU_MEMCPY, _CU_MEMSET = 0, 1, 2


def _libcuda():
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def graph_node_counts(raw_graph: int) -> dict:
    """``{"nodes", "kernels", "memcpy", "memset", "other"}`` of a ``cudaGraph_t`` (as
    ``torch.cuda.CUDAGraph(keep_graph=True).raw_cuda_graph()`` returns it), from the driver."""
    lib = _libcuda()
    if lib is None:
        raise RuntimeError("libcuda not found")
    n = ctypes.c_size_t(0)
    rc = lib.cuGraphGetNodes(ctypes.c_void_p(raw_graph), None, ctypes.byref(n))
    if rc != 0:
        raise RuntimeError(f"cuGraphGetNodes failed: {rc}")
    nodes = (ctypes.c_void_p * n.value)()
    rc = lib.cuGraphGetNodes(ctypes.c_void_p(raw_graph), nodes, ctypes.byref(n))
    if rc != 0:
        raise RuntimeError(f"cuGraphGetNodes failed: {rc}")
    kinds: Counter = Counter()
    t = ctypes.c_int(0)
    for i in range(n.value):
        if lib.cuGraphNodeGetType(ctypes.c_void_p(nodes[i]), ctypes.byref(t)) != 0:
            kinds["other"] += 1
            continue
        kinds[{_CU_KERNEL: "kernels", _CU_MEMCPY: "memcpy", _CU_MEMSET: "memset"}.get(t.value, "other")] += 1
    return {"nodes": int(n.value), "kernels": kinds["kernels"], "memcpy": kinds["memcpy"],
            "memset": kinds["memset"], "other": kinds["other"]}


def capture(fn, warmup: int = 2):
    """Capture ``fn()`` in a CUDA graph kept for inspection (and instantiated here, so the first replay is
    not slowed): ``(graph, output, node counts or None)``."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    try:
        g = torch.cuda.CUDAGraph(keep_graph=True)
        keep = True
    except TypeError:  # an older torch without keep_graph
        g, keep = torch.cuda.CUDAGraph(), False
    with torch.cuda.graph(g):
        out = fn()
    counts = None
    if keep:
        try:
            counts = graph_node_counts(g.raw_cuda_graph())
        except Exception as exc:  # noqa: BLE001 - reported, not guessed
            counts = {"error": repr(exc)}
        g.instantiate()
    torch.cuda.synchronize()
    return g, out, counts
