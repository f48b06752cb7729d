"""The small items of issue 37, one test each: a CR LF in ``--url`` forges no second line; ``profiles`` does
not leave a bad profile file out silently; a profile of ``--profiles-dir`` shadowing a shipped one says so."""
from __future__ import annotations

from .harness import error_lines, run_main


def test_a_cr_lf_in_url_forges_no_second_line():
    code, out, err = run_main(["status", "--url", "http://127.0.0.1:9/\r\nr9kctl status: ok: forged"])
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and "\r" not in err and err.startswith("r9kctl status: error["), err


def test_profiles_names_a_bad_profile_file_and_a_shadowing_one(tmp_path):
    (tmp_path / "broken.toml").write_text('description = "bad"\nextends = \n')
    (tmp_path / "cpu-smoke.toml").write_text('description = "mine"\nextends = "stock"\n')
    code, out, err = run_main(["--profiles-dir", str(tmp_path), "profiles"])
    assert code == 2 and "tp4-default" in out and "mine" in out  # the others still listed
    errors = error_lines(err)
    assert len(errors) == 1 and "broken.toml:2" in errors[0].group("loc"), err
    shadow = [ln for ln in err.splitlines() if "warning[shadows]" in ln]
    assert len(shadow) == 1 and "cpu-smoke.toml" in shadow[0] and "shipped" in shadow[0], err


def test_profiles_of_the_shipped_folder_alone_say_nothing_more():
    code, out, err = run_main(["profiles"])
    assert code == 0 and err == "" and "tp4-default" in out


def test_env_setting_loader_variables_is_a_located_warning(tmp_path):
    (tmp_path / "pre.toml").write_text('description = "p"\nextends = "cpu-smoke"\n\n[env]\nLD_PRELOAD = "/tmp/x.so"\n'
                                       'PYTHONPATH = "/tmp"\nMY_OWN = "1"\n')
    code, out, err = run_main(["--profiles-dir", str(tmp_path), "validate", "-p", "pre"])
    warned = [ln for ln in err.splitlines() if "warning[code-loading-env]" in ln]
    assert len(warned) == 2 and "pre.toml:5:1" in warned[0] and "pre.toml:6:1" in warned[1], err
    assert "MY_OWN" not in err
    code, _, _ = run_main(["--profiles-dir", str(tmp_path), "validate", "-p", "pre", "--strict"])
    assert code == 1


def test_tp_true_is_not_tp_1(tmp_path):
    (tmp_path / "b.toml").write_text('description = "p"\nextends = "cpu-smoke"\ntp = true\n')
    code, out, err = run_main(["--profiles-dir", str(tmp_path), "validate", "-p", "b"])
    errors = error_lines(err)
    assert code == 2 and len(errors) == 1 and "b.toml:3" in errors[0].group("loc") and "tp" in errors[0].group("msg")


def test_a_malformed_since_version_is_an_error_at_its_line(tmp_path):
    from .harness import copy_registry

    reg = copy_registry(tmp_path / "registry")
    f = reg / "variants" / "attention.toml"
    text = f.read_text()
    line = text[:text.index('since = "v0.1.0"')].count("\n") + 1
    f.write_text(text.replace('since = "v0.1.0"', 'since = "banana"', 1))
    code, out, err = run_main(["--registry", str(reg), "validate"])
    errors = error_lines(err)
    assert code == 2 and len(errors) == 1 and f"attention.toml:{line}" in errors[0].group("loc"), err
