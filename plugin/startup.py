"""Resolving the active set at startup, in every vLLM process, and failing fast.

Where the set comes from (first that applies):

1. ``envvars.MANIFEST``: the manifest ``r9kctl launch`` wrote after validating. The process re-resolves
   the manifest's profile at its TP size against its own environment with the core resolver (the
   same layers and checks as ``r9kctl validate``) and refuses to start when the result differs from
   the manifest (hash mismatch: the environment or the registry changed since the launch validated).
2. ``envvars.PROFILE`` (started by hand): that profile, at the TP size in ``envvars.TP`` if set.
3. ``envvars.TP`` or any declared knob in the environment: the shipped default profile for that TP size
   (``tp<N>-default``).
4. Nothing of the above: the plugin is inactive in this process (a vLLM that merely has the package
   installed is left alone).

Every error is reported with the core's located one-line format (``path:line:col: error[code]: ...``)
in a :class:`StartupError`, raised from ``register()``, i.e. before vLLM builds the model or loads
any weight.

Agreement between processes: the first plugin process of a launch exports the hash of its resolved
set as ``envvars.LAUNCH_HASH`` (inherited by the engine core and the workers it spawns, and copied to
Ray workers because it is declared to vLLM's env registry); every later process compares its own
hash with it and refuses to start on a mismatch.
"""
from __future__ import annotations

import json
import multiprocessing
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional

from ..registry import envvars

if TYPE_CHECKING:
    from .view import ResolvedView

#: Exported by the first plugin process of a launch; compared by every later one.
LAUNCH_HASH_VAR = envvars.LAUNCH_HASH.name
#: The pid of the process that exported it (``r9kctl launch`` exec's into the API server: same pid).
LAUNCH_PID_VAR = envvars.LAUNCH_PID.name
#: Names the status file; when it is unset, the first process picks one and exports it for the others.
STATUS_FILE_VAR = envvars.STATUS_FILE.name


class StartupError(RuntimeError):
    """The plugin refuses to let vLLM start; the message holds one located line per problem."""

    def __init__(self, lines: list[str], headline: str = "r9k: refusing to start vLLM"):
        self.lines = lines
        super().__init__(headline + ":\n" + "\n".join("  " + ln for ln in lines))


@dataclass
class ProcessInfo:
    """Which vLLM process this is, from the multiprocessing name vLLM gives it."""

    name: str  # "MainProcess", "EngineCore", "EngineCore_DP0", "VllmWorker-1", ...
    pid: int
    rank: int  # worker rank (0 outside workers)

    @property
    def role(self) -> str:
        if self.name.startswith("VllmWorker"):
            return "worker"
        if self.name.startswith("EngineCore"):
            return "engine"
        return "main"  # the API server, or the process of an offline LLM(...)

    @property
    def label(self) -> str:
        return f"{self.name} pid {self.pid}"


def process_info() -> ProcessInfo:
    name = multiprocessing.current_process().name
    rank = 0
    if name.startswith("VllmWorker-"):
        try:
            rank = int(name.rsplit("-", 1)[1])
        except ValueError:
            rank = 0
    return ProcessInfo(name=name, pid=os.getpid(), rank=rank)


@dataclass
class Active:
    """The outcome of startup resolution in one process."""

    rs: "ResolvedView"  # r9k.registry.resolve.ResolvedSet, or the launch snapshot's LightSet
    reg: object  # r9k.registry.loader.Registry
    origin: str  # "manifest <path>", the name of envvars.PROFILE, "shipped default for TP n"
    warnings: list[str] = field(default_factory=list)

    @property
    def hash(self) -> str:
        return self.rs.hash


#: The control variables that ask for the stack; the others (cache, registry location, log and debug
#: switches...) only say how, and alone leave the plugin inactive.
ACTIVATORS = (envvars.MANIFEST, envvars.MANIFEST_DATA, envvars.PROFILE, envvars.TP)


def candidate_knobs(environ: Mapping[str, str]) -> list[str]:
    """``R9K_*`` names in ``environ`` that are not control variables: knobs, or misspelt ones."""
    return [k for k in environ if k.startswith(envvars.PREFIX) and not envvars.is_control(k)]


def wants_activation(environ: Mapping[str, str]) -> bool:
    """Whether anything in the environment asks for this project's stack: an activator (manifest, profile,
    TP size) or a knob the registry declares. Control variables alone (``envvars.NO_CACHE``,
    ``envvars.CACHE_DIR``, ...) and ``R9K_*`` names that are no knob (``R9K_LOG_LEVEL``) leave it
    inactive; the latter are logged once, with a did-you-mean when one is close to a knob."""
    if any(v.get(environ) for v in ACTIVATORS):
        return True
    names = candidate_knobs(environ)
    if not names:
        return False
    knobs = _load_registry().knobs()
    if any(k in knobs for k in names):
        return True
    import difflib
    import logging

    for k in names:
        close = difflib.get_close_matches(k, list(knobs), n=1, cutoff=0.85)
        logging.getLogger("vllm.r9k").warning(
            "r9k: %s is set but is neither a knob of the registry nor a control variable; the plugin stays "
            "inactive%s", k, f" (did you mean {close[0]}?)" if close else "")
    return False


