"""The command line behaves like the tools people know: --version, global options before or after the
command, listing profiles and releases, --help with a description and examples, completion scripts,
tables that never break a name, a JSON Schema of profile files that the shipped profiles pass."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from r9k.r9kctl import cli
from r9k.r9kctl.cli import build_parser
from r9k.r9kctl.cmd_completion import candidates
from r9k.registry.loader import load_registry

REPO = Path(__file__).resolve().parents[2]


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert re.fullmatch(r"r9kctl \d+\.\d+\.\d+\S*\n", capsys.readouterr().out)


def test_global_options_before_or_after_the_command(capsys, registry_copy, tmp_path):
    # drop one variant from the copy: the ids listed prove which registry was read
    f = registry_copy / "variants" / "decode.toml"
    text = f.read_text()
    blocks = text.split("\n[[variant]]\n")
    gone = re.search(r'^id = "([a-z0-9_]+)"', blocks[-1], re.M).group(1)
    f.write_text("\n[[variant]]\n".join(blocks[:-1]) + "\n")
    env_before = dict(os.environ)
    shipped = set(load_registry().variants)
    for argv in (["--registry", str(registry_copy), "list", "--format", "ids"],
                 ["list", "--registry", str(registry_copy), "--format", "ids"],
                 ["list", "--format", "ids", f"--registry={registry_copy}"]):
        code, out, err = run(capsys, *argv)
        assert code == 0, err
        assert set(out.split()) == shipped - {gone}, argv
    code, out, _ = run(capsys, "list", "--format", "ids")
    assert gone in out.split()  # nothing stuck from the earlier calls
    assert dict(os.environ) == env_before  # options are passed as arguments, not through the environment

    extra, later = tmp_path / "mine", tmp_path / "later"
    extra.mkdir()
    later.mkdir()
    (extra / "mine-a.toml").write_text('description = "a"\nextends = "tp4-default"\n')
    (later / "mine-b.toml").write_text('description = "b"\nextends = "stock"\n')
    code, out, err = run(capsys, "--profiles-dir", str(extra), "profiles", "--profiles-dir", str(later),
                         "--format", "names")
    assert code == 0, err
    assert {"mine-a", "mine-b", "tp4-default"} <= set(out.split())


def test_profiles_and_releases_one_line_each(capsys):
    reg = load_registry()
    code, out, _ = run(capsys, "--plain", "profiles")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2 + len(reg.profiles)  # title, header, one a profile
    for name, line in zip(sorted(reg.profiles), lines[2:]):
        assert line.split()[0] == name and reg.profiles[name].description in line
    code, out, _ = run(capsys, "releases", "--plain")
    lines = out.splitlines()
    assert code == 0 and [ln.split()[0] for ln in lines[2:]] == reg.release_order()
    code, out, _ = run(capsys, "releases", "--format", "json")
    assert [r["version"] for r in json.loads(out)] == reg.release_order()


def test_every_command_help_has_a_description_and_examples():
    parser = cli.build_parser()
    sub = next(cli._subparsers(parser))
    assert set(sub.choices) == set(cli.COMMANDS)
    for name, p in sub.choices.items():
        text = p.format_help()
        assert p.description, name
        assert f"r9kctl {name}" in (p.epilog or "") + (p.description or ""), f"{name}: no example"
        assert "--registry DIR" in text and "--plain" in text, name  # the global options, after the command


def test_a_missing_keymap_file_is_an_error(capsys, tmp_path):
    code, out, err = run(capsys, "tui", "--keymap", str(tmp_path / "nope.toml"))
    assert code == 2
    assert re.match(r"^\S*nope\.toml: error\[[a-z-]+\]: ", err.strip()) and len(err.strip().splitlines()) == 1, err
    bad = tmp_path / "bad.toml"
    bad.write_text("[keys\n")
    code, out, err = run(capsys, "tui", "--keymap", str(bad))
    assert code == 2 and re.match(r"^\S*bad\.toml:1:\d+: error\[toml-syntax\]", err.strip()), err
    assert "Traceback" not in err


def test_did_you_mean_prefers_a_prefix(capsys):
    code, out, err = run(capsys, "tui", "--profile", "tp2")
    assert code == 2 and "did you mean tp2-default?" in err, err


def test_completion_candidates():
    reg = load_registry()
    assert {"list", "profiles", "releases", "schema", "completion"} <= set(candidates([""], build_parser()))
    assert candidates(["launch", "--profile", ""], build_parser()) == sorted(reg.profiles)
    assert set(candidates(["diff", ""], build_parser())) == set(reg.profiles) | set(reg.release_order())
    knobs = candidates(["show", ""], build_parser())
    assert "R9K_HC_FP8_DECODE" in knobs and "hc_fp8_decode" in knobs
    assert "R9K_ROUTER=" in candidates(["tui", "--set", ""], build_parser())
    assert "--category" in candidates(["list", "--"], build_parser())
    assert "--registry" in candidates(["list", "--"], build_parser())  # global options after the command
    assert candidates(["list", "--category", ""], build_parser()) == sorted({v.category for v in reg.variants.values()})
    assert candidates(["completion", ""], build_parser()) == ["bash", "zsh", "fish"]
    assert candidates(["eval", ""], build_parser()) == ["compare", "record"]
    assert candidates(["tui", "--keymap", ""], build_parser()) is None  # a file name: the shell completes it
    assert candidates(["launch", "--profile", "tp2-default", "--", ""], build_parser()) == []  # vLLM's own arguments


def test_bash_completion_script(tmp_path):
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    venv_bin = str(Path(sys.executable).parent)
    if not (Path(venv_bin) / "r9kctl").exists():
        pytest.skip("r9kctl is not installed beside this interpreter")
    script = subprocess.run([sys.executable, "-m", "r9k.r9kctl.cli", "completion", "bash"], capture_output=True,
                            text=True, check=True).stdout
    (tmp_path / "c.bash").write_text(script)
    probe = ('source c.bash; COMP_WORDS=(r9kctl launch --profile tp2); COMP_CWORD=3; _r9kctl; '
             'printf "%s\\n" "${COMPREPLY[@]}"')
    env = dict(os.environ, PATH=venv_bin + os.pathsep + os.environ.get("PATH", ""))
    p = subprocess.run([bash, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert p.stdout.split() == ["tp2-default"], (p.stdout, p.stderr)
    for shell in ("zsh", "fish"):
        text = subprocess.run([sys.executable, "-m", "r9k.r9kctl.cli", "completion", shell], capture_output=True,
                              text=True, check=True).stdout
        assert "r9kctl __complete --" in text


def test_tables_never_break_a_name_at_80_columns(capsys, monkeypatch):
    from r9k.r9kctl import output

    monkeypatch.setattr(output, "is_tty", lambda: True)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("LINES", "24")
    reg = load_registry()
    code, out, _ = run(capsys, "list")
    assert code == 0
    cells = [c.strip() for ln in out.splitlines() for c in re.split(r"[│┃]", ln)]
    assert max(len(ln) for ln in out.splitlines()) <= 80
    for v in reg.variants.values():  # every id and knob whole, on one line
        assert v.knob in cells and v.id in cells, v.knob
    assert "not shown at this width" in out  # what gave way is said
    code, out, _ = run(capsys, "resolve", "--profile", "tp2-default", "--non-stock")
    cells = [c.strip() for ln in out.splitlines() for c in re.split(r"[│┃]", ln)]
    rs_knobs = [ln.split("│")[1].strip() for ln in out.splitlines() if ln.startswith("│") and ln.split("│")[1].strip()]
    assert rs_knobs and all(k in {v.knob for v in reg.variants.values()} for k in rs_knobs), rs_knobs


def test_profile_schema_matches_the_shipped_copy_and_every_shipped_profile(capsys, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    code, out, err = run(capsys, "schema", "profile")
    assert code == 0, err
    schema = json.loads(out)
    jsonschema.Draft7Validator.check_schema(schema)
    shipped = REPO / "profiles" / "profile.schema.json"
    assert json.loads(shipped.read_text()) == schema, "stale: r9kctl schema profile --out profiles/profile.schema.json"
    validator = jsonschema.Draft7Validator(schema)
    reg = load_registry()
    knobs = schema["properties"]["knobs"]["properties"]
    assert {v.knob for v in reg.variants.values()} <= set(knobs)
    files = sorted((REPO / "profiles").glob("*.toml"))
    assert {f.stem for f in files} <= set(reg.profiles) and files
    for f in files:
        assert f.read_text().splitlines()[0] == "#:schema ./profile.schema.json", f.name
        errors = list(validator.iter_errors(tomllib.loads(f.read_text())))
        assert not errors, (f.name, [e.message for e in errors])
    # it can fail: what the loader refuses, the schema refuses too
    v = reg.variant("R9K_HC_FP8_DECODE_MAXM")
    for bad in ({"knobs": {"R9K_HC_FP8_DECODE": "yes please"}}, {"knobs": {"R9K_ROUTR": "stock"}},
                {"knobs": {"R9K_ROUTER": "fast"}}, {"tp": 0}, {"colour": "blue"},
                {"knobs": {"R9K_HC_FP8_DECODE_MAXM": int(v.range.max) + 1}} if v.range and v.range.max else {"tp": "x"}):
        assert list(validator.iter_errors(bad)), bad
    for good in ({"knobs": {"R9K_HC_FP8_DECODE": 0}}, {"knobs": {"hc_fp8_decode": True}},
                 {"knobs": {"R9K_ROUTER": "stock"}}):
        assert not list(validator.iter_errors(good)), good
    defn = schema["definitions"]["knobs"]["R9K_HC_FP8_DECODE"]
    assert reg.variant("R9K_HC_FP8_DECODE").summary in defn["description"] and "default" in defn
