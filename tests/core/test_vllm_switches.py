"""vLLM's own kernel switches declared as variants (issue 25): kinds, legal values from the vLLM interface
description, version ranges, platforms, per-platform and per-TP defaults, the launch mapping, and the same
resolve / diff / show machinery as every knob. Every switch of vLLM that chooses a kernel for the shipped models
is declared, with the values each version accepts (issue 38 item 1): generated from each version's parser,
envs.py, custom-op registrations and backend enums (registry/vllm/<ver>.json); removed and renamed names
suggested as their successor."""
import importlib.util
import json
from pathlib import Path

import pytest

from r9k.registry import load_registry
from r9k.registry.validate import Report
from r9k.registry.resolve import resolve
from r9k.registry.vllm_interface import load, versions
from r9k.registry.vllm_map import (accepted_values, check_profile_switches, check_switches, launch_args,
                                   switch_exists, switch_name)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def reg():
    return load_registry()


def _switches(reg):
    return {vid: v for vid, v in reg.variants.items() if v.vllm is not None}


def test_at_least_15_switches_with_platforms_defaults_and_version_ranges(reg):
    sw = _switches(reg)
    assert len(sw) >= 15
    kinds = {v.sets.kind for v in sw.values()}
    assert {"vllm-arg", "kernel-config", "custom-op", "vllm-env"} <= kinds
    for v in sw.values():
        assert v.category == "launcher" and v.vllm.default, v.id  # vLLM's own default is on record
    # the ones the issue names
    names = {switch_name(v) for v in sw.values()}
    for n in ("--attention-backend", "--moe-backend", "--linear-backend", "custom op rms_norm",
              "custom op silu_and_mul", "VLLM_USE_DEEP_GEMM", "VLLM_ROCM_USE_AITER", "VLLM_ROCM_USE_AITER_MOE",
              "VLLM_GDN_DECODE_KERNEL", "VLLM_CPU_ATTN_SPLIT_KV", "VLLM_CPU_OMP_THREADS_BIND"):
        assert n in names, n
    # version ranges: one only in 0.33, one gone in 0.33
    assert not switch_exists(sw["kc_monokernel"], "0.32.0") and switch_exists(sw["kc_monokernel"], "0.33.1")
    mega = sw["rocm_mono_decode"]
    assert switch_exists(mega, "0.32.0") and not switch_exists(mega, "0.33.0")
    # the ranges agree with the descriptions: the variable is in 0.32's and not in 0.33's
    assert load("0.32").env(mega.knob) is not None and load("0.33").env(mega.knob) is None
    assert "monokernel" not in load("0.32").flag("--kernel-config").fields
    assert "monokernel" in load("0.33").flag("--kernel-config").fields


@pytest.mark.parametrize("version", ["0.32", "0.33"])
def test_every_declared_value_is_one_vllm_accepts(reg, version):
    rep = Report()
    check_switches(reg, rep, load(version))
    assert not rep.diagnostics, [d.render() for d in rep.diagnostics]
    iface = load(version)
    moe = accepted_values(reg.variants["vllm_moe_backend"], iface)
    assert "triton" in moe and "auto" in moe  # the parser's choices
    assert accepted_values(reg.variants["vllm_gdn_decode"], iface) == ["cuda", "triton"]  # vllm.envs choices
    assert accepted_values(reg.variants["deep_gemm"], iface) == ["0", "1"]


def test_a_declared_value_vllm_does_not_accept_is_a_located_error_with_did_you_mean(r9kctl, registry_copy):
    f = registry_copy / "variants" / "vllm.toml"
    text = f.read_text()
    assert '"batched_triton", ' in text
    f.write_text(text.replace('"batched_triton", ', '"batched_trton", ', 1))
    rc, out, err = r9kctl("--registry", str(registry_copy), "validate", "--profile", "cpu-smoke",
                          "--vllm-version", "0.32")
    assert rc == 2, out + err
    line = next(ln for ln in (out + err).splitlines() if "error[vllm-value]" in ln)
    assert line.split(":")[0].endswith("variants/vllm.toml") and line.split(":")[1].isdigit(), line
    assert "MOE_BACKEND" in line and "'batched_trton'" in line and "did you mean 'batched_triton'" in line
    assert "Traceback" not in err


