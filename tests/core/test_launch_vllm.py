"""Declared is applied: launcher knobs map to exactly what vLLM reads, checked against the vLLM interface
description (registry/vllm/*.json) by validate and launch, with one exit-code rule."""
import json
import os
import subprocess
import sys
import tomllib

import pytest

from r9k.registry import envvars, load_registry
from r9k.registry.validate import validate
from r9k.registry.vllm_interface import load, versions
from r9k.registry.vllm_map import launch_args, mapping, serve_argv

from .conftest import REPO


def test_descriptions_ship_for_032_and_033():
    assert {"0.32", "0.33"} <= set(versions())
    i32, i33 = load("0.32"), load("0.33")
    assert i32.version.startswith("0.32") and i33.version.startswith("0.33")
    kv = i32.flag("--kv-cache-memory-bytes")
    assert kv.type == "int" and kv.unit == "bytes"
    assert i32.flag("--kv-cache-memory") is None
    assert "LBHNC" in i32.env("VLLM_KV_CACHE_LAYOUT").choices
    assert i32.env("VLLM_ATTENTION_BACKEND") is None and i33.env("VLLM_ATTENTION_BACKEND") is None
    assert "cudagraph_mode" in i32.flag("--compilation-config").fields


def test_the_abbreviation_vllm_would_accept_is_refused():
    """The issue's case: vLLM's argparse took --kv-cache-memory 9 as --kv-cache-memory-bytes 9 (9 bytes)."""
    problems = load("0.32").parse(["--kv-cache-memory", "9"])
    assert [p.kind for p in problems] == ["abbreviated-flag"]
    assert "--kv-cache-memory-bytes" in problems[0].message
    assert load("0.32").parse(["--kv-cache-memory-bytes", "9663676416"]) == []
    assert load("0.32").parse(["--kv-cache-memory-bytes=9G", "--max-num-seqs", "x"])[0].kind == "bad-value"


def test_every_shipped_profile_launch_parses_with_0_32_abbreviations_off():
    reg = load_registry()
    report = validate(reg, all_profiles=True, vllm_version="0.32")
    bad = [d.format() for d in report.errors]
    assert bad == []
    iface = load("0.32")
    for name in sorted(reg.profiles):
        rs = report.profiles[name]
        argv, env, reqs, conflicts = serve_argv(rs, iface=iface)
        assert iface.parse(argv) == [] and iface.check_env(env) == [] and conflicts == [], name


def test_27b_sends_its_kv_budget_in_bytes_and_no_dead_variable():
    reg = load_registry()
    rs = validate(reg, profile="27b-tp2", vllm_version="0.32", sets={"ATTN": "TRITON_ATTN",
                                                                       "CHAT_TEMPLATE": __file__}).profiles["27b-tp2"]
    args, env, reqs, _ = launch_args(rs, load("0.32"))
    i = args.index("--kv-cache-memory-bytes")
    assert args[i + 1] == str(9 * 2**30)
    assert "VLLM_ATTENTION_BACKEND" not in env and args[args.index("--attention-backend") + 1] == "TRITON_ATTN"
    spec = json.loads(args[args.index("--speculative-config") + 1])
    assert spec == {"method": "dflash", "model": "DFlash2-FP8", "num_speculative_tokens": 7}
    knobs = {q.knob for q in reqs}
    assert {"KVMEM", "ATTN", "DRAFT", "CHAT_TEMPLATE", "NSEQ", "CGSIZES"} <= knobs


def test_no_launcher_knob_is_silently_dropped():
    reg = load_registry()
    for v in reg.variants.values():
        if v.category == "launcher":
            assert v.sets is not None, v.knob
            m = mapping(v.sets)
            if m.kind == "env":
                assert m.program, v.knob
            if m.kind == "none":
                assert m.reason, v.knob
    rs = validate(reg, profile="tp4-default").profiles["tp4-default"]
    _, env, reqs, _ = launch_args(rs)
    assert env["NCCL_PROTO"] == "Simple"  # P2P=1
    assert any(q.knob == "OVERLAYS" and q.kind == "none" for q in reqs)


def _set_mapping(registry_copy, area, knob, old, new):
    f = registry_copy / "variants" / f"{area}.toml"
    text = f.read_text()
    assert old in text, (knob, old)
    f.write_text(text.replace(old, new, 1))
    return f


@pytest.mark.parametrize("old,new,code,needle", [
    # the original stack's mapping: an abbreviation of --kv-cache-memory-bytes
    ('name = "--kv-cache-memory-bytes"', 'name = "--kv-cache-memory"', "vllm-mapping", "--kv-cache-memory-bytes"),
    # the unit conversion dropped: vLLM's flag takes bytes
    ('target_unit = "bytes"', 'target_unit = "GiB"', "vllm-mapping", "takes bytes"),
])
def test_a_wrong_mapping_is_a_located_error_naming_knob_version_and_nearest_flag(r9kctl, registry_copy, old, new,
                                                                                code, needle):
    f = _set_mapping(registry_copy, "memory", "KVMEM", old, new)
    rc, out, err = r9kctl("--registry", str(registry_copy), "validate", "--profile", "27b-tp2", "--vllm-version", "0.32")
    assert rc == 2
    line = next(ln for ln in (out + err).splitlines() if f"error[{code}]" in ln)
    loc = line.split(": ")[0]
    assert loc.split(":")[0].endswith("variants/memory.toml") and loc.count(":") == 2, line
    assert "KVMEM" in line and "vLLM 0.32" in line and needle in line
    assert "Traceback" not in err


