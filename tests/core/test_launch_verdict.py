"""One verdict (issue 34 item 3): what a launch or the vLLM it starts would refuse, ``validate`` and the dry run
refuse first, each with one located line: an attention backend nothing registers, a template file that is not
there, ``VLLM_*`` variables of the caller's environment, bad ``[env]`` values."""
from __future__ import annotations

import re

LOC = re.compile(r"^([^\n]+?):(\d+)(:\d+)?: error\[([a-z-]+)\]: ", re.M)


def _errors(text: str) -> dict[str, str]:
    """error kind -> its location (file:line)."""
    return {m.group(4): f"{m.group(1)}:{m.group(2)}" for m in LOC.finditer(text)}


def test_the_releases_27b_backend_and_template_are_refused_by_validate_and_the_dry_run(r9kctl):
    sets = ["--set", "ATTN=CUSTOM", "--set", "CHAT_TEMPLATE=qwen-fixed"]  # the release's 27B values
    rc, out, err = r9kctl("validate", "-p", "27b-tp2", *sets, "--vllm-version", "0.32")
    errs = _errors(out + err)
    assert rc == 2, out + err
    assert errs["bad-value"] == "<command line>:1" and "--attention-backend 'CUSTOM'" in out + err, out + err
    assert errs["missing-file"] == "<command line>:1" and "CHAT_TEMPLATE=qwen-fixed" in out + err, out + err
    rc, out, err = r9kctl("launch", "-p", "27b-tp2", *sets, "--dry-run")
    assert rc == 2 and {"bad-value", "missing-file"} <= set(_errors(out + err)), out + err
    # the shipped profile leaves both unset (they do not ship) and validates
    rc, out, err = r9kctl("validate", "-p", "27b-tp2", "--vllm-version", "0.32")
    assert rc == 0, out + err


def test_the_callers_vllm_variables_are_checked(r9kctl):
    rc, out, err = r9kctl("validate", "-p", "cpu-smoke", env={"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"})
    assert rc == 2 and _errors(out + err) == {"shell-env": "<environment>:1"}, out + err
    assert "not read by vLLM" in out + err and "ATTN" in out + err
    rc, out, err = r9kctl("launch", "-p", "cpu-smoke", "--dry-run", env={"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"})
    assert rc == 2 and "error[shell-env]" in out + err
    # a value the profile's [env] sets otherwise: located at the profile's line
    rc, out, err = r9kctl("validate", "-p", "cpu-smoke", env={"VLLM_CPU_KVCACHE_SPACE": "4"})
    assert rc == 2 and _errors(out + err)["shell-env"].endswith("profiles/cpu-smoke.toml:27"), out + err
    rc, out, err = r9kctl("validate", "-p", "cpu-smoke", env={"VLLM_CPU_KVCACHE_SPACE": "1"})  # the same: fine
    assert rc == 0, out + err


def test_an_env_value_vllm_cannot_read_is_an_error_at_its_line(r9kctl, tmp_path):
    prof = tmp_path / "profiles"
    prof.mkdir()
    (prof / "mine.toml").write_text('extends = "cpu-smoke"\n\n[env]\nVLLM_LOG_STATS_INTERVAL = "often"\n')
    rc, out, err = r9kctl("--profiles-dir", str(prof), "validate", "-p", "mine", "--vllm-version", "0.32")
    assert rc == 2 and _errors(out + err)["bad-env-value"].endswith("profiles/mine.toml:4"), out + err
    assert "float" in out + err
    # the CPU backend's KV space is read by the memory model too: its error is at the same line
    (prof / "mine.toml").write_text('extends = "cpu-smoke"\n\n[env]\nVLLM_CPU_KVCACHE_SPACE = "lots"\n')
    rc, out, err = r9kctl("--profiles-dir", str(prof), "validate", "-p", "mine", "--vllm-version", "0.32")
    assert rc == 2 and _errors(out + err)["memory"].endswith("profiles/mine.toml:4"), out + err


def test_validate_all_folds_the_platform_warnings_into_one_line_saying_what_is_expected(r9kctl):
    rc, out, err = r9kctl("validate", "--all")
    lines = [ln for ln in (out + err).splitlines() if "no-implementation" in ln or "falls back:" in ln]
    assert len(lines) == 1, lines  # one cause (the platform), one line
    assert "platform 'rocm-gfx1201'" in lines[0] and "Expected here" in lines[0]
    assert "cuda-h200" in lines[0] and "Triton interpreter" in lines[0]
    # one profile: each variant still listed
    rc, out, err = r9kctl("validate", "-p", "tp4-default")
    assert sum("falls back:" in ln for ln in out.splitlines()) > 1
    # ... and one line, after them, says why (the launch's too)
    for args in (("validate", "-p", "tp4-default"), ("launch", "-p", "tp4-default", "--dry-run")):
        rc, out, err = r9kctl(*args)
        warned = [ln for ln in err.splitlines() if ": warning[no-implementation]: " in ln]
        why = [ln for ln in err.splitlines() if ln.startswith("info[no-implementation]")]
        assert rc == 0 and len(warned) > 1 and len(why) == 1, (args, err)
        assert f"{len(warned)} warning(s)" in why[0] and "cuda-h200" in why[0] and "rocm-gfx1201" in why[0], why
        assert err.splitlines().index(why[0]) > err.splitlines().index(warned[-1])


def test_a_mistyped_command_gets_a_located_did_you_mean(r9kctl):
    rc, out, err = r9kctl("--plain", "valdate", "--all")
    assert rc == 2 and err.strip() == ("<command line>:1:16: error[usage]: 'valdate' is not an r9kctl command "
                                       "(did you mean validate?)"), err


def test_the_arguments_of_diff_validate_and_launch_have_help_and_every_command_examples():
    from r9k.r9kctl.cli import build_parser

    p = build_parser()
    sub = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
    for name in ("diff", "validate", "launch"):
        missing = [a.dest for a in sub.choices[name]._actions if not a.help and a.dest != "help"]
        assert missing == [], (name, missing)

    def walk(prefix, sp):
        yield prefix, sp
        for s in (a for a in sp._actions if a.__class__.__name__ == "_SubParsersAction"):
            for n, c in s.choices.items():
                yield from walk(f"{prefix} {n}".strip(), c)

    bare = [n for n, sp in walk("", p) if n and "r9kctl " not in (sp.epilog or "") + (sp.description or "")]
    assert bare == [], bare


def test_the_tiny_models_random_weights_are_said(r9kctl):
    rc, out, err = r9kctl("launch", "-p", "cpu-smoke", "--dry-run")
    assert rc == 0 and "random weights" in out and "gibberish" in out, out + err


def test_a_memory_error_from_set_points_at_the_set_and_no_figure_goes_negative(r9kctl):
    rc, out, err = r9kctl("--plain", "validate", "-p", "tp2-default", "--set", "R9K_EXPERT_CACHE_SLOTS=99999")
    assert rc == 2 and _errors(out + err)["memory"] == "<command line>:1", out + err
    assert "R9K_EXPERT_CACHE_SLOTS=99999" in err and "does not fit" in out and "(-" not in out, out + err
