"""Every switch of vLLM that chooses a kernel for the shipped models is declared, with the values each version
accepts (issue 38 item 1): generated from each version's parser, envs.py, custom-op registrations and backend
enums (registry/vllm/<ver>.json); removed and renamed names suggested as their successor."""
import importlib.util
from pathlib import Path

import pytest

from r9k.registry import load_registry
from r9k.registry.vllm_interface import load, versions
from r9k.registry.vllm_map import switch_name

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def reg():
    return load_registry()


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


def _profile(tmp_path, body):
    d = tmp_path / "profiles"
    d.mkdir(exist_ok=True)
    (d / "mine.toml").write_text(body)
    return d


def test_a_value_only_a_newer_version_accepts_is_refused_for_the_older_one(r9kctl, tmp_path):
    d = _profile(tmp_path, 'extends = "cpu-smoke"\n\n[knobs]\nMOE_BACKEND = "aiter_triton_mxfp4_mxfp4"\n')
    rc, out, err = r9kctl("--profiles-dir", str(d), "validate", "--profile", "mine", "--vllm-version", "0.32")
    assert rc == 2, out + err
    line = next(ln for ln in (out + err).splitlines() if "error[vllm-value]" in ln)
    assert "mine.toml:4:" in line and "--moe-backend" in line and "0.32" in line, line
    rc, out, err = r9kctl("--profiles-dir", str(d), "validate", "--profile", "mine", "--vllm-version", "0.33")
    assert "error[vllm-value]" not in out + err


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
