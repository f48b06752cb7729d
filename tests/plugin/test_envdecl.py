"""Declaring the knobs to vLLM's environment-variable registry and its compile-cache key."""
from __future__ import annotations

import pytest

from r9k.plugin.envdecl import CONTROL_VARS, declare


def _rs(registry, **env):
    from r9k.registry.resolve import resolve

    return resolve(registry, "cpu-smoke", env=env)


def test_every_knob_is_declared_graph_affecting_ones_with_their_value(registry):
    table: dict = {"VLLM_PORT": (lambda: None)}
    own = table["VLLM_PORT"]
    rs = _rs(registry)
    added = declare(rs, table)
    for r in rs.items.values():
        knob = r.variant.knob
        if r.variant.category == "launcher":
            s = r.variant.sets
            if s is not None and s.kind == "env":  # the variable it sets is declared (Ray copies it), as None
                assert table[s.name]() is None, s.name
            else:
                assert knob not in table, f"launcher knob {knob} is translated by r9kctl launch, not declared"
            continue
        assert knob in table
        expected = r.value if r.variant.graph_affecting else None
        assert table[knob]() == expected, knob
        assert added[knob] == ("graph" if r.variant.graph_affecting else "declared")
    assert table["R9K_ROUTER"]() == "r9k"
    for name in CONTROL_VARS:
        assert name in table and table[name]() is None
    assert table["VLLM_PORT"] is own, "vLLM's own variables stay vLLM's"
    # a second declaration (another resolved set) replaces this module's getters
    declare(_rs(registry, R9K_ROUTER="stock"), table)
    assert table["R9K_ROUTER"]() == "stock"


def test_vllm_does_not_warn_and_the_compile_key_follows_the_router(plugin_env, registry, caplog):
    import vllm.envs as envs
    from vllm.platforms import current_platform

    declare(_rs(registry), envs.environment_variables)
    with_r9k = envs.compile_factors()
    declare(_rs(registry, R9K_ROUTER="stock"), envs.environment_variables)
    with_stock = envs.compile_factors()
    assert with_r9k["R9K_ROUTER"] == "r9k" and with_stock["R9K_ROUTER"] == "stock"
    non_graph = next(r.variant.knob for r in _rs(registry).items.values() if not r.variant.graph_affecting)
    assert with_r9k[non_graph] is None and with_stock[non_graph] is None
    diff = {k for k in with_r9k if with_r9k[k] != with_stock.get(k)}
    assert diff == {"R9K_ROUTER"}

    # a declared VLLM_-style name is not reported as unknown (vLLM checks VLLM_* names only)
    plugin_env.setenv("VLLM_R9K_TEST_ONLY", "1")
    with pytest.raises(ValueError):
        current_platform.validate_environ(hard_fail=True)
    envs.environment_variables["VLLM_R9K_TEST_ONLY"] = lambda: None
    current_platform.validate_environ(hard_fail=True)


WEIGHT_SWITCHES = [("R9K_NVFP4", "native", "mxfp4"), ("R9K_FP8_TO_MXFP4", "", "1")]


@pytest.mark.parametrize("knob,a,b", WEIGHT_SWITCHES)
def test_a_weight_format_switch_is_in_vllms_compile_cache_key(plugin_env, registry, knob, a, b):
    """Two sets that differ only in a weight-format switch get different compile-cache keys on both roads into it:
    vLLM's environment factors (a server started by hand: envdecl) and the r9k carrier in ``--additional-config``,
    which vLLM hashes as VllmConfig.compute_hash does (``json.dumps(additional_config, sort_keys=True)``)."""
    import hashlib
    import json

    import vllm.envs as envs

    from r9k.registry.manifest import carrier, from_resolved

    sets = [_rs(registry, **{knob: val}) for val in (a, b)]
    diff = {r.variant.knob for r in sets[0].items.values() if sets[1].items[r.variant.id].value != r.value}
    assert diff == {knob}, diff
    factors, keys = [], []
    for rs in sets:
        declare(rs, envs.environment_variables)
        factors.append(envs.compile_factors())
        for inline in (True, False):
            ac = {"r9k": carrier(from_resolved(rs), "srv", path="/tmp/m.json", inline=inline)}
            keys.append(hashlib.sha256(json.dumps(ac, sort_keys=True).encode()).hexdigest())
    assert [f[knob] for f in factors] == [rs.value(knob) for rs in sets]
    assert factors[0][knob] != factors[1][knob], f"{knob} is not in vLLM's environment factors"
    assert {k for k in factors[0] if factors[0][k] != factors[1].get(k)} == {knob}
    assert keys[0] != keys[2] and keys[1] != keys[3], f"{knob}: the carrier hashes alike"
