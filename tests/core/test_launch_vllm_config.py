"""``r9kctl launch --format vllm-config``: vLLM's own formats (config.yaml for ``vllm serve --config`` and an
env file); vLLM's parser reads the config back to the same arguments as the printed command."""
import json
import os
import subprocess

import pytest

E2E_MINUTES = 1  # vLLM's parser per profile: 35 + 32 s under load 5-10 on 2026-12-01: tests/conftest.py runs it early (no server; slow)


def test_vllm_config_reads_back_to_the_same_arguments(r9kctl, tmp_path):
    pytest.importorskip("vllm")
    out = tmp_path / "out"
    rc, stdout, err = r9kctl("launch", "--profile", "27b-tp2", "--format", "vllm-config", "--out", str(out))
    assert rc == 0, stdout + err
    rc, js, err = r9kctl("launch", "--profile", "27b-tp2", "--dry-run", "--format", "json")
    plan = json.loads(js)
    cfg, envf = (out / "config.yaml").read_text(), (out / "vllm.env").read_text()
    assert cfg.startswith(f"# r9k-stack profile 27b-tp2 tp2 hash {plan['manifest']['hash']}")
    assert f"hash {plan['manifest']['hash']}" in envf.splitlines()[0]
    # the env file, sourced by a shell, gives exactly the plan's variables (values shell-quoted)
    shown = subprocess.run(["bash", "-c", f"set -a; . {out / 'vllm.env'}; set +a; env -0"], env={"PATH": "/usr/bin:/bin"},
                           capture_output=True, text=True, timeout=60)
    got = dict(kv.split("=", 1) for kv in shown.stdout.split("\0") if "=" in kv)
    for k, v in plan["env"].items():  # each invocation is a server instance of its own: its id differs
        assert got.get(k) == v or (k == "_R9K_SERVER" and got.get(k, "").startswith("27b-tp2-")), k
    # vLLM's own parser: --config config.yaml == the command's arguments
    code = f"""
import json, sys
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
def parse(argv):
    top = FlexibleArgumentParser(prog="vllm")
    sub = top.add_subparsers(dest="subparser")
    ServeSubcommand().subparser_init(sub)
    ns = vars(top.parse_args(argv))
    ns["model"] = ns.pop("model_tag", None) or ns.get("model")
    # the server instance id travels in the environment (_R9K_SERVER), not here: all must be equal
    return {{k: repr(v) for k, v in ns.items() if k != "dispatch_function"}}
argv = json.loads(sys.argv[1])
a, b = parse(["serve", "--config", sys.argv[2]]), parse(argv)
diff = {{k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}}
print(json.dumps(diff))
"""
    p = subprocess.run([os.sys.executable, "-c", code, json.dumps(plan["argv"][1:]), str(out / "config.yaml")],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    diff = json.loads(p.stdout.strip().splitlines()[-1])
    assert diff == {}, diff


def test_every_shipped_profile_parses_with_the_installed_vllms_own_parser_abbreviations_off(tmp_path):
    """The installed vLLM is the judge: each shipped profile's launch argv goes through vLLM's own ``vllm serve``
    parser with ``allow_abbrev=False``, and every VLLM_* variable it sets is in ``vllm.envs``."""
    pytest.importorskip("vllm")
    from r9k.r9kctl.launch import plan_launch
    from r9k.registry import load_registry

    reg = load_registry()
    launches = {}
    for name in sorted(reg.profiles):
        plan = plan_launch(reg, name, write_manifest=False, build_model=False)
        assert plan.ok, (name, [d.format() for d in plan.report.errors])
        launches[name] = {"argv": plan.argv[1:], "env": sorted(k for k in plan.env if k.startswith("VLLM_"))}
    assert "--kv-cache-memory-bytes" in launches["27b-tp2"]["argv"]
    code = """
import json, sys
import vllm.envs
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
top = FlexibleArgumentParser(prog="vllm")
sub = top.add_subparsers(dest="subparser")
serve = ServeSubcommand().subparser_init(sub)
serve.allow_abbrev = False
bad = {}
for name, l in json.loads(sys.stdin.read()).items():
    try:
        top.parse_args(l["argv"])
    except SystemExit:
        bad[name] = "parser refused"
    unknown = [v for v in l["env"] if v not in vllm.envs.environment_variables]
    if unknown:
        bad[name] = unknown
# the check is live: the issue's abbreviation is refused with abbreviations off
try:
    top.parse_args(["serve", "m", "--kv-cache-memory", "9"])
    bad["(abbreviation accepted)"] = True
except SystemExit:
    pass
print(json.dumps(bad))
"""
    p = subprocess.run([os.sys.executable, "-c", code], input=json.dumps(launches), capture_output=True, text=True,
                       timeout=600)  # on stdin: 11 launches' manifests exceed one argument's 128 KiB
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {}, p.stderr[-3000:]
