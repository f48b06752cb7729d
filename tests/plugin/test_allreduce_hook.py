"""The all-reduce variants' install in vLLM's device communicator (r9k.plugin.allreduce), in process.

* the registry's knobs at each TP size -> the size rule's Config, and which schedule each message size takes;
* validation of the knobs (a negative threshold, a width the wire does not have, a variant at a TP size it is
  not defined for): one located line, exit code 2, as every knob;
* the install through CpuPlatform.get_device_communicator_cls (idempotent, refuses another plugin's class);
* which groups get a hook (tensor-parallel ones, switch on, gloo) and the reason recorded otherwise;
* in a real 2-rank gloo group (two processes): the counters per call (``fused:<schedule>``,
  ``fallback:<size class>``), the in-server check against the stock all-reduce, and a check that fails
  (a stock path off by a little) turning the schedule off.
"""
from __future__ import annotations

import json
import sys

import pytest
from servers import free_port

torch = pytest.importorskip("torch")

from r9k.plugin import allreduce as ar  # noqa: E402
from r9k.registry import manifest as mf  # noqa: E402
from r9k.registry.resolve import resolve  # noqa: E402

KB, MB = 1024, 1024 * 1024


def _set(registry, tp, **sets):
    return mf.from_resolved(resolve(registry, "cpu-smoke", tp=tp, env={}, sets=sets))


def test_registry_values_make_the_size_rule(registry):
    # the release's TP 2 defaults (tp2-default: switch on, 48 MiB, compressed 4-bit from 128 KB)
    rs2 = mf.from_resolved(resolve(registry, "tp2-default", env={}))
    cfg, why = ar.config_from(rs2, 2)
    assert not why and (cfg.enabled, cfg.two_rank_max_mb, cfg.ar2_compressed, cfg.ar2_bits, cfg.ar2_min_kb) == \
        (True, 48, True, 4, 128)
    assert [cfg.choose(n, 2) for n in (512, 128 * KB - 2, 128 * KB)] == ["one_shot", "one_shot", "compressed_one_shot"]
    # TP 4: the N-rank thresholds and the 4-rank compressed path
    rs4 = mf.from_resolved(resolve(registry, "tp4-default", env={}))
    cfg4, why4 = ar.config_from(rs4, 4)
    assert not why4 and (cfg4.oneshot_kb, cfg4.max_kb, cfg4.ar4_compressed, cfg4.ar4_bits, cfg4.ar4_max_mb) == \
        (16, 512, True, 4, 64)
    assert [cfg4.choose(n, 4) for n in (16 * KB, 16 * KB + 2, 512 * KB + 2, 64 * MB + 2)] == \
        ["one_shot", "two_shot", "hier4", "stock"]
    # a profile's values win; the switch off is vLLM's all-reduce, said so
    cfg, why = ar.config_from(_set(registry, 2, R9K_R4D_AR="1", R9K_R4D_AR_MAX_MB="1"), 2)
    assert not why and [cfg.choose(n, 2) for n in (MB, MB + 2)] == ["one_shot", "stock"]
    cfg, why = ar.config_from(_set(registry, 2), 2)
    assert not cfg.enabled and why.startswith("R9K_R4D_AR=0")


def test_a_threshold_without_a_value_at_this_tp_is_not_invented(registry):
    # cpu-smoke at TP 4 has no N-rank thresholds (the release declares them for TP 4 only on its own profiles)
    rs = _set(registry, 4, R9K_R4D_AR="1")
    cfg, why = ar.config_from(rs, 4)
    assert not cfg.enabled and "R9K_ARN_1S_KB has no value at TP 4" in why
    cfg, why = ar.config_from(_set(registry, 4, R9K_R4D_AR="1", R9K_ARN_1S_KB="8", R9K_ARN_MAX_KB="64"), 4)
    assert not why and [cfg.choose(n, 4) for n in (8 * KB, 64 * KB, 64 * KB + 2)] == ["one_shot", "two_shot", "stock"]
    assert ar.stock_reason(cfg, 64 * KB + 2, 4) == "size>64KB"
    assert ar.stock_reason(cfg, 64 * KB + 2, 3) == "size>64KB (no compressed schedule at 3 ranks)"