def _profile(tmp_path, body):
    d = tmp_path / "profiles"
    d.mkdir(exist_ok=True)
    (d / "mine.toml").write_text(body)
    return d


def _refused_by_032_not_033(r9kctl, d, kind, *needles):
    """``validate`` of ``mine`` against vLLM 0.32 is one located ``error[kind]`` line holding every needle;
    against 0.33 that error is gone."""
    rc, out, err = r9kctl("--profiles-dir", str(d), "validate", "--profile", "mine", "--vllm-version", "0.32")
    assert rc == 2, out + err
    line = next(ln for ln in (out + err).splitlines() if f"error[{kind}]" in ln)
    assert all(n in line for n in needles), line
    rc, out, err = r9kctl("--profiles-dir", str(d), "validate", "--profile", "mine", "--vllm-version", "0.33")
    assert f"error[{kind}]" not in out + err


def test_a_switch_of_another_platform_is_a_located_error_at_the_profile_line(r9kctl, tmp_path):
    d = _profile(tmp_path, 'extends = "cpu-smoke"\n\n[knobs]\nVLLM_ROCM_USE_AITER = 1\n')
    rc, out, err = r9kctl("--profiles-dir", str(d), "validate", "--profile", "mine", "--vllm-version", "0.32")
    assert rc == 2
    line = next(ln for ln in (out + err).splitlines() if "error[vllm-platform]" in ln)
    assert line.startswith(str(d / "mine.toml") + ":4:") or ":4:" in line.split(" ")[0], line
    assert "VLLM_ROCM_USE_AITER" in line and "platform cpu" in line and "rocm" in line
    assert "Traceback" not in err


def test_a_switch_the_target_version_lacks_is_a_located_error(r9kctl, tmp_path):
    d = _profile(tmp_path, 'extends = "stock"\nplatform = "cuda"\nmodel_path = "x/y"\n\n[knobs]\n'
                           'KERNEL_MONOKERNEL = 1\n')
    _refused_by_032_not_033(r9kctl, d, "vllm-version", "mine.toml:6:", "--kernel-config monokernel", ">=0.33")


def test_a_value_vllm_does_not_have_is_a_located_error_with_did_you_mean(r9kctl, tmp_path):
    d = _profile(tmp_path, 'extends = "cpu-smoke"\n\n[knobs]\nATTENTION_BACKEND = "CPU_ATN"\n')
    rc, out, err = r9kctl("--profiles-dir", str(d), "validate", "--profile", "mine")
    assert rc == 2
    line = next(ln for ln in (out + err).splitlines() if "error[bad-value]" in ln)
    assert "mine.toml:4:" in line and "did you mean 'CPU_ATTN'" in line, line
    d = _profile(tmp_path, 'extends = "cpu-smoke"\n\n[knobs]\nMOE_BACKEND_X = "triton"\n')
    rc, out, err = r9kctl("--profiles-dir", str(d), "validate", "--profile", "mine")
    assert rc == 2 and "MOE_BACKEND" in out + err  # unknown switch: the nearest name


def test_check_profile_switches_unit(reg):
    rs = resolve(reg, "cpu-smoke", env={}, sets={"VLLM_USE_DEEP_GEMM": "0", "KERNEL_MONOKERNEL": "1"})
    rep = Report()
    check_profile_switches(reg, rs, rep, load("0.32"))
    kinds = sorted(d.code for d in rep.diagnostics)
    assert kinds == ["vllm-platform", "vllm-platform", "vllm-version"], [d.render() for d in rep.diagnostics]
    rs = resolve(reg, "cpu-smoke", env={})
    rep = Report()
    check_profile_switches(reg, rs, rep, load("0.32"))
    assert not rep.diagnostics


