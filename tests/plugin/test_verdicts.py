"""One availability rule, one verdict: on every shipped profile, ``r9kctl validate --strict``,
``r9kctl launch --strict --dry-run`` and the plugin's strict mode accept or refuse alike, and the
validate report's counts are the plugin's table's.

The plugin is run as in a vLLM process of the profile's target machine: its Triton probe reports the
profile's platform family (``interpret`` for ``cpu``), the one thing a process adds to the rule."""
from __future__ import annotations

import pytest

from r9k.registry import availability, envvars

PROBE = {"cpu": "interpret", "cuda": "cuda", "rocm": "rocm"}


def _profiles():
    from r9k.registry import load_registry

    return sorted(load_registry().profiles)


def _plugin_strict_verdict(name: str, platform) -> tuple[bool, object]:
    from r9k.plugin import startup
    from r9k.plugin.dispatch import DispatchTable

    try:
        active = startup.load_active({envvars.PROFILE.name: name, envvars.STRICT.name: "1"})
        table = DispatchTable(active.rs, strict=True,
                              platform_probe=lambda: PROBE.get(availability.platform_family(platform)))
        table.plan()
    except startup.StartupError as exc:
        return False, exc
    return True, table


@pytest.mark.parametrize("name", _profiles())
def test_validate_launch_and_plugin_agree_in_strict_mode(name, registry, plugin_env):
    from r9k.r9kctl.launch import plan_launch
    from r9k.registry.validate import validate

    report = validate(registry, profile=name, env={}, strict=True)
    v_ok = report.exit_code(strict=True) == 0
    lp = plan_launch(registry, name, env={}, strict=True, write_manifest=False, build_model=False)
    l_ok = lp.ok and not lp.report.warnings
    rs = report.profiles[name]
    p_ok, table = _plugin_strict_verdict(name, rs.platform)
    assert v_ok == l_ok == p_ok, (name, v_ok, l_ok, p_ok, [d.format() for d in report.diagnostics], table)

    # the counts: the validate report's availability is the plugin's plan (non-strict: the full table)
    from r9k.plugin import startup
    from r9k.plugin.dispatch import DispatchTable

    active = startup.load_active({envvars.PROFILE.name: name})
    t = DispatchTable(active.rs, platform_probe=lambda: PROBE.get(availability.platform_family(rs.platform)))
    t.plan()
    c = availability.counts(report.availability[name])
    modes = [p.state for p in t.plans.values()]
    assert (modes.count("fused"), modes.count("fallback"), modes.count("env")) == (
        c["fused"], c["fallback"], c["env"]), name


def test_a_profile_that_cannot_run_is_refused_by_all_three(registry, plugin_env):
    """tp4-default switches on kernels that have no implementation for its platform: all refuse it."""
    name = "tp4-default"
    assert availability.counts(availability.plan(__import__("r9k.registry.manifest", fromlist=["from_resolved"]).from_resolved(
        __import__("r9k.registry.resolve", fromlist=["resolve"]).resolve(registry, name, env={}))))["fallback"] > 0
    from r9k.r9kctl.launch import plan_launch
    from r9k.registry.validate import validate

    assert validate(registry, profile=name, env={}, strict=True).exit_code(strict=True) != 0
    lp = plan_launch(registry, name, env={}, strict=True, write_manifest=False, build_model=False)
    assert not (lp.ok and not lp.report.warnings)
    ok, exc = _plugin_strict_verdict(name, "rocm-gfx1201")
    assert not ok and "no-implementation" in str(exc)
