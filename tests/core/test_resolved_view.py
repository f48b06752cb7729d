"""Typed provenance end to end, and the one contract the plugin reads a resolved set through."""
from __future__ import annotations

import json

from r9k.plugin import snapshot
from r9k.plugin.view import ItemView, ResolvedView, VariantView
from r9k.registry import load_registry
from r9k.registry.origin import Origin
from r9k.registry.resolve import ResolvedSet, resolve


class _Active:
    def __init__(self, rs):
        self.rs, self.origin, self.warnings = rs, "test", []


def test_engine_set_and_launch_snapshot_both_are_resolved_views():
    reg = load_registry()
    rs = resolve(reg, "tp4-default", env={"R9K_ROUTER": "stock"}, sets={"R9K_QSA_GLUE": "r9k"})
    light, _, _ = snapshot.load(json.loads(json.dumps(snapshot.dump(_Active(rs)))))
    for s in (rs, light):
        assert isinstance(s, ResolvedView)
        for item in s.items.values():
            assert isinstance(item, ItemView) and isinstance(item.variant, VariantView)
    assert not isinstance(object(), ResolvedView)  # the check can fail
    # provenance survives the snapshot as data, not as a string to parse
    for vid, r in rs.items.items():
        assert light.items[vid].origin == r.origin and light.items[vid].source == r.source
    env = rs.items[reg.variant("R9K_ROUTER").id]
    assert (env.origin.layer, env.origin.key, env.source) == ("environment", "R9K_ROUTER", "environment R9K_ROUTER")
    st = rs.items[reg.variant("R9K_QSA_GLUE").id]
    assert (st.origin.layer, st.origin.key, st.source) == ("override", "R9K_QSA_GLUE", "--set R9K_QSA_GLUE")


def test_origin_renders_in_one_place_and_round_trips_through_the_manifest():
    assert str(Origin("registry", "registry/variants/decode.toml", 40)) == "registry/variants/decode.toml:40"
    assert str(Origin("profile", "profiles/x.toml", None, "unsaved edit")) == "profiles/x.toml (unsaved edit)"
    assert str(Origin("release", "registry/releases/v0.3.0.toml", None, "release v0.3.0")) == \
        "release v0.3.0 (registry/releases/v0.3.0.toml)"
    reg = load_registry()
    rs = resolve(reg, "round2-numerics", env={})
    back = ResolvedSet.from_manifest(json.loads(json.dumps(rs.to_manifest())), reg)
    assert back.ok, back.diagnostics
    assert {v: r.origin for v, r in back.items.items()} == {v: r.origin for v, r in rs.items.items()}
    prof = [r for r in rs.items.values() if r.layer == "profile"]
    assert prof and all(r.origin.file.endswith("round2-numerics.toml") and r.origin.line for r in prof)
