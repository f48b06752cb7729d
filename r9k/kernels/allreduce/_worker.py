"""What each rank of the all-reduce tests runs (a module of its own: ``torch.multiprocessing.spawn``
imports it by name in every child). Every rank draws every rank's input from the same seeds, checks its result
against the fp64 sum and the stated bound, and compares it bitwise with the others' through an all-gather."""
from __future__ import annotations

import json
import os
import traceback

import torch
import torch.distributed as dist

from . import algorithms, quant, reference


def inputs(seed: int, world: int, n: int, dtype, heavy: bool):
    xs = []
    for r in range(world):
        g = torch.Generator().manual_seed(seed * 131 + r)
        if heavy:  # Student-t with 2 degrees of freedom: heavy tails, the case the rotation is for
            z = torch.randn(n, generator=g)
            chi = torch.randn(2, n, generator=g).pow(2).sum(0)
            x = z / (chi / 2).sqrt().clamp_min(1e-3)
        else:
            x = torch.randn(n, generator=g)
        xs.append(x.to(dtype))
    return xs


def _identical(out: torch.Tensor) -> bool:
    outs = [torch.empty_like(out) for _ in range(dist.get_world_size())]
    dist.all_gather(outs, out.contiguous())
    return all(torch.equal(o.view(torch.uint8) if o.dtype != torch.bool else o, out.view(torch.uint8))
               for o in outs)


def spawn_entry(rank: int, world: int, port: int, seed: int, out_dir: str, codec_name: str, iters: int) -> None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    results = {"rank": rank, "checks": 0, "failures": [], "rms": {}}
    try:
        if codec_name == "fused":
            from .triton_kernel import TritonCodec as codec
        else:
            codec = algorithms.TorchCodec

        def fail(msg):
            results["failures"].append(msg)

        # exact schedules: many iterations with fresh data (a race or a wrong index shows as a moving error)
        for it in range(iters):
            for dtype in (torch.float32, torch.bfloat16):
                n = [1, 7, 1000, 2560, 4099][it % 5] * (1 + it % 3)
                xs = inputs(seed + it, world, n, dtype, heavy=bool(it % 2))
                x = xs[rank]
                fixed = algorithms.fixed_order_sum(xs, dtype)
                for name, fn in (("one_shot", algorithms.one_shot), ("two_shot", algorithms.two_shot)):
                    out = fn(x, None)
                    results["checks"] += 1
                    if not torch.equal(out, fixed):
                        fail(f"{name} it={it} {dtype} n={n}: not the fixed-order sum")
                    if not _identical(out):
                        fail(f"{name} it={it} {dtype} n={n}: ranks disagree")
                    err = (out.double() - reference.exact_sum(xs)).abs()
                    if not bool((err <= reference.exact_schedule_bound(xs, dtype)).all()):
                        fail(f"{name} it={it} {dtype} n={n}: outside the fp32 accumulation bound")
        # compressed schedules, both widths, plain and heavy-tailed inputs
        schedules = [("compressed_one_shot", algorithms.compressed_one_shot),
                     ("compressed_two_shot", algorithms.compressed_two_shot)]
        if world == 4:
            schedules.append(("hier4", algorithms.hier4))
        for name, fn in schedules:
            for bits in (4, 6):
                for heavy in (False, True):
                    for dtype, n in ((torch.float32, 5000), (torch.bfloat16, 16384)):
                        xs = inputs(seed + 7 * bits + heavy, world, n, dtype, heavy)
                        out = fn(xs[rank], None, bits, quant.DEFAULT_BLOCK, codec)
                        results["checks"] += 1
                        if not _identical(out):
                            fail(f"{name} {bits}-bit heavy={heavy} {dtype}: ranks disagree")
                        errs = reference.block_errors(out, xs)
                        bound = reference.error_bound(xs, name, bits, quant.DEFAULT_BLOCK, dtype)
                        over = int((errs > bound).sum())
                        if over:
                            i = int((errs / bound).argmax())
                            fail(f"{name} {bits}-bit heavy={heavy} {dtype}: {over} blocks over the bound "
                                 f"(block {i}: {float(errs[i]):.4g} > {float(bound[i]):.4g})")
                        if dtype == torch.float32:
                            results["rms"][f"{name}/{bits}/{'heavy' if heavy else 'normal'}"] = \
                                reference.rel_rms(out, xs)
        # the size rule picks the schedule the registry's thresholds say, and the result is the sum
        cfg = algorithms.Config(enabled=True, ar2_compressed=True, ar2_min_kb=16, oneshot_kb=1, max_kb=8,
                                ar4_compressed=True)
        for n in (64, 1024, 8192):
            xs = inputs(seed + n, world, n, torch.float32, False)
            kind, out = algorithms.all_reduce(xs[rank], cfg, None, codec)
            results.setdefault("kinds", {})[str(n)] = kind
            if kind in ("stock", "one_shot", "two_shot"):
                err = (out.double() - reference.exact_sum(xs)).abs()
                if not bool((err <= reference.exact_schedule_bound(xs, torch.float32) + 1e-6 * err.new_ones(1)).all()):
                    fail(f"all_reduce {kind} n={n}: wrong sum")
            else:
                if bool((reference.block_errors(out, xs) > reference.error_bound(xs, kind, 4)).any()):
                    fail(f"all_reduce {kind} n={n}: over its bound")
    except Exception:
        results["failures"].append(traceback.format_exc())
    finally:
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(results, f)
        dist.destroy_process_group()
