"""One test per rule the docs state that a hand mutation once broke unnoticed (issue 24, item 6). Each was
checked by applying the mutation by hand and seeing the test fail (notes/evidence.md lists them):

* precedence: ``--set`` over the environment over the profile (README "Precedence, lowest first");
* ``diff A B`` lists as added only variants new *after* A (a variant since A is A's own);
* the set's hash covers a profile's ``[env]`` (processes must agree on it);
* a gate's source hash has a marker for a declared path that does not exist (creating it changes the hash);
* ``conflicts``: a profile switching on two variants that conflict is an error;
* the memory model's constants equal what their sources (models.toml's comments) derive them from.
"""
from __future__ import annotations

import pytest

from r9k.registry import load_registry
from r9k.registry import ledger as L
from r9k.registry.diff import diff
from r9k.registry.resolve import resolve


@pytest.fixture(scope="module")
def reg():
    return load_registry()


def test_set_beats_environment_beats_profile(reg):
    v = reg.find_variant("R9K_HC_FP8_DECODE")
    rs = resolve(reg, "tp4-default", env={v.knob: "0"}, sets={v.knob: "1"})
    assert (rs.value(v.knob), rs.items[v.id].layer) == ("1", "override")
    rs = resolve(reg, "tp4-default", env={v.knob: "0"})
    assert (rs.value(v.knob), rs.items[v.id].layer) == ("0", "environment")
    # and the environment over a profile's own value
    rs = resolve(reg, "round2-numerics", env={"R9K_ROUTER": "r9k"})
    assert (rs.value("R9K_ROUTER"), rs.items["router_gemm"].layer) == ("r9k", "environment")


def test_diff_adds_only_what_came_after_the_earlier_release(reg):
    order = reg.release_order()
    for a, b in zip(order, order[1:]):
        d = diff(reg, a, b)
        want = {vid for vid, v in reg.variants.items() if v.since == b}
        assert set(d.added) | set(d.left_off) == want, (a, b)
        assert not any(reg.variants[vid].since == a for vid in d.added + d.left_off), (a, b)


def test_the_sets_hash_covers_the_profiles_env(reg, tmp_path):
    d = tmp_path / "profiles"
    d.mkdir()
    base = 'description = "x"\nextends = "cpu-smoke"\n'
    (d / "env-a.toml").write_text(base + '[env]\nVLLM_CPU_KVCACHE_SPACE = "1"\n')
    (d / "env-b.toml").write_text(base + '[env]\nVLLM_CPU_KVCACHE_SPACE = "2"\n')
    from r9k.registry.loader import default_profile_dirs

    reg2 = load_registry(profile_dirs=default_profile_dirs() + [d])
    a, b = resolve(reg2, "env-a", env={}), resolve(reg2, "env-b", env={})
    assert {r.variant.id: r.value for r in a.items.values()} == {r.variant.id: r.value for r in b.items.values()}
    assert a.hash != b.hash


def test_a_missing_declared_path_marks_the_gate_hash(tmp_path):
    files = {"kernels/x/impl.py": "ab" * 32}
    assert L.hash_of(files, ["kernels/x/gone.py"]) != L.hash_of(files, [])
    assert L.hash_of(files, ["kernels/x/gone.py"]) != L.hash_of(files, ["kernels/x/other.py"])

    class V:  # a variant whose declared sources name a file that is not there yet
        id = "x"
        implementation = type("I", (), {"sources": ["kernels/x/impl.py", "kernels/x/later.py"], "module": None})()
        gate = type("G", (), {"tests": []})()

    root = tmp_path / "repo"
    (root / "registry").mkdir(parents=True)
    (root / "kernels/x").mkdir(parents=True)
    (root / "kernels/x/impl.py").write_text("X = 1\n")
    before, _ = L.source_hash(root / "registry", V)
    (root / "kernels/x/later.py").write_text("")  # an empty file: its content hash alone would be a constant
    after, _ = L.source_hash(root / "registry", V)
    assert before != after
    (root / "kernels/x/later.py").unlink()
    assert L.source_hash(root / "registry", V)[0] == before


def test_conflicting_variants_switched_on_are_an_error(tmp_path, monkeypatch):
    import shutil

    from r9k.registry import envvars
    from r9k.registry.loader import PACKAGE_DIR
    from r9k.registry.validate import validate

    root = tmp_path / "registry"
    shutil.copytree(PACKAGE_DIR, root, ignore=shutil.ignore_patterns("*.py", "__pycache__", "gates"))
    (root / "variants" / "zz-conflict.toml").write_text('''
[[variant]]
id = "zz_a"
knob = "R9K_ZZ_A"
summary = "Test-only variant a."
category = "fusion"
area = "decode"
type = "bool"
stock = "0"
conflicts = ["zz_b"]
[variant.status]
state = "opt-in"
reason = "test"

[[variant]]
id = "zz_b"
knob = "R9K_ZZ_B"
summary = "Test-only variant b."
category = "fusion"
area = "decode"
type = "bool"
stock = "0"
[variant.status]
state = "opt-in"
reason = "test"
''')
    prof = tmp_path / "profiles"
    prof.mkdir()
    for name, knobs in (("both", 'R9K_ZZ_A = "1"\nR9K_ZZ_B = "1"\n'), ("one", 'R9K_ZZ_A = "1"\n')):
        (prof / f"{name}.toml").write_text(f'description = "x"\nextends = "stock"\ntp = 1\n[knobs]\n{knobs}')
    monkeypatch.setenv(envvars.REGISTRY.name, str(root))
    monkeypatch.setenv(envvars.PROFILES_DIR.name, str(prof))
    reg2 = load_registry(root)
    errs = [d for d in validate(reg2, profile="both", env={}).errors if d.code == "conflicts"]
    assert len(errs) == 1 and "R9K_ZZ_A=1 conflicts with R9K_ZZ_B=1" in errs[0].message
    assert [d for d in validate(reg2, profile="one", env={}).errors if d.code == "conflicts"] == []


def test_memory_constants_equal_their_sources(reg):
    """models.toml derives each constant in a comment from a figure of the original; recompute each."""
    gib = 1 << 30
    dims = reg.models["qwen3.8-flash-next"].dims
    kv = reg.models["qwen3.8-flash-next"].kv_bytes_per_token["tp2"]  # the unit the original's KV figures are in
    assert kv == 15_826
    src = {
        # "sizes 384-2048 ... +94k KV tokens at TP4 without them" (1.4 GiB a card at TP4) over 2048 - 256 tokens
        "cudagraph_bytes_per_token_tp1": 1.4 * gib * 4 / (2048 - 256),
        # "graphs for 16 sequences take ~0.9 GiB at TP2"
        "seq_graph_bytes_tp1": 0.9 * gib * 2 / 16,
        # "FN TP2 NBT=2048: 120,724 -> 168,439 KV": 47,715 tokens of KV bytes over 2048 tokens, at TP2
        "act_bytes_per_token_tp1": (168_439 - 120_724) * kv / 2048 * 2,
        # gate_up 1280 x 2560 + down 2560 x 640
        "expert_params": 1280 * 2560 + 2560 * 640,
        # 97 hyper-connection modules a decode step + the MTP layer's 3
        "hc_modules": 97 + 3,
        # "51 GB per rank" (PROGRESS.md 2026-09-18)
        "ple_table_bf16_bytes": 51e9,
    }
    for name, want in src.items():
        assert abs(dims[name] - want) <= 1, (name, dims[name], want)  # a byte of rounding, nothing more
