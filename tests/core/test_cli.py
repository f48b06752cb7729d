"""The command line as a new user meets it: located errors, exit codes, never a traceback."""
import json
import re

import pytest

from r9k.registry import envvars


def write(d, name, text):
    d.mkdir(exist_ok=True)
    (d / name).write_text(text)
    return d


def one_error(code, out, err, kind, file_part, line):
    assert code == 2, (out, err)
    assert "Traceback" not in err + out
    lines = [ln for ln in err.splitlines() if "error[" in ln]
    assert len(lines) == 1, err
    m = re.match(r"^(.+?):(\d+)(?::(\d+))?: error\[([a-z-]+)\]", lines[0])
    assert m, lines[0]
    assert file_part in m.group(1) and int(m.group(2)) == line and m.group(4) == kind, lines[0]
    return lines[0]


# (profile file, its text, the error's kind, its line, words the line has)
ONE_FILE_ERRORS = [
    ("broken", 'description = "x"\nextends = "tp4-default"\n[knobs\nR9K_ROUTER = "r9k"\n', "toml-syntax", 3,
     ("TOML syntax error",)),
    ("typo", 'extends = "tp4-default"\n\n[knbos]\nR9K_ROUTER = "stock"\n', "schema", 3, ("unknown field 'knbos'",)),
    ("bad", 'extends = "tp4-default"\n\n[knobs]\nR9K_HC_FP8_DECODE = "yes please"\n', "bad-value", 4,
     ("R9K_HC_FP8_DECODE", "boolean")),
    ("unk", 'extends = "tp4-default"\n[knobs]\nR9K_ROUTR = "stock"\n', "unknown-variant", 3,
     ("did you mean R9K_ROUTER?",)),
]


@pytest.mark.parametrize("name,text,kind,line,says", ONE_FILE_ERRORS, ids=[e[2] for e in ONE_FILE_ERRORS])
def test_one_bad_profile_file(r9kctl, tmp_path, name, text, kind, line, says):
    d = write(tmp_path / "p", f"{name}.toml", text)
    shown = one_error(*r9kctl("--profiles-dir", str(d), "validate", "--profile", name), kind, f"{name}.toml", line)
    assert all(w in shown for w in says), shown


def test_extends_cycle(r9kctl, tmp_path):
    d = tmp_path / "p"
    write(d, "a.toml", 'description = "a"\nextends = "b"\n')
    write(d, "b.toml", 'description = "b"\nextends = "a"\n')
    line = one_error(*r9kctl("--profiles-dir", str(d), "validate", "--profile", "a"), "extends-cycle", ".toml", 2)
    assert "a -> b -> a" in line


def test_misspelt_env_variable_is_a_warning(r9kctl):
    code, out, err = r9kctl("validate", "--profile", "tp4-default", env={"R9K_HC_FP8_DECOD": "1"})
    assert code == 0 and "Traceback" not in err
    assert "warning[unknown-env]" in err and "did you mean R9K_HC_FP8_DECODE?" in err
    code, out, err = r9kctl("validate", "--strict", "--profile", "tp4-default", env={"R9K_HC_FP8_DECOD": "1"})
    assert code == 1 and "error[unknown-env]" in err  # refused by --strict only (exit-code rule)


def test_registry_schema_error_is_located(r9kctl, registry_copy):
    f = registry_copy / "variants" / "decode.toml"
    text = f.read_text()
    lines = text.splitlines()
    n = next(i for i, ln in enumerate(lines) if ln.startswith('knob = "R9K_ROUTER"'))
    lines.insert(n + 1, 'stokc = "stock"')
    f.write_text("\n".join(lines) + "\n")
    line = one_error(*r9kctl("--registry", str(registry_copy), "validate", "--all"), "schema", "decode.toml", n + 2)
    assert "variant.1.stokc: unknown field 'stokc'" in line


def test_json_output_for_scripts(r9kctl, tmp_path):
    d = write(tmp_path / "p", "bad.toml", 'extends = "tp4-default"\n[knobs]\nUTIL = 1.5\n')
    code, out, err = r9kctl("--profiles-dir", str(d), "validate", "--profile", "bad", "--format", "json")
    data = json.loads(out)
    assert code == 2 and data["ok"] is False and data["exit_code"] == 2
    (e,) = data["errors"]
    assert e["code"] == "bad-value" and e["line"] == 3 and "UTIL" in e["items"]


def test_requires_and_rejected(r9kctl):
    code, out, err = r9kctl("validate", "--profile", "tp4-default", "--set", "R9K_AR_PIPE=r9k")
    assert code == 2 and "error[rejected-variant]" in err and "ar_pipeline" in err
    code, out, err = r9kctl("validate", "--profile", "tp4-default", "--set", "R9K_GDN_STATE=onepage",
                            "--set", "PREFIX_CACHE=1")
    assert code == 2 and "error[requires]" in err and "prefix_cache_off" in err


