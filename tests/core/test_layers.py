"""Errors point at the layer that set the value (issue 27): a release's TOML line, the parent profile's key, the
child profile's own key, ``--set KNOB=VALUE`` at ``<command line>:1:COL``, ``--tp`` on the command line; each
one located line, exit 2, with the chain shown where it helps ("set by X, overriding Y")."""
from __future__ import annotations

import re

from r9k.r9kctl import cli
from r9k.registry.cmdline import CommandLine

LOC = re.compile(r"^(?P<file>.+?):(?P<line>\d+)(?::(?P<col>\d+))?: (?P<level>error|warning)\[(?P<kind>[a-z-]+)\]: "
                 r"(?P<msg>.*)$")


def run(capsys, *words):
    code = cli.main(list(words))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, [m.groupdict() for m in map(LOC.match, err.splitlines()) if m]


def errors(diags, kind=None):
    return [d for d in diags if d["level"] == "error" and (kind is None or d["kind"] == kind)]


def at_column(words, col: int) -> str:
    """The command line's text from a located column on (the command as CommandLine shows it)."""
    return CommandLine(list(words)).text[col - 1:]


def write(d, name, text):
    d.mkdir(exist_ok=True)
    (d / name).write_text(text)
    return d


def line_of(path, needle: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if needle in ln)


# ------------------------------------------------------------------------------------------ --set


def test_a_bad_set_value_is_located_on_the_command_line(capsys):
    words = ["validate", "--profile", "tp4-default", "--set", "R9K_ROUTER=stock", "--set", "R9K_HC_FP8_DECODE=7"]
    code, diags = run(capsys, *words)
    assert code == 2
    (e,) = errors(diags)
    assert e["file"] == "<command line>" and e["line"] == "1" and e["kind"] == "bad-value"
    assert at_column(words, int(e["col"])).startswith("R9K_HC_FP8_DECODE=7")
    assert "--set R9K_HC_FP8_DECODE=7" in e["msg"]


def test_a_set_value_a_check_refuses_is_located_on_the_command_line_not_in_the_profile(capsys):
    # a vLLM switch that does not act on the profile's platform: was located at profiles/tp4-default.toml:1
    words = ["validate", "-p", "tp4-default", "--set", "VLLM_CPU_ATTN_SPLIT_KV=0"]
    code, diags = run(capsys, *words)
    assert code == 2
    (e,) = errors(diags)
    assert e["kind"] == "vllm-platform" and e["file"] == "<command line>", e
    assert at_column(words, int(e["col"])).startswith("VLLM_CPU_ATTN_SPLIT_KV=0")
    assert "set by --set VLLM_CPU_ATTN_SPLIT_KV=0" in e["msg"]


def test_a_set_utilisation_that_leaves_no_room_is_located_at_the_set_not_the_hardware_line(capsys):
    words = ["validate", "-p", "tp4-default", "--set", "KVMEM=", "--set=UTIL=0.5"]
    code, diags = run(capsys, *words)
    assert code == 2
    (e,) = errors(diags)
    assert e["kind"] == "memory" and e["file"] == "<command line>", e  # was the profile's [hardware] line
    assert at_column(words, int(e["col"])).startswith("UTIL=0.5")
    assert "set by --set UTIL=0.5" in e["msg"]


def test_a_set_that_overrides_a_child_profile_says_what_it_overrode(capsys, tmp_path):
    d = write(tmp_path / "p", "parent.toml", 'extends = "tp4-default"\n\n[knobs]\nR9K_AR_PIPE = "stock"\n')
    write(d, "child.toml", 'extends = "parent"\n\n[knobs]\nR9K_AR_PIPE = "stock"\n')
    words = ["--profiles-dir", str(d), "validate", "-p", "child", "--set", "R9K_AR_PIPE=r9k"]
    code, diags = run(capsys, *words)
    assert code == 2
    (e,) = errors(diags, "rejected-variant")
    assert e["file"] == "<command line>" and at_column(words, int(e["col"])).startswith("R9K_AR_PIPE=r9k")
    assert f"set by --set R9K_AR_PIPE=r9k, overriding R9K_AR_PIPE=stock of profile child ({d / 'child.toml'}:4)" \
        in e["msg"]