def test_an_unknown_vllm_variable_and_a_rejected_value_are_errors(r9kctl, tmp_path):
    prof = tmp_path / "profiles"
    prof.mkdir()
    (prof / "mine.toml").write_text('extends = "cpu-smoke"\n\n[env]\nVLLM_ATTENTION_BACKEND = "CUSTOM"\n'
                                    'VLLM_KV_CACHE_LAYOUT = "XYZ"\n')
    rc, out, err = r9kctl("--profiles-dir", str(prof), "validate", "--profile", "mine", "--vllm-version", "0.32")
    text = out + err
    assert rc == 2
    assert "error[unknown-variable]" in text and "VLLM_ATTENTION_BACKEND is not read by vLLM 0.32" in text
    assert "error[bad-env-value]" in text and "VLLM_KV_CACHE_LAYOUT" in text
    rc, out, err = r9kctl("--profiles-dir", str(prof), "launch", "--profile", "mine", "--dry-run")
    assert rc == 2 and "error[unknown-variable]" in out + err
    rc, out, err = r9kctl("launch", "--profile", "cpu-smoke", "--dry-run", "--", "--kv-cache-memory", "9")
    assert rc == 2 and "error[abbreviated-flag]" in out + err


def test_0_33_renamed_the_prefix_caching_off_switch():
    """0.33 spells it --disable-prefix-caching: the launch follows the description of the target version."""
    reg = load_registry()
    rs = validate(reg, profile="tp4-default").profiles["tp4-default"]
    assert "--no-enable-prefix-caching" in launch_args(rs, load("0.32"))[0]
    args33 = launch_args(rs, load("0.33"))[0]
    assert "--disable-prefix-caching" in args33 and load("0.33").parse(args33) == []


def test_exit_code_rule_strict_refusal_is_1_invalid_is_2(r9kctl):
    rc, out, err = r9kctl("validate", "--profile", "tp4-default")
    assert rc == 0
    rc, out, err = r9kctl("validate", "--profile", "tp4-default", "--strict")
    assert rc == 1, out + err
    rc, out, err = r9kctl("validate", "--profile", "tp4-default", "--strict", "--set", "NSEQ=abc")
    assert rc == 2
    rc, out, err = r9kctl("launch", "--profile", "tp4-default", "--strict", "--dry-run")
    assert rc == 1
    rc, out, err = r9kctl("validate", "--help")
    assert "1 valid without --strict but refused by it" in out


BLOCK = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in ('torch', 'vllm', 'triton'):
            raise ImportError('No module named %r (a core install)' % name)
sys.meta_path.insert(0, Block())
from r9k.r9kctl.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_dry_run_in_a_core_install_without_torch(tmp_path):
    env = dict(os.environ, **{envvars.CACHE_DIR.name: str(tmp_path / "cache"), envvars.PLAIN.name: "1"})
    for profile in ("cpu-smoke", "tp4-default", "27b-tp2"):
        p = subprocess.run([sys.executable, "-c", BLOCK, "launch", "--profile", profile, "--dry-run"], env=env,
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        assert "serve" in p.stdout and "error[internal]" not in p.stderr
    p = subprocess.run([sys.executable, "-c", BLOCK, "launch", "--profile", "cpu-smoke"], env=env,
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 2 and "error[preflight]" in p.stderr and "torch" in p.stderr


def test_preflight_refuses_before_anything_starts(r9kctl):
    rc, out, err = r9kctl("launch", "--profile", "tp4-default")
    assert rc == 2
    assert "error[preflight]" in err and "/models/Qwen3.8-Flash-Next" in err
    assert "Traceback" not in err


def test_releases_record_validated_vllm_versions():
    """The vLLM versions are this project's validation: recorded in its own release, never in the original's."""
    rel = tomllib.loads((REPO / "registry" / "releases" / "v0.3.2-r9k.1.toml").read_text())
    assert rel["vllm_validated"] == ["0.26", "0.32"]  # 0.32 on the CPU, 0.26 on CUDA (notes/gpu-serve.md)
    for f in (REPO / "registry" / "releases").glob("*.toml"):
        d = tomllib.loads(f.read_text())
        assert "vllm_validated" not in d or d.get("project") == "r9k-stack", f.name


def test_the_dry_run_passes_the_knobs_variables_by_reference(r9kctl, tmp_path):
    """tp4-default's dry run is a screenful (under 2,000 characters): its 69 knob variables are in an env file
    beside the manifest that the printed command sources; sourced, it gives exactly the launch's values."""
    env = {envvars.CACHE_DIR.name: str(tmp_path / "cache")}
    code, out, err = r9kctl("launch", "--profile", "tp4-default", "--dry-run", env=env)
    assert code == 0, err
    assert len(out) < 2000, len(out)
    line = next(ln for ln in out.splitlines() if ln.startswith("set -a; . "))
    code, js, err = r9kctl("launch", "--profile", "tp4-default", "--dry-run", "--format", "json", env=env)
    want = {k: v for k, v in json.loads(js)["env"].items() if k.startswith("R9K_") and k != envvars.PROFILES_DIR.name}
    got = subprocess.run(["bash", "-c", line.split("  #")[0] + "; env -0"], capture_output=True, timeout=60,
                         env={"PATH": os.environ["PATH"]}).stdout.decode().split("\0")
    got = dict(kv.split("=", 1) for kv in got if kv.startswith("R9K_"))
    assert len(want) > 60 and got == want
    assert not any(ln.startswith("export R9K_ROUTER") for ln in out.splitlines())
