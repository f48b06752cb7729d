"""Stock values are vLLM's own (issue 34 item 3): a launcher knob at its stock value is not passed, so vLLM's
default applies; every concrete stock must therefore be that default, read from the interface description of
each shipped vLLM version. The memory model charges what the server runs at."""
from __future__ import annotations

import pytest

from r9k.registry import load_registry
from r9k.registry.vllm_interface import load, versions
from r9k.registry.resolve import resolve
from r9k.registry.vllm_map import convert, mapping, requests


@pytest.mark.parametrize("version", versions())
def test_every_launcher_knobs_stock_is_the_target_vllms_default(version):
    reg, iface = load_registry(), load(version)
    checked, bad = [], []
    for v in sorted(reg.variants.values(), key=lambda v: v.knob):
        if v.category != "launcher" or v.sets is None or v.stock in (None, ""):
            continue  # no stock value, or stock = unset: nothing is passed and nothing is claimed
        m = mapping(v.sets)
        fl = iface.flag(m.name) if m.kind in ("vllm-arg", "vllm-flag") else None
        if m.kind == "vllm-arg":
            want, got, missing = (None if fl is None else fl.default), convert(v.stock, m), fl is None
            if want is None and fl is not None:
                # vLLM resolves it at run time (0.34's --gpu-memory-utilization): the launch passes the stock
                rs = resolve(reg, "tp4-default", env={}, sets={v.knob: v.stock})
                assert any(q.target == m.name and q.value == got for q in requests(rs, iface)), v.knob
                checked.append(v.knob)
                continue
        elif m.kind == "vllm-flag":
            want, got, missing = (None if fl is None else fl.default), v.stock == "1", fl is None
            if want is None and fl is not None:
                # the parser leaves it to vLLM's config (per model: enable_prefix_caching); a stock of "1" claims
                # "on", and the launch must then send the negative spelling for "0"
                assert v.stock == "1", v.knob
                checked.append(v.knob)
                continue
        elif m.kind == "env" and m.name.startswith("VLLM_"):
            e = iface.env(m.name)
            want, got, missing = (None if e is None else e.default), repr(v.stock), e is None
        else:
            bad.append(f"{v.knob}: stock {v.stock!r} through {m.kind} {m.name}: no vLLM default to compare with")
            continue
        checked.append(v.knob)
        if missing:
            bad.append(f"{v.knob}: vLLM {version} has no {m.name}")
        elif (got != want) if not isinstance(want, float) else abs(float(got) - want) > 1e-12:
            bad.append(f"{v.knob}: stock {v.stock!r} ({got!r}) but vLLM {version}'s {m.name} defaults to {want!r}")
    assert {"UTIL", "OFFLOAD_GB"} <= set(checked), checked
    assert bad == []


def test_the_memory_model_charges_vllms_default_at_stock_and_the_passed_value_otherwise():
    from r9k.registry.memory import budget
    from r9k.registry.vllm_interface import target

    reg = load_registry()
    default = target()[0].flag("--gpu-memory-utilization").default
    at_stock = budget(reg, resolve(reg, "tp4-default", env={}, sets={"UTIL": reg.variants["gpu_mem_util"].stock}))
    passed = budget(reg, resolve(reg, "tp4-default", env={}, sets={"UTIL": "0.85"}))
    assert at_stock.utilization == default and passed.utilization == 0.85