# ------------------------------------------------------------------------------------------ profiles


def test_an_inherited_bad_value_is_located_at_the_parent_that_set_it(capsys, tmp_path):
    d = write(tmp_path / "p", "parent.toml", 'extends = "tp4-default"\ntp = 3\n\n[knobs]\nR9K_AR_PIPE = "r9k"\n')
    write(d, "child.toml", 'extends = "parent"\n\n[knobs]\nR9K_ROUTER = "r9k"\n')
    code, diags = run(capsys, "--profiles-dir", str(d), "validate", "-p", "child")
    assert code == 2
    parent = str(d / "parent.toml")
    (rej,) = errors(diags, "rejected-variant")
    assert (rej["file"], int(rej["line"]), rej["col"]) == (parent, 5, "1")
    (tp,) = errors(diags, "unsupported-tp")  # the child inherits tp = 3: the parent's line (was the child's file)
    assert (tp["file"], int(tp["line"])) == (parent, 2) and "tp = 3 in profile parent" in tp["msg"]


def test_a_child_profile_value_is_located_in_the_child_with_what_it_overrides(capsys, tmp_path):
    d = write(tmp_path / "p", "parent.toml", 'extends = "tp4-default"\n\n[knobs]\nR9K_AR_PIPE = "stock"\n')
    write(d, "child.toml", 'description = "c"\nextends = "parent"\n\n[knobs]\nR9K_AR_PIPE = "r9k"\n')
    code, diags = run(capsys, "--profiles-dir", str(d), "validate", "-p", "child")
    assert code == 2
    (e,) = errors(diags, "rejected-variant")
    assert (e["file"], int(e["line"]), e["col"]) == (str(d / "child.toml"), 5, "1")
    assert f"overriding R9K_AR_PIPE=stock of profile parent ({d / 'parent.toml'}:4)" in e["msg"]


def test_a_bad_value_in_a_child_profile_is_located_in_the_child(capsys, tmp_path):
    d = write(tmp_path / "p", "parent.toml", 'extends = "tp4-default"\n\n[knobs]\nR9K_HC_FP8_DECODE = 1\n')
    write(d, "child.toml", 'extends = "parent"\n\n[knobs]\nR9K_HC_FP8_DECODE = 7\n')
    code, diags = run(capsys, "--profiles-dir", str(d), "validate", "-p", "child")
    assert code == 2
    (e,) = errors(diags)
    assert (e["file"], int(e["line"]), e["kind"]) == (str(d / "child.toml"), 4, "bad-value")


# ------------------------------------------------------------------------------------------ --tp


def test_a_tp_override_is_located_on_the_command_line(capsys):
    words = ["validate", "-p", "tp4-default", "--tp", "1"]
    code, diags = run(capsys, *words)
    assert code == 2
    (e,) = errors(diags)
    assert e["file"] == "<command line>" and at_column(words, int(e["col"])).startswith("--tp 1"), e


def test_a_value_wrong_only_at_the_tp_override_is_located_at_the_override(capsys, registry_copy):
    f = registry_copy / "variants" / "decode.toml"
    text = f.read_text()
    f.write_text(text.replace('knob = "R9K_ROUTER"\n', 'knob = "R9K_ROUTER"\nsupported_tp = [4]\n', 1))
    words = ["--registry", str(registry_copy), "validate", "-p", "tp4-default", "--tp", "2"]
    code, diags = run(capsys, *words)
    assert code == 2
    (e,) = errors(diags, "unsupported-tp")
    assert e["file"] == "<command line>" and at_column(words, int(e["col"])).startswith("--tp 2"), e
    assert "(--tp 2)" in e["msg"]
    # tp = 2 in the profile's file: the value is at fault, located at the release change that switched it on
    code, diags = run(capsys, "--registry", str(registry_copy), "validate", "-p", "tp2-default")
    (e,) = errors(diags, "unsupported-tp")
    assert "/releases/v0." in e["file"] and "tp = 2 in profile tp2-default" in e["msg"], e