def _load_registry():
    from ..registry.errors import RegistryError

    from .regcache import load_registry_cached

    try:
        return load_registry_cached()
    except RegistryError as exc:
        raise StartupError([d.format() for d in exc.diagnostics],
                           "r9k: the registry does not load; refusing to start vLLM") from None


def _check(reg, rs, strict: bool) -> list[str]:
    """The core's semantic checks on a resolved set; returns warning lines, raises on errors."""
    from ..registry.validate import Report, check_profile

    report = Report()
    check_profile(reg, rs, report)
    errors = report.errors + (report.warnings if strict else [])
    if errors:
        raise StartupError([d.format() for d in errors],
                           f"r9k: profile '{rs.profile}' does not validate; refusing to start vLLM")
    return [d.format() for d in report.warnings]


#: The launch manifest itself, compressed (``r9kctl launch`` exports it): a worker that cannot read the
#: launcher's manifest file (another node, another directory) resolves from this instead.
MANIFEST_DATA_VAR = envvars.MANIFEST_DATA.name


def _read_manifest(path: Optional[str], carried: Optional[str]) -> tuple[dict, str]:
    """The manifest from its file, else from the environment; both present: they must agree."""
    from .snapshot import decode_manifest

    from_file = from_env = None
    file_error = None
    if path:
        from ..registry import fileio

        try:  # the checked reader: a missing, binary, non-UTF-8 or malformed file is one located line
            from_file = fileio.read_json(path, "launch manifest", expect=dict)
        except fileio.FileError as exc:
            file_error = exc
    if carried:
        try:
            from_env = decode_manifest(carried)
            if not isinstance(from_env, dict):
                raise ValueError(f"a manifest is a JSON object, not {type(from_env).__name__}")
        except (ValueError, TypeError) as exc:
            raise StartupError([f"error[manifest]: {MANIFEST_DATA_VAR} is not a launch manifest: {exc}"]) from None
    if from_file is not None and from_env is not None and from_file.get("hash") != from_env.get("hash"):
        raise StartupError([f"{path}: error[manifest-drift]: the manifest file (hash {from_file.get('hash')}) and "
                            f"the one carried in {MANIFEST_DATA_VAR} (hash {from_env.get('hash')}) differ"])
    if from_file is not None:
        return from_file, path
    if from_env is not None:
        return from_env, (f"{MANIFEST_DATA_VAR} (carried in the environment; {path} not readable here)"
                          if path else MANIFEST_DATA_VAR)
    from ..registry.errors import RegistryError

    if isinstance(file_error, RegistryError):
        raise StartupError([d.format() for d in file_error.diagnostics])
    raise StartupError([f"{path}: error[manifest]: cannot read the manifest: {file_error}"])


def _json_key_location(path: str, problem: str) -> str:
    """``:line:col`` of the key a manifest problem names (``'values.x'`` ...), found in the file's text; ``""``
    when it cannot be found."""
    import re

    m = re.search(r"'([A-Za-z0-9_.\-]+)'", problem)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, ValueError):
        return ""
    if not m:
        return ":1:1"
    pos = 0
    for part in m.group(1).split("."):
        i = text.find(f'"{part}"', pos)
        if i < 0:
            break
        pos = i
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f":{line}:{col}"


