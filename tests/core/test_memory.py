"""The memory budget: KV capacity from the model's numbers, what each variant costs of it, and the
checks against the original stack's measurements."""
import pytest

from r9k.registry import load_registry
from r9k.registry.memory import GIB, budget, cost_if_toggled
from r9k.registry.resolve import resolve


@pytest.fixture(scope="module")
def reg():
    return load_registry()


def kv(reg, profile, **sets):
    return budget(reg, resolve(reg, profile, env={}, sets=sets)).kv_tokens


def test_hc_fp8_decode_costs_its_declared_bytes_at_tp2(reg):
    on, off = kv(reg, "tp2-default"), kv(reg, "tp2-default", R9K_HC_FP8_DECODE="0")
    declared = reg.variant("R9K_HC_FP8_DECODE").memory.bytes_per_gpu["all"]
    assert declared == 100 * (336 * 10240 + 336 * 4 + 10240 * 320 + 10240 * 4)
    assert off - on == pytest.approx(declared / 15_826, abs=1)
    c = cost_if_toggled(reg, resolve(reg, "tp2-default", env={}), "hc_fp8_decode")
    assert c.tokens == pytest.approx(off - on, abs=1)


def test_calibration_reproduces_the_original_v031_kv(reg):
    # v0.3.1 defaults: R9K_HC_FREE_BF16 off (it came in v0.3.2); TP2 also had R9K_HC_FP8_DECODE off
    assert kv(reg, "tp4-default", R9K_HC_FREE_BF16="0") == pytest.approx(452_115, rel=0.001)
    assert kv(reg, "tp2-default", R9K_HC_FREE_BF16="0", R9K_HC_FP8_DECODE="0") == pytest.approx(166_818, rel=0.001)


def test_original_tp2_hc_down_copy_cost_in_tokens(reg):
    # v0.3.1 at TP2: "the fp8 down copy costs 0.43 GiB a card ... '30k tokens'" (133,306 -> 103,517 cold).
    # The budget model, given 0.43 GiB more resident at the v0.3.1 TP2 configuration, must lose that many tokens.
    import dataclasses

    from r9k.registry.memory import VariantCost

    b = budget(reg, resolve(reg, "tp2-default", env={}, sets={"R9K_HC_FREE_BF16": "0", "R9K_HC_FP8_DECODE": "0"}))
    more = dataclasses.replace(b, costs=b.costs + [VariantCost("down_copy", "X", int(0.43 * GIB), 0)])
    lost = b.kv_tokens - more.kv_tokens
    assert lost == pytest.approx(30_000, rel=0.05)
    assert lost == pytest.approx(133_306 - 103_517, rel=0.05)


def test_fixed_kv_budget(reg):
    b = budget(reg, resolve(reg, "27b-tp2", env={}))
    assert b.fixed_kv_bytes == 9 * GIB
    assert b.kv_tokens == pytest.approx(367_494, rel=0.001)
    rs = resolve(reg, "27b-tp2", env={}, sets={"KVMEM": "40"})
    from r9k.registry.validate import Report, check_profile

    rep = Report()
    check_profile(reg, rs, rep)
    assert [d.code for d in rep.errors] == ["memory"]


def test_stock_has_no_variant_costs(reg):
    b = budget(reg, resolve(reg, "stock", env={}))
    assert b.costs == [] and b.kv_tokens > 0
