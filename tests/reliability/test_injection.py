"""Class "injection": nothing this project prints can run code when a shell sources it, and no secret is
printed. A seeded generator (no extra dependency) makes profiles whose ``[env]`` values hold every shell
metacharacter, quotes, newlines, command substitutions and non-ASCII text; every profile ``validate``
accepts has its ``resolve --format env`` and ``launch --dry-run`` output sourced by ``sh``: no marker
file appears and every variable arrives with exactly the value of the profile. Keys that are not variable
names (``X;touch M``, ``X=$(..)``, a newline, a digit first) and values with NUL are refused by
``validate`` with one line at the key."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from r9k.registry import redact

from .harness import run_main

META = list("'\"$`;|&()<>\\ \t\n!#*?~{}[]=%^,.:-+@") + ["$(", "${", "`", "'\"'\"'", "\\n", "é", "€", "日本", "\u202e"]


def _value(rng: random.Random, mark: Path) -> str:
    pieces = [f"$(touch {mark})", f"`touch {mark}`", f"'; touch {mark}; '", f"\"; touch {mark}; \"",
              f"\ntouch {mark}\n", f"${{X:-$(touch {mark})}}", f"\\'$(touch {mark})"]
    out = []
    for _ in range(rng.randint(0, 8)):
        r = rng.random()
        if r < 0.3:
            out.append(rng.choice(pieces))
        elif r < 0.7:
            out.append(rng.choice(META))
        else:
            out.append("".join(rng.choice("abcXYZ019_ ") for _ in range(rng.randint(1, 5))))
    return "".join(out)


def _key(rng: random.Random) -> str:
    first = rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
    return first + "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
                           for _ in range(rng.randint(0, 12)))


def _toml_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=True).replace("\x7f", "\\u007f")


def _profile(folder: Path, name: str, env: dict[str, str]) -> Path:
    lines = ['extends = "stock"', 'model = "qwen3.8-flash-next"', "tp = 2", "[env]"]
    lines += [f"{_toml_str(k)} = {_toml_str(v)}" for k, v in env.items()]
    path = folder / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _sourced(script: str, tmp_path: Path) -> dict[str, str]:
    """The environment after ``sh`` sources ``script`` (exported variables only)."""
    f = tmp_path / "out.sh"
    f.write_text(script, encoding="utf-8")
    dump = f"{sys.executable} -c 'import json, os; print(json.dumps(dict(os.environ)))'"
    r = subprocess.run(["sh", "-c", f". {f} && exec {dump}"], capture_output=True, text=True, cwd=tmp_path,
                       env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HF_TOKEN": "users-own-token"},
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_generated_env_values_never_run_when_sourced(tmp_path, seed):
    rng = random.Random(seed)
    mark = tmp_path / "PWNED"
    folder = tmp_path / "profiles"
    folder.mkdir()
    env = {_key(rng): _value(rng, mark) for _ in range(60)}
    env["HF_TOKEN"] = f"hunter2-{seed}-$(touch {mark})"  # a credential: masked everywhere
    env = {k: v for k, v in env.items() if not redact.is_secret(k) or k == "HF_TOKEN"}
    _profile(folder, "gen", env)
    base = ["--profiles-dir", str(folder)]
    code, out, err = run_main(base + ["validate", "-p", "gen"])
    assert code in (0, 1), err
    code, out, err = run_main(base + ["resolve", "-p", "gen", "--format", "env"])
    assert code == 0, err
    assert env["HF_TOKEN"] not in out and "hunter2" not in out + err
    got = _sourced(out, tmp_path)
    assert not mark.exists(), "sourcing resolve --format env ran a command"
    for k, v in env.items():
        if k == "HF_TOKEN":
            assert got[k] == "users-own-token"  # not replaced by a masked value
        else:
            assert got.get(k) == v, k
    code, out, err = run_main(base + ["launch", "-p", "gen", "--dry-run"])
    assert code == 0, err
    assert "hunter2" not in out + err
    env_part = "\n".join(ln for ln in out.splitlines() if not ln.startswith("/"))  # not the vllm command itself
    got = _sourced(env_part, tmp_path)
    assert not mark.exists(), "sourcing launch --dry-run ran a command"
    assert all(got.get(k) == v for k, v in env.items() if k != "HF_TOKEN")


BAD_KEYS = ["X;touch {m}", "X=$(touch {m})", "X\ntouch {m}", "1X", "", "X Y", "X-Y", "É", "X`id`", "X'", "X\x00"]


@pytest.mark.parametrize("i", range(len(BAD_KEYS)))
def test_keys_that_are_not_variable_names_are_refused_at_their_line(tmp_path, i):
    mark = tmp_path / "PWNED"
    key = BAD_KEYS[i].format(m=mark)
    folder = tmp_path / "profiles"
    folder.mkdir()
    _profile(folder, "bad", {"GOOD": "1", key: "v"})
    for argv in (["validate", "-p", "bad"], ["resolve", "-p", "bad", "--format", "env"],
                 ["launch", "-p", "bad", "--dry-run"]):
        code, out, err = run_main(["--profiles-dir", str(folder)] + argv)
        assert code == 2, (argv, out, err)
        errors = [ln for ln in err.splitlines() if "error[" in ln]
        assert len(errors) == 1 and "bad.toml:6:" in errors[0] and "not an environment variable name" in errors[0], err
        assert "export" not in out
    assert not mark.exists()


def test_nul_in_a_value_is_refused_at_its_line(tmp_path):
    folder = tmp_path / "profiles"
    folder.mkdir()
    _profile(folder, "nul", {"A": "1", "B": "x\x00y"})
    code, out, err = run_main(["--profiles-dir", str(folder), "validate", "-p", "nul"])
    errors = [ln for ln in err.splitlines() if "error[" in ln]
    assert code == 2 and len(errors) == 1 and "nul.toml:6:" in errors[0] and "NUL" in errors[0], err


def test_profile_and_file_names_with_control_characters(tmp_path):
    from r9k.registry.profile_io import save_as

    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "trailing\n.toml").write_text('extends = "stock"\n')
    code, out, err = run_main(["--profiles-dir", str(folder), "validate", "--all"])
    assert code == 2 and "trailing\\n" in err and "\ntrailing" not in err.replace("trailing\\n", ""), err
    (folder / "named.toml").write_text('name = "named\\n"\nextends = "stock"\n')
    code, out, err = run_main(["--profiles-dir", str(folder), "validate", "-p", "named"])
    assert code == 2 and "profile name" in err, err
    for bad in ("new\n", "new\r", "a\x1b[2Jb", "tab\tname"):
        with pytest.raises(ValueError):
            save_as(folder, bad, "stock", {})
    assert sorted(p.name for p in folder.iterdir()) == ["named.toml", "trailing\n.toml"]


def test_plugin_warning_masks_credentials():
    """The plugin's startup note about a profile variable the environment overrides shows no secret."""
    from types import SimpleNamespace

    from r9k.plugin.startup import apply_profile_env

    active = SimpleNamespace(rs=SimpleNamespace(profile="p", extra_env={"HF_TOKEN": "from-profile-123",
                                                                         "PLAIN": "a"}))
    notes = apply_profile_env(active, {"HF_TOKEN": "from-env-456", "PLAIN": "b"})
    text = "\n".join(notes)
    assert "from-profile-123" not in text and "from-env-456" not in text and "HF_TOKEN=***" in text
    assert "PLAIN=a" in text and "PLAIN=b" in text


def test_secret_names():
    for n in ("HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "GITHUB_TOKEN", "api_key"):
        assert redact.is_secret(n), n
    for n in ("MAX_TOKENS", "R9K_ROUTER", "VLLM_CPU_KVCACHE_SPACE", "PWD", "KEYMAP_FILE", "TOKENIZER"):
        assert not redact.is_secret(n), n