def resolve_active(environ: Optional[Mapping[str, str]] = None) -> Optional[Active]:
    """Resolve and validate the active set for this process; None when the plugin is inactive."""
    environ = dict(os.environ if environ is None else environ)
    if not wants_activation(environ):
        return None
    from ..registry.resolve import ResolvedSet, resolve

    reg = _load_registry()
    manifest_path = envvars.MANIFEST.get(environ)
    carried = environ.get(MANIFEST_DATA_VAR)
    if manifest_path or carried:
        data, where = _read_manifest(manifest_path, carried)
        manifest_path = where
        try:
            from_launch = ResolvedSet.from_manifest(data, reg)
        except ValueError as exc:  # not the shape of a manifest
            where = manifest_path
            if envvars.MANIFEST.get(environ) == manifest_path:
                where += _json_key_location(manifest_path, str(exc))
            raise StartupError([f"{where}: error[manifest]: not a launch manifest: {exc}"]) from None
        if not from_launch.ok:
            raise StartupError([d.format() for d in from_launch.diagnostics if d.level == "error"],
                               f"r9k: manifest {manifest_path} is not valid here; refusing to start vLLM")
        # The launch's --set overrides are part of the manifest (launcher knobs among them are not
        # exported as variables): re-apply them, as the launch did, at the highest precedence.
        sets = {r.variant.knob: r.value for r in from_launch.items.values()
                if r.layer == "override" and r.value is not None}
        here = resolve(reg, from_launch.profile, tp=from_launch.tp, env=environ, sets=sets or None,
                       platform=from_launch.platform, strict=from_launch.strict or None)
        _raise_on_resolve_errors(here)
        if here.hash != from_launch.hash:
            diffs = [f"{r.variant.knob}: manifest {from_launch.items[vid].value!r}, this process {r.value!r} "
                     f"(from {r.source})"
                     for vid, r in sorted(here.items.items())
                     if vid in from_launch.items and from_launch.items[vid].value != r.value]
            if from_launch.extra_env != here.extra_env:
                diffs.append(f"profile env: manifest {from_launch.extra_env}, this process {here.extra_env}")
            raise StartupError(
                [f"{manifest_path}: error[manifest-drift]: the active set resolved here ({here.hash}) differs "
                 f"from the one r9kctl launch validated ({from_launch.hash})"] + diffs)
        warnings = _check(reg, from_launch, from_launch.strict)
        # Keep the manifest's provenance (it knows which values came from --set on the command line).
        return Active(from_launch, reg, f"manifest {manifest_path}", warnings)

    tp = envvars.TP.get(environ)
    try:
        tp_n = int(tp) if tp else None
    except ValueError:
        raise StartupError([f"error[bad-value]: {envvars.TP.name}={tp!r} is not an integer (environment {envvars.TP.name})"]) from None
    profile = envvars.PROFILE.get(environ)
    origin = envvars.PROFILE.name
    if not profile:
        profile = f"tp{tp_n or 1}-default"
        origin = f"shipped default for TP {tp_n or 1}"
        if profile not in reg.profiles:
            shipped = sorted(p for p in reg.profiles if p.endswith("-default"))
            m, p, t = envvars.MANIFEST.name, envvars.PROFILE.name, envvars.TP.name
            raise StartupError([f"error[no-profile]: {envvars.PREFIX}* variables are set but neither {m} nor {p}, "
                                f"and there is no shipped default profile '{profile}' "
                                f"(shipped: {', '.join(shipped)}); set {p} or {t}"])
    rs = resolve(reg, profile, tp=tp_n, env=environ)
    _raise_on_resolve_errors(rs)
    warnings = _check(reg, rs, rs.strict)
    return Active(rs, reg, origin, warnings)


def _raise_on_resolve_errors(rs) -> None:
    errors = [d for d in rs.diagnostics if d.level == "error"]
    if errors:
        raise StartupError([d.format() for d in errors],
                           f"r9k: profile '{rs.profile}' does not resolve; refusing to start vLLM")


def check_agreement(active: Active, proc: ProcessInfo, environ=None) -> bool:
    """Compare this process's hash with the launch's; export it when this is the first process.

    Returns True when this process is the first of the launch (it exported the hash, or the launcher
    that exec'd into it did: same pid). Raises on disagreement.
    """
    environ = os.environ if environ is None else environ
    expected = environ.get(LAUNCH_HASH_VAR)
    if not expected:
        environ[LAUNCH_HASH_VAR] = active.hash
        environ[LAUNCH_PID_VAR] = str(proc.pid)
        return True
    if expected != active.hash:
        who = "worker" if proc.role == "worker" else proc.role
        raise StartupError([f"error[hash-mismatch]: this {who} ({proc.label}) resolved the active set to "
                            f"{active.hash}, the engine/launch resolved {expected}; the processes of one "
                            "server must run the same kernel set (different environment or registry files?)"])
    return environ.get(LAUNCH_PID_VAR) == str(proc.pid)


def apply_profile_env(active: Active, environ=None) -> list[str]:
    """Export the profile's ``[env]`` (e.g. TRITON_INTERPRET for cpu-smoke) when started by hand;
    ``r9kctl launch`` has exported it already. Never overrides a variable that is set: a difference
    is reported as a warning line instead."""
    environ = os.environ if environ is None else environ
    notes = []
    for k, v in active.rs.extra_env.items():
        cur = environ.get(k)
        if cur is None:
            environ[k] = v
        elif cur != v:
            notes.append(f"profile '{active.rs.profile}' sets {k}={v}, but the environment has {k}={cur} (kept)")
    return notes


def default_status_file(environ=None) -> str:
    """The status file of this launch: ``envvars.STATUS_FILE``, else next to the manifest, else in the cache.
    The first process decides and exports it, so that every process of the launch writes the same."""
    environ = os.environ if environ is None else environ
    path = environ.get(STATUS_FILE_VAR)
    if not path:
        manifest = envvars.MANIFEST.get(environ)
        if manifest:
            path = str(Path(manifest).with_suffix("")) + ".status.json"
        else:
            path = str(envvars.cache_dir(environ) / "run" / f"status-{os.getpid()}.json")
        environ[STATUS_FILE_VAR] = path
    return path