def test_custom_ops_merge_into_one_compilation_config_with_other_fields(reg):
    rs = resolve(reg, "cpu-smoke", env={}, sets={"CUSTOM_OP_SILU_AND_MUL": "-", "CGMODE": "NONE",
                                                  "MOE_BACKEND": "triton", "KERNEL_JIT_WARMUP": "0"})
    args, env, reqs, conflicts = launch_args(rs, load("0.32"))
    assert not conflicts
    cc = json.loads(args[args.index("--compilation-config") + 1])
    assert sorted(cc["custom_ops"]) == ["+rms_norm", "-silu_and_mul"] and cc["cudagraph_mode"] == "NONE"
    assert args[args.index("--moe-backend") + 1] == "triton"
    assert json.loads(args[args.index("--kernel-config") + 1]) == {"enable_jit_warmup": False}
    assert env["VLLM_CPU_ATTN_SPLIT_KV"] == "0"
    assert load("0.32").parse(args) == []  # vLLM's parser takes all of it


def test_platform_and_tp_defaults(reg):
    # a release-based profile (stock-based ones take every stock value) on the cpu platform: per TP
    one = resolve(reg, "tp2-default", env={}, tp=1, platform="cpu")
    two = resolve(reg, "tp2-default", env={}, tp=2, platform="cpu")
    v1, v2 = one.items["cpu_omp_bind"], two.items["cpu_omp_bind"]
    assert v1.value == "" and v2.value == "nobind" and v2.layer in ("registry", "release")
    assert "vllm.toml" in str(v2.origin)
    rocm = resolve(reg, "tp2-default", env={})  # another platform: vLLM decides
    assert rocm.platform.startswith("rocm") and rocm.items["cpu_omp_bind"].value == ""
    # the shipped CPU profiles set two switches away from vLLM's default
    for p in ("cpu-smoke", "cpu-qwen2-moe", "cpu-qwen3-next", "cpu-flash-next", "cpu-flash-next-tp2"):
        rs = resolve(reg, p, env={})
        on = [r for r in rs.items.values() if r.variant.vllm is not None and r.layer == "profile"]
        assert len(on) >= 2, p


def test_diff_resolve_and_show_list_the_switches(r9kctl):
    rc, out, err = r9kctl("diff", "stock", "cpu-smoke", "--format", "json")
    assert rc == 0, err
    text = out
    assert "CUSTOM_OP_RMS_NORM" in text and "VLLM_CPU_ATTN_SPLIT_KV" in text
    rc, out, err = r9kctl("resolve", "--profile", "cpu-smoke")
    assert rc == 0 and "CUSTOM_OP_RMS_NORM" in out and "profiles/cpu-smoke.toml" in out, out + err
    rc, out, err = r9kctl("show", "MOE_BACKEND")
    assert rc == 0 and "--moe-backend" in out, out + err


def test_recipes_markdown_and_json(r9kctl):
    rc, out, err = r9kctl("recipes", "--profile", "cpu-smoke", "--format", "json")
    assert rc == 0, err
    (r,) = json.loads(out)
    assert (r["model"], r["tp"], r["platform"]) == ("tiny-qwen2-moe", 1, "cpu")
    sw = {s["knob"]: s for s in r["vllm_switches"]}
    assert sw["CUSTOM_OP_RMS_NORM"]["value"] == "+" and "cpu-smoke.toml" in sw["CUSTOM_OP_RMS_NORM"]["source"]
    assert sw["ATTENTION_BACKEND"]["value"] is None and sw["ATTENTION_BACKEND"]["vllm_default"] == "CPU_ATTN"
    assert "VLLM_ROCM_USE_AITER" not in sw and "KERNEL_MONOKERNEL" not in sw  # not on cpu / not in 0.32
    router = next(v for v in r["variants"] if v["knob"] == "R9K_ROUTER")
    assert router["gate"] in ("fresh", "stale", "missing", "failed") and router["availability"] == "fused"
    # vLLM's switches are this project's declarations: its release sets them, the original's v0.3.2 does not
    rc, out, err = r9kctl("recipes", "--release", "v0.3.2-r9k.1", "--platform", "cpu", "--vllm-version", "0.33")
    assert rc == 0, err
    assert "## tiny-qwen2-moe tp2 cpu" in out and "| nobind | release v0.3.2-r9k.1 (r9k-stack" in out
    rc, out, err = r9kctl("recipes", "--release", "v0.3.2", "--platform", "cpu", "--vllm-version", "0.33")
    assert rc == 0, err
    assert "## tiny-qwen2-moe tp2 cpu" in out and "| nobind |" not in out
    assert "--kernel-config monokernel" not in out  # cuda/rocm only
    rc, out, err = r9kctl("recipes", "--release", "v9.9")
    assert rc == 2 and "error[usage]" in err and "Traceback" not in err


