"""r9kctl doctor: the project checked against a vLLM source tree, read as source."""
import os
import shutil
from pathlib import Path

import pytest


def _installed_vllm_root():
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None:
        pytest.skip("vLLM is not installed")
    return Path(list(spec.submodule_search_locations)[0])


def _linked_tree(tmp_path, rename=None):
    """A source tree of links to the installed vLLM's .py files; ``rename``: (relpath, old, new) edits one."""
    src = _installed_vllm_root()
    dst = tmp_path / "src" / "vllm"
    for f in src.rglob("*.py"):
        rel = f.relative_to(src)
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(f, dst / rel)
    if rename:
        rel, old, new = rename
        p = dst / rel
        text = p.read_text()
        assert f"def {old}(" in text or f"class {old}(" in text
        p.unlink()
        p.write_text(text.replace(f"def {old}(", f"def {new}(").replace(f"class {old}(", f"class {new}("))
    return tmp_path / "src"


def test_doctor_is_clean_against_the_installed_vllm(r9kctl):
    rc, out, err = r9kctl("doctor")
    assert rc == 0, out + err
    assert "nothing this project uses breaks" in out


def test_doctor_lists_a_renamed_peer_kernel_and_exits_1(r9kctl, tmp_path):
    """vLLM 0.33 renamed Qwen4Exp's _hc_combine_norm to hc_combine_norm (r9kctl doctor --vllm-src on 0.33's
    wheel: notes/launch.md); the same rename made in a copy of the installed tree."""
    root = _linked_tree(tmp_path, ("models/qwen4_exp/nvidia/ops/hc.py", "_hc_combine_norm", "hc_combine_norm"))
    rc, out, err = r9kctl("doctor", "--vllm-src", str(root))
    assert rc == 1, out + err
    line = next(ln for ln in out.splitlines() if "_hc_combine_norm" in ln)
    assert "error[peer-kernel]" in line and "nearest: hc_combine_norm" in line
    assert line.startswith("kernels/_triton/vllm_peer.py:")


def test_doctor_lists_a_missing_adapter_class(r9kctl, tmp_path):
    root = _linked_tree(tmp_path, ("model_executor/layers/fused_moe/router/gate_linear.py", "GateLinear",
                                   "GateLinearV2"))
    rc, out, err = r9kctl("doctor", "--vllm-src", str(root))
    assert rc == 1
    assert any("error[adapter]" in ln and "GateLinear" in ln for ln in out.splitlines())


def test_doctor_refuses_a_folder_that_is_no_vllm(r9kctl, tmp_path):
    rc, out, err = r9kctl("doctor", "--vllm-src", str(tmp_path))
    assert rc == 2 and "not a vLLM source tree" in err and "Traceback" not in err


VLLM_SRC = Path(os.environ.get("R9K_VLLM_SRC_ROOT", "/work/vllm-src"))


@pytest.mark.parametrize("version", ["0.26.0", "0.33.0", "0.34.0"])
def test_doctor_names_the_model_runners_each_vllm_release_constructs(r9kctl, version):
    """Behaviour, not names: the runner classes the GPU and CPU workers of that release construct, V1 and V2,
    each hooked (the 'what vLLM chose' table); the releases' Python sources unpacked under /work/vllm-src."""
    root = VLLM_SRC / version / "src"
    if not (root / "vllm" / "__init__.py").is_file():
        pytest.skip(f"vLLM {version}'s sources are not unpacked at {root} (R9K_VLLM_SRC_ROOT names another root)")
    rc, out, err = r9kctl("doctor", "--vllm-src", str(root))
    assert rc in (0, 1) and "Traceback" not in err, out + err
    runners = [ln for ln in out.splitlines() if ": runner: " in ln or "error[runner]" in ln]
    gpu = [ln for ln in runners if ln.startswith("vllm/v1/worker/gpu_worker.py:")]
    assert any("vllm.v1.worker.gpu.model_runner.GPUModelRunner (V2)" in ln and "hooked" in ln for ln in gpu), out
    if version == "0.34.0":  # 0.34 has no V1 GPU runner; its CPU worker constructs a runner the hook does not wrap
        assert not any("gpu_model_runner.GPUModelRunner" in ln for ln in gpu), out
        assert any("error[runner]" in ln and "StandaloneCPUModelRunner" in ln for ln in runners), out
    else:
        assert any("vllm.v1.worker.gpu_model_runner.GPUModelRunner (V1)" in ln and "hooked" in ln for ln in gpu), out
        assert not any("error[runner]" in ln for ln in runners), out


def test_doctor_refuses_a_runner_without_the_hooked_method(r9kctl, tmp_path):
    """A V2 runner whose load_model is renamed: the hook would wrap nothing there."""
    root = _linked_tree(tmp_path)
    p = root / "vllm" / "v1" / "worker" / "gpu" / "model_runner.py"
    text = p.read_text()
    assert "    def load_model(" in text
    p.unlink()
    p.write_text(text.replace("    def load_model(", "    def load_model_v2(", 1))
    rc, out, err = r9kctl("doctor", "--vllm-src", str(root))
    assert rc == 1, out + err
    line = next(ln for ln in out.splitlines() if "error[runner]" in ln)
    assert "vllm.v1.worker.gpu.model_runner.GPUModelRunner (V2) has no load_model" in line
    assert line.startswith("vllm/v1/worker/gpu_worker.py:")