@pytest.mark.parametrize("sets, code, words", [
    ({"R9K_AR_QUANT_MIN_KB": "-1"}, "bad-value", "R9K_AR_QUANT_MIN_KB"),
    ({"R9K_AR_QUANT_BITS": "5"}, "bad-value", "R9K_AR_QUANT_BITS"),
    ({"R9K_AR4": "1"}, "unsupported-tp", "R9K_AR4=1"),
    ({"R9K_AR_QUANT": "1", "R9K_R4D_AR": "0"}, "requires", "R9K_AR_QUANT=1"),
])
def test_bad_values_are_one_located_line_and_exit_2(tmp_path, sets, code, words):
    import os
    import subprocess

    args = [sys.executable, "-m", "r9k.r9kctl.cli", "--plain", "validate", "--profile", "cpu-smoke", "--tp", "2"]
    base = {"R9K_R4D_AR": "1", "R9K_AR_QUANT": "1"}
    for k, v in {**base, **sets}.items():
        args += ["--set", f"{k}={v}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("R9K_")}
    p = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    lines = [ln for ln in p.stderr.splitlines() if f"error[{code}]" in ln]
    assert p.returncode == 2 and len(lines) == 1 and words in lines[0], p.stdout + p.stderr
    assert lines[0].split(":")[2].isdigit() or lines[0].startswith("--set"), lines[0]  # file:line:col or the --set
    assert "Traceback" not in p.stderr


def test_install_names_our_communicator_once(monkeypatch):
    import vllm.platforms.cpu as cpu

    monkeypatch.setattr(cpu.CpuPlatform, "get_device_communicator_cls", cpu.CpuPlatform.get_device_communicator_cls)
    assert cpu.CpuPlatform.get_device_communicator_cls() == ar.STOCK_CPU
    ar.install_cpu(cpu)
    ar.install_cpu(cpu)  # idempotent
    assert cpu.CpuPlatform.get_device_communicator_cls() == ar.OURS
    from vllm.distributed.device_communicators.cpu_communicator import CpuCommunicator
    from vllm.utils.import_utils import resolve_obj_by_qualname

    cls = resolve_obj_by_qualname(cpu.CpuPlatform.get_device_communicator_cls())  # what GroupCoordinator does
    assert issubclass(cls, CpuCommunicator) and cls.__name__ == "R9kCpuCommunicator"
    assert set(vars(cls)) & {"all_reduce", "all_gather", "reduce_scatter"} == {"all_reduce"}
    monkeypatch.setattr(cpu.CpuPlatform, "get_device_communicator_cls", classmethod(lambda c: "other.Comm"))
    with pytest.raises(ar.InstallError, match="already names the device communicator other.Comm"):
        ar.install_cpu(cpu)


def test_which_groups_get_the_hook(registry, plugin_env):
    from r9k.plugin import report, dispatch

    report.reset()
    rs = _set(registry, 2, R9K_R4D_AR="1")
    table = dispatch.DispatchTable(rs, platform_probe=lambda: "interpret")
    table.plan()
    assert table.plans[ar.SWITCH].state is mf.Impl.FUSED
    dispatch.set_table(table)
    try:
        assert ar.attach("pp:0", None, 2, None) is None  # not tensor-parallel: vLLM's, nothing recorded
        assert ar.attach("tp:0", None, 1, None) is None  # one rank: nothing to reduce
        assert report.snapshot() == {}
        table.plans[ar.SWITCH].state, table.plans[ar.SWITCH].reason = mf.Impl.FALLBACK, "no Triton backend"
        assert ar.attach("tp:0", None, 2, None) is None
        assert report.snapshot()[ar.OP]["kept"] == {"no Triton backend": ["group tp:0 (2 ranks)"]}
        stock = dispatch.DispatchTable(_set(registry, 2), platform_probe=lambda: "interpret")
        stock.plan()
        dispatch.set_table(stock)
        report.reset()
        assert ar.attach("tp:0", None, 2, None) is None and report.snapshot() == {}  # at stock: vLLM's, silent
    finally:
        dispatch.set_table(None)
        report.reset()




def _rank(rank: int, port: int, out: str) -> None:
    """One rank of a 2-rank gloo group: hooks as the plugin builds them, calls of each size class."""
    import torch.distributed as dist

    from r9k.kernels.allreduce import algorithms
    from r9k.plugin import allreduce as ar_, report as c

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    group = dist.new_group([0, 1], backend="gloo")
    res = {}

    def stock(y):
        dist.all_reduce(y, group=group)
        return y

    def off_by_one_ulp(y):  # a stock path that is not the sum: the exact schedule must no longer equal it
        dist.all_reduce(y, group=group)
        return y + y.abs() * 2.0 ** -7

    def toward_zero(y):  # vLLM's shared-memory all-reduce of its AVX-512 build without BF16 (_C_AVX512): the
        s = y.float()    # fp32 sum with its low 16 bits dropped
        dist.all_reduce(s, group=group)
        return (s.view(torch.int32) >> 16).to(torch.int16).view(torch.bfloat16)

    def flush_subnormals(y):  # ... of its AVX-512 BF16 build (_C, vcvtneps2bf16): to nearest, subnormals to 0
        s = y.float()
        dist.all_reduce(s, group=group)
        return torch.where(s.abs() < torch.finfo(torch.bfloat16).tiny, 0.0, s).to(torch.bfloat16)

    cfg = algorithms.Config(enabled=True, two_rank_max_mb=1, ar2_compressed=True, ar2_bits=4, ar2_min_kb=16)
    gen = torch.Generator().manual_seed(99 + rank)
    for name, transport in (("trunc", toward_zero), ("ftz", flush_subnormals)):
        h = ar_.Hook(f"tp:{name}", group, 2, cfg, transport, check=True)
        x = torch.randn(2000, generator=gen).to(torch.bfloat16)
        x[:64] = torch.randn(64, generator=gen) * 1e-39  # sums in the subnormal range
        h.run(x)
        res[name] = h.off
    c.reset()
    gen = torch.Generator().manual_seed(1234 + rank)
    hook = ar_.Hook("tp:0", group, 2, cfg, stock, check=True)
    outs = []
    for n in (3, 100, 4096, 8192):  # bf16: 6 B and 200 B exact, 8 KB and 16 KB: the latter compressed
        x = torch.randn(n, generator=gen).to(torch.bfloat16)
        y = hook.run(x)
        outs.append((y.dtype == x.dtype and y.shape == x.shape, bool(torch.equal(y, stock(x.clone())))))
    ints = hook.run(torch.arange(4, dtype=torch.int32))
    # non-finite inputs (vLLM's profiling run reduces uninitialised memory): no false alarm in either schedule
    for n in (100, 8192):
        x = torch.randn(n, generator=gen).to(torch.bfloat16)
        x[5], x[300 % n] = float("nan"), float("inf") * (1 if rank else -1)
        x[-128:] = 3e38 * (1 if rank else -1)  # finite, but its fp32 rotation overflows: no finite bound
        hook.run(x)
    capped = ar_.Hook("tp:2", group, 2, algorithms.Config(enabled=True, two_rank_max_mb=0), stock, check=True)
    res["capped"] = bool(torch.equal(capped.run(torch.ones(8)), torch.full((8,), 2.0)))
    res["ints"] = ints.tolist()
    res["outs"] = outs
    res["calls"] = c.snapshot()[ar_.OP]["calls"]
    c.reset()
    bad = ar_.Hook("tp:1", group, 2, cfg, off_by_one_ulp, check=True)
    for _ in range(2):
        bad.run(torch.randn(64, generator=gen).to(torch.bfloat16))
    res["bad_calls"] = c.snapshot()[ar_.OP]["calls"]
    res["bad_off"] = bad.off
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


def test_counters_and_the_check_in_a_two_rank_group(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_rank, args=(free_port(), str(tmp_path)), nprocs=2, join=True)
    for r in range(2):
        res = json.loads((tmp_path / f"rank{r}.json").read_text())
        # one-shot calls equal the stock sum bitwise; the compressed one is not equal (4-bit wire) but checked
        assert [o[0] for o in res["outs"]] == [True] * 4 and [o[1] for o in res["outs"]][:3] == [True] * 3
        assert res["outs"][3][1] is False
        assert res["ints"] == [0, 2, 4, 6]
        assert res["calls"] == {"fused:one_shot": 4, "checked:one_shot": 4, "fused:compressed_one_shot": 2,
                                "checked:compressed_one_shot": 2, "fallback:dtype int32": 1, "fallback:size>0MiB": 1}, res["calls"]
        assert res["capped"]
        # the check caught the wrong stock path: the schedule is off, the next call goes to vLLM's path
        assert res["bad_calls"] == {"fused:one_shot": 1, "checked:one_shot": 1, "check-failed:one_shot": 1,
                                    "fallback:check failed": 1}, res["bad_calls"]
        assert "differ from vLLM's all-reduce" in res["bad_off"]["one_shot"]
        # vLLM's shared-memory transports round the same fp32 sum otherwise (toward zero, or subnormals to 0):
        # a rounding of the same sum, not a failure (issue 34: every call failed on an AVX-512 machine)
        assert res["trunc"] == {} and res["ftz"] == {}, (res["trunc"], res["ftz"])


def test_the_variants_the_rule_reads_are_those_naming_the_adapter(registry):
    named = {vid for vid, v in registry.variants.items() if v.implementation.extension_point == "device_communicator:cpu"}
    assert named == {ar.SWITCH, *ar.MODIFIERS}
    assert [vid for vid in named if registry.variants[vid].implementation.op] == [ar.SWITCH]