def test_a_release_changes_a_switch_default_like_any_knob(r9kctl, registry_copy):
    """No special case: a release's default change of a vLLM switch shows in diff, resolve and the launch."""
    f = registry_copy / "variants" / "vllm.toml"
    text = f.read_text()
    anchor = 'knob = "MOE_BACKEND"\n'
    assert anchor in text
    f.write_text(text.replace(anchor, anchor + 'defaults = { tp2 = "triton" }\n', 1))
    rel = registry_copy / "releases" / "v0.3.2.toml"
    body = rel.read_text()
    i = body.index("[[default_changes]]")
    rel.write_text(body[:i] + '[[default_changes]]\nknob = "MOE_BACKEND"\ntp = "all"\nfrom = ""\nto = "triton"\n\n'
                   + body[i:])
    reg = ["--registry", str(registry_copy)]
    rc, out, err = r9kctl(*reg, "diff", "v0.3.1", "v0.3.2", "--tp", "2", "--format", "json")
    assert rc == 0, err
    assert "MOE_BACKEND" in out and "triton" in out
    rc, out, err = r9kctl(*reg, "resolve", "--profile", "tp2-default", "--format", "json")
    assert rc == 0, err
    v = json.loads(out)["values"]["vllm_moe_backend"]
    assert v["value"] == "triton" and v["layer"] in ("registry", "release")
    rc, out, err = r9kctl(*reg, "launch", "--profile", "tp2-default", "--dry-run", "--format", "json",
                          "--no-preflight")
    argv = json.loads(out)["argv"]
    assert argv[argv.index("--moe-backend") + 1] == "triton", argv

def test_four_versions_ship_and_every_kernel_switch_of_each_is_declared(reg):
    assert versions() == ["0.26", "0.32", "0.33", "0.34"]
    declared = {switch_name(v): v for v in reg.variants.values() if v.vllm is not None}
    for ver in versions():
        iface = load(ver)
        assert len(iface.custom_ops) >= 40, ver
        for sw in iface.kernel_switches():
            assert sw.name in declared, (ver, sw.name)
            v = declared[sw.name]
            if sw.values is not None and v.type == "enum":
                assert set(sw.values) <= set(v.choices), (ver, sw.name, set(sw.values) - set(v.choices))
    # the counts of the issue: all of them now
    assert len(declared["--moe-backend"].choices) == 24 and len(declared["--linear-backend"].choices) == 21
    assert sum(n.startswith("custom op ") for n in declared) == len(set().union(*(load(v).custom_ops for v in versions())))
    for n in ("--gdn-prefill-backend", "--mamba-backend", "custom op gemma_rms_norm", "custom op rms_norm_gated",
              "custom op quant_fp8", "VLLM_DISABLED_KERNELS", "VLLM_USE_V2_MODEL_RUNNER"):
        assert n in declared, n
    assert "TRITON" in declared["--mamba-backend"].choices  # the enum the parser converts to
    assert "CPU_ATTN" in declared["--attention-backend"].choices
    # version ranges from presence: the V2 runner switch is gone in 0.34
    assert declared["VLLM_USE_V2_MODEL_RUNNER"].vllm.versions == "<0.34"
    assert all(len(v.knob) <= 26 for v in declared.values())