# ------------------------------------------------------------------------------------------ releases


def test_a_bad_release_value_is_located_at_its_release_line(capsys, registry_copy):
    f = registry_copy / "releases" / "v0.3.1.toml"
    f.write_text(f.read_text().replace('tp = "tp4"\nfrom = "0"\nto = "1"', 'tp = "tp4"\nfrom = "0"\nto = "7"', 1))
    code, diags = run(capsys, "--registry", str(registry_copy), "validate", "-p", "tp4-default")
    assert code == 2
    (e,) = errors(diags, "bad-value")
    assert e["file"].endswith("v0.3.1.toml") and int(e["line"]) == line_of(f, 'to = "7"'), e


def test_a_value_a_release_set_is_located_at_the_release_change(capsys, tmp_path):
    # the v0.3.1 release switched R9K_HC_FP8_DECODE on at TP4: a profile of that release that cannot run it is
    # told so at that change (was the variant's line in registry/variants/decode.toml)
    d = write(tmp_path / "p", "old.toml", 'extends = "release:v0.3.1"\nmodel = "qwen3.8-flash-next"\ntp = 4\n'
                                         'platform = "rocm-gfx1201"\n')
    code, diags = run(capsys, "--profiles-dir", str(d), "validate", "-p", "old")
    (w,) = [x for x in diags if x["kind"] == "no-implementation" and x["msg"].startswith("R9K_HC_FP8_DECODE=1")]
    from r9k.registry.loader import PACKAGE_DIR

    rel = PACKAGE_DIR / "releases" / "v0.3.1.toml"
    assert w["file"].endswith("releases/v0.3.1.toml"), w
    want = next(i for i, ln in enumerate(rel.read_text().splitlines(), 1)
                if ln.startswith("to =") and i > line_of(rel, 'knob = "R9K_HC_FP8_DECODE"'))
    assert int(w["line"]) == want
    code, diags = run(capsys, "--profiles-dir", str(d), "validate", "-p", "old", "--set", "R9K_HC_FP8_DECODE=1")
    (w,) = [x for x in diags if x["kind"] == "no-implementation" and x["msg"].startswith("R9K_HC_FP8_DECODE=1")]
    assert w["file"] == "<command line>", w  # the same value from --set: located there


# ------------------------------------------------------------------------------------------ the panel


def test_a_panel_edit_is_located_at_the_profile_it_edits_and_says_it_is_unsaved(tmp_path):
    from r9k.r9kctl.tui.session import Session
    from r9k.registry.loader import load_registry

    d = write(tmp_path / "p", "parent.toml", 'extends = "tp4-default"\n\n[knobs]\nR9K_AR_PIPE = "stock"\n')
    write(d, "child.toml", 'extends = "parent"\n')
    s = Session(load_registry(profile_dirs=[d]), "child", env={})
    s.set_value("ar_pipeline", "r9k")
    (e,) = [x for x in s.report.errors if x.code == "rejected-variant"]
    assert e.file == str(d / "child.toml"), e.format()  # the profile edited, not the parent that had the key
    assert "set by an unsaved edit of profile child" in e.message
    assert f"overriding R9K_AR_PIPE=stock of profile parent ({d / 'parent.toml'}:4)" in e.message


def test_launch_arguments_and_variables_a_parent_profile_has_are_located_there(capsys, tmp_path):
    d = write(tmp_path / "p", "parent.toml", 'extends = "tp4-default"\nserve_args = ["--max-model-len", "32768", '
                                            '"--no-such-flag"]\n\n[env]\nVLLM_NO_SUCH_VARIABLE = "1"\n')
    write(d, "child.toml", 'description = "inherits both"\nextends = "parent"\n')
    code, diags = run(capsys, "--profiles-dir", str(d), "validate", "-p", "child")
    assert code == 2
    (flag,) = errors(diags, "unknown-flag")
    assert (flag["file"], int(flag["line"])) == (str(d / "parent.toml"), 2), flag  # was child.toml:1
    (var,) = errors(diags, "unknown-variable")
    assert (var["file"], int(var["line"])) == (str(d / "parent.toml"), 5), var