def test_diff_v030_v031(r9kctl):
    code, out, err = r9kctl("diff", "v0.3.0", "v0.3.1")
    assert code == 0, err
    assert re.search(r"R9K_HC_FP8_DECODE\s+tp4\s+0\s+1", out)
    assert not re.search(r"R9K_HC_FP8_DECODE\s+tp2", out)
    assert re.search(r"R9K_FP8_QA\s+tp4\s+0\s+1", out)
    assert re.search(r"decode step \(ms\)\s+512-token essay \(~/tp4tune.sh\)\s+16\.42-16\.44\s+15\.01\s+"
                     r"-1\.41 \(-8\.6%\)", out)
    assert re.search(r"single-stream decode \(tok/s\)\s+probe\s+199\s+217 \[reference: 217\.2\]", out)
    assert re.search(r"v0\.3\.0 defaults\s+95\.75% \(1,263\)\s+160 / 164\s+0 bad of 1,040", out)
    assert "7 vs 8 discordant, McNemar p = 1.00" in out
    assert not re.search(r"added\s+\S+\s+R9K_HC_FP8_DECODE_KB", out)  # measured and left off
    code, md, err = r9kctl("diff", "v0.3.0", "v0.3.1", "--format", "markdown")
    assert "| `R9K_HC_FP8_DECODE` | tp4 | 0 | 1 |" in md
    assert "| decode step (ms) | 512-token essay (~/tp4tune.sh) | 16.42-16.44 | 15.01 | -8.6% |" in md
    assert "| KV cache (tokens) | vLLM startup | 442-475k [reference: 442,575] | unchanged | unchanged (notes) |" in md
    assert "7 vs 8 discordant, McNemar p = 1.00; outputs identical on 25.5% of questions" in md
    code, js, err = r9kctl("diff", "v0.3.0", "v0.3.1", "--format", "json")
    data = json.loads(js)
    row = next(r for r in data["bench"] if r["metric"] == "decode_step_ms" and r["config"] == "fn_tp4")
    assert round(row["pct"], 1) == -8.6


def test_diff_profiles_and_unknown_side(r9kctl):
    code, out, err = r9kctl("diff", "tp4-default", "round2-numerics")
    assert code == 0 and "R9K_ROUTER" in out and "round2-numerics.toml" in out
    code, out, err = r9kctl("diff", "v0.3.0", "v0.3.7")
    assert code == 2 and "error[unknown-side]" in err and "Traceback" not in err


def test_list_show_resolve(r9kctl):
    code, out, err = r9kctl("list", "--category", "fusion", "--status", "default-on", "--format", "ids")
    assert code == 0 and "router_gemm" in out.split() and "moe_fused_routing" not in out.split()
    code, out, err = r9kctl("show", "R9K_ROUTER")
    assert code == 0 and "r9k.kernels.router" in out and "pluggable_layer:gate_linear" in out
    code, out, err = r9kctl("show", "R9K_ROUTRE")
    assert code == 2 and "did you mean R9K_ROUTER?" in err
    code, out, err = r9kctl("resolve", "--profile", "tp2-default", "--format", "env")
    assert code == 0 and "export R9K_HC_FP8_DECODE=1" in out
    code, out, err = r9kctl("resolve", "--profile", "round2-numerics", "--non-stock")
    assert code == 0 and "R9K_ROUTER" not in out.split()  # at stock there


def test_launch_dry_run_and_refusal(r9kctl):
    code, out, err = r9kctl("launch", "--profile", "tp4-default", "--dry-run", "--format", "json")
    assert code == 0, err
    plan = json.loads(out)
    argv = plan["argv"]
    assert ("serve" in argv or "vllm.entrypoints.openai.api_server" in argv)
    assert "/models/Qwen3.8-Flash-Next" in argv and argv[argv.index("--tensor-parallel-size") + 1] == "4"
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.98"
    carried = json.loads(argv[argv.index("--additional-config") + 1])["r9k"]  # the set, in vLLM's own config
    assert carried["hash"] == plan["manifest"]["hash"] and plan["env"]["_R9K_SERVER"] == plan["server"]
    # nothing per start in the config vLLM hashes into its compile-cache key: two plans of one set carry the same
    code, out2, err = r9kctl("launch", "--profile", "tp4-default", "--dry-run", "--format", "json")
    argv2 = json.loads(out2)["argv"]
    assert json.loads(out2)["server"] != plan["server"]
    assert argv2[argv2.index("--additional-config") + 1] == argv[argv.index("--additional-config") + 1]
    assert carried["path"].endswith(f"tp4-default-tp4-{plan['manifest']['hash']}.json")
    assert "R9K_HC_FP8_DECODE" not in plan["env"], "installed by the plugin from the carried set: not exported"
    assert plan["env"]["R9K_PDL"] == "1"  # env-only: read from the environment by the kernels' helper
    code, out, err = r9kctl("launch", "--profile", "tp4-default", "--dry-run", "--set", "R9K_ROUTER=fast")
    assert code == 2 and "refusing to launch" in err and "error[bad-value]" in err