def test_the_file_is_what_the_generator_makes_from_the_descriptions():
    spec = importlib.util.spec_from_file_location("gen", ROOT / "scripts" / "vllm_interface.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    path = ROOT / "registry" / "variants" / "vllm.toml"
    text, hand, n = gen.generate_switches(path)
    assert text == path.read_text(encoding="utf-8"), "regenerate: scripts/vllm_interface.py --switches " + str(path)
    assert hand == 24 and n >= 60


def test_a_value_only_a_newer_version_accepts_is_refused_for_the_older_one(r9kctl, tmp_path):
    d = _profile(tmp_path, 'extends = "cpu-smoke"\n\n[knobs]\nMOE_BACKEND = "aiter_triton_mxfp4_mxfp4"\n')
    _refused_by_032_not_033(r9kctl, d, "vllm-value", "mine.toml:4:", "--moe-backend", "0.32")


def test_a_removed_name_is_suggested_as_its_successor(r9kctl, tmp_path):
    d = _profile(tmp_path, 'extends = "cpu-smoke"\n\n[env]\nVLLM_ATTENTION_BACKEND = "CPU_ATTN"\n')
    rc, out, err = r9kctl("--profiles-dir", str(d), "validate", "--profile", "mine", "--vllm-version", "0.32")
    assert rc == 2, out + err
    line = next(ln for ln in (out + err).splitlines() if "VLLM_ATTENTION_BACKEND" in ln and "error[" in ln)
    assert "--attention-backend" in line and "VIDEO_LOADER" not in line, line
    i34 = load("0.34")
    msg = i34.check_env({"VLLM_USE_V2_MODEL_RUNNER": "1", "VLLM_MARLIN_INPUT_DTYPE": "int8"})
    text = " ".join(p.message for p in msg)
    assert "removed after vLLM 0.33" in text and "humming" in text  # 0.34's own hint, read from its envs.py
    assert "nearest: VLLM_VIDEO_LOADER_BACKEND" in i34.check_env({"VLLM_VIDEO_LOADR_BACKEND": "x"})[0].message


def test_list_shows_the_switches_per_version(r9kctl):
    counts = {}
    for ver in versions():
        rc, out, err = r9kctl("list", "--vllm-version", ver, "--format", "ids")
        assert rc == 0, err
        counts[ver] = set(out.split())
    assert "vllm_use_v2_model_runner" in counts["0.33"] and "vllm_use_v2_model_runner" not in counts["0.34"]
    assert "kc_monokernel" in counts["0.34"] and "kc_monokernel" not in counts["0.32"]
    rc, out, err = r9kctl("list", "--vllm-version", "0.33", "--plain", "-s", "MOE_BACKEND")
    assert rc == 0 and "24: " in out, out


def test_a_fast_path_no_vllm_accepts_is_a_located_error(r9kctl, registry_copy):
    f = registry_copy / "variants" / "vllm.toml"
    text = f.read_text()
    assert 'fast = { cpu = "CPU_ATTN"' in text
    f.write_text(text.replace('fast = { cpu = "CPU_ATTN"', 'fast = { cpu = "CPU_ATN"', 1))
    rc, out, err = r9kctl("--registry", str(registry_copy), "validate", "--profile", "cpu-smoke")
    assert rc == 2, out + err
    line = next(ln for ln in (out + err).splitlines() if "error[vllm-value]" in ln)
    assert "variants/vllm.toml:" in line and "'CPU_ATN'" in line and "did you mean 'CPU_ATTN'" in line, line


def test_a_kernel_switch_no_variant_declares_is_named(r9kctl, registry_copy):
    import re

    f = registry_copy / "variants" / "vllm.toml"
    text = f.read_text()
    block = re.search(r'\[\[variant\]\]\nid = "mamba_backend"\n(?:(?!\[\[variant\]\]).*\n)*', text).group(0)
    f.write_text(text.replace(block, ""))
    rc, out, err = r9kctl("--registry", str(registry_copy), "validate", "--profile", "cpu-smoke",
                          "--vllm-version", "0.34")
    line = next(ln for ln in (out + err).splitlines() if "vllm-undeclared" in ln)
    assert "warning[vllm-undeclared]" in line and "--mamba-backend" in line and "0.34" in line, line
