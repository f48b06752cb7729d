"""Graph-affecting derived from what a switch changes (issue 38 item 5): every variant's classification is in a
checked-in table (tests/data/graph_affecting.txt), so a change shows up in review, and the rule is checked."""
from pathlib import Path

import pytest

from r9k.registry import effects, load_registry
from r9k.registry.schema import Variant

TABLE = Path(__file__).resolve().parents[1] / "data" / "graph_affecting.txt"
REGEN = "PYTHONPATH=$PWD python -m r9k.registry.effects > tests/data/graph_affecting.txt"


@pytest.fixture(scope="module")
def reg():
    return load_registry()


def test_every_variants_classification_is_the_checked_in_table(reg):
    want = TABLE.read_text(encoding="utf-8")
    got = effects.table(reg)
    assert {ln.split()[0] for ln in want.splitlines()} == set(reg.variants), "the table lists every variant"
    assert got == want, f"classification changed: review it and regenerate ({REGEN})"


def _row(reg, vid):
    return effects.changes(reg.variants[vid]), reg.variants[vid].graph_affecting


def test_graph_affecting_is_weights_shapes_or_the_graphs_kernels(reg):
    for vid, v in reg.variants.items():
        ch = effects.changes(v)
        assert ch and set(ch) <= set(effects.KINDS), vid
        assert v.graph_affecting == bool(set(ch) & {"weights", "shapes", "ops"}), vid
    # weight-format switches: the weights vLLM's graph was compiled for
    for knob in ("R9K_NVFP4", "R9K_FP8_TO_MXFP4", "R9K_BF16_TO_MXFP4", "R9K_FOLD", "R9K_FP8_LINEARS",
                 "R9K_TARGET_LMHEAD", "R9K_DRAFT_LMHEAD", "R9K_MTP_MLP"):
        v = next(v for v in reg.variants.values() if v.knob == knob)
        assert "weights" in effects.changes(v) and v.graph_affecting, knob


def test_the_derivation_rule(reg):
    for vid, v in reg.variants.items():
        if v.changes:
            continue
        ep = v.implementation.extension_point or "env-only"
        ch = effects.changes(v)
        if v.category == "launcher":
            if v.sets is not None and v.sets.kind == "custom-op":
                assert ch == ("ops",), vid
            elif v.sets is not None and v.sets.name == "--speculative-config":
                assert ch == ("shapes",), vid  # MTP and the drafter: the tokens a step verifies
            elif v.vllm is None:
                assert ch == ("host",), vid  # vLLM's own config: memory, scheduling (vLLM hashes what it needs)
        elif ep.startswith(("model_registry:", "pluggable_layer:", "quantization:")):
            assert ch == ("ops",), vid  # the plugin installs its own layer: other kernels in the graph
        elif v.category == "comm" or ep.startswith("device_communicator:"):
            assert ch == ("collective",), vid  # behind vLLM's all-reduce op: the graph is the same
        else:
            assert ch == {"fusion": ("ops",), "tuning": ("tuning",), "diagnostic": ("diagnostic",)}[v.category], vid
    assert _row(reg, "router_gemm") == (("ops",), True)
    assert _row(reg, "mtp_spec_tokens") == (("shapes",), True)
    assert _row(reg, "router_max_m") == (("tuning",), False)
    assert _row(reg, "ar_impl") == (("collective",), False)
    assert _row(reg, "attn_debug") == (("diagnostic",), False)
    assert _row(reg, "gpu_memory_utilization" if "gpu_memory_utilization" in reg.variants
                else next(i for i, v in reg.variants.items() if v.knob == "UTIL")) == (("host",), False)


def test_a_kernel_knob_with_no_extension_point_must_say_what_it_changes():
    base = dict(id="zz_k", knob="R9K_ZZ_K", type="bool", stock="0", category="kernel", area="other",
                summary="corpus", status={"state": "opt-in", "reason": "corpus"})
    with pytest.raises(ValueError, match="declares 'changes'"):
        Variant(**base)
    assert Variant(**base, changes=["weights"]).graph_affecting
    assert not Variant(**base, changes=["tuning"]).graph_affecting
    with pytest.raises(ValueError):
        Variant(**base, changes=["colour"])


def test_show_says_what_a_switch_changes(r9kctl):
    rc, out, err = r9kctl("show", "nvfp4_path")
    assert rc == 0 and "weights (declared; graph-affecting: yes, part of vLLM's compile-cache key)" in out, out + err
    rc, out, err = r9kctl("show", "router_max_m")
    assert rc == 0 and "tuning (derived; graph-affecting: no)" in out, out + err
