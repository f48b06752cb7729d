"""The active set of this vLLM process: loaded from the launch's manifest, resolved at most once, agreed on
by every process and rank; failing fast.

Where the set comes from (first that applies), always as one :class:`r9k.registry.manifest.Manifest`:

1. vLLM's config: ``r9kctl launch`` carries the manifest in ``--additional-config`` under ``"r9k"``, which vLLM
   hands to every engine core, worker and node; vLLM calls the plugins with that config in hand but does not
   pass it, so :func:`find_carrier` reads it from the calling frame, or (API server) from the command line as
   vLLM's parser will read it, ``--config`` YAML included. A second server started from the same files takes
   a server id of its own (:func:`claim_server_id`).
2. ``envvars.MANIFEST``: a manifest file (written by the first process of a server started by hand, or by
   ``r9kctl bisect``).
3. ``envvars.PROFILE`` / ``envvars.TP`` / a declared knob in the environment: the first process resolves and
   validates once and hands the manifest on (:func:`hand_on`).
4. None of these: the plugin is inactive in this process.

Every process checks the manifest's integrity, the registry fingerprint and its environment's knob variables,
and never resolves again. Errors are one located line each in a :class:`StartupError`, before vLLM loads any
weight. The processes of one node compare hashes through ``envvars.LAUNCH_HASH``; the ranks of the world
through its rendezvous store (:mod:`r9k.plugin.agree`).
"""
from __future__ import annotations

import json
import multiprocessing
import os
import re
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from ..registry import envvars
from ..registry.cmdline import last_value
from ..registry.manifest import CARRIER_KEY, Manifest, ManifestError
from ..registry.redact import masked

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
    node: str = ""  # the host name
    started: Optional[float] = None  # the process's start time (pid_start_time): a reused pid is not it

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
    return ProcessInfo(name=name, pid=os.getpid(), rank=rank, node=socket.gethostname(),
                       started=pid_start_time(os.getpid()))


def pid_start_time(pid: int) -> Optional[float]:
    """When process ``pid`` started (seconds since boot, ``/proc/<pid>/stat``; None: no such process): with the
    pid it names one process, as a reused pid starts later."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        fields = raw.rsplit(")", 1)[1].split()
        state, ticks = fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None
    if state in ("Z", "X", "x"):  # exited, not yet reaped (a worker whose parent died waits for init): gone
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


def process_alive(pid: Optional[int], started: Optional[float]) -> bool:
    """Whether the process a status section names still runs (same pid, same start time)."""
    if not pid:
        return False
    now = pid_start_time(int(pid))
    if now is None:
        return False
    return started is None or abs(now - float(started)) < 0.05


@dataclass
class Active:
    """The outcome of start-up in one process: the manifest it serves."""

    rs: Manifest
    origin: str  # "additional_config (r9kctl launch)", "manifest <path>", "envvars.PROFILE, resolved by this process"
    warnings: list[str] = field(default_factory=list)
    server: str = ""  # the server instance id (created by r9kctl launch, or by the first process by hand)
    #: the credentials of the profile's [env] in clear, only where this process resolved the profile itself
    #: (started by hand); a manifest carries them by reference only
    credentials: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def hash(self) -> str:
        return self.rs.hash


def gate_labels(active) -> dict[str, str]:
    """Variant id -> its gate's state and evidence, as the manifest carries it (``registry.validate.gate_labels``)."""
    return dict(getattr(active.rs, "gates", None) or {})


#: The control variables that ask for the stack; the others (cache, registry location, log and debug
#: switches...) only say how, and alone leave the plugin inactive.
ACTIVATORS = (envvars.MANIFEST, envvars.PROFILE, envvars.TP)


def wants_activation(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks for this project's stack: an activator or a knob the registry declares.
    Other control variables leave it inactive; an ``R9K_*`` name that is neither is logged, with a did-you-mean."""
    if any(v.get(environ) for v in ACTIVATORS):
        return True
    names = [k for k in environ if k.startswith(envvars.PREFIX) and not envvars.is_control(k)]  # knobs, or misspelt
    if not names:
        return False
    knobs = _load_registry().knobs()
    if any(k in knobs for k in names):
        return True
    import difflib
    import logging

    declared = {n.upper(): n for n in [*knobs, *envvars.ALL]}  # knobs and control variables (envvars.PROFILE...)
    for k in names:
        close = difflib.get_close_matches(k.upper(), list(declared), n=1, cutoff=0.85)
        logging.getLogger("vllm.r9k").warning(
            "r9k: %s is set but is neither a knob of the registry nor a control variable; the plugin stays "
            "inactive%s", k, f" (did you mean {declared[close[0]]}?)" if close else "")
    return False


def _load_registry():
    from ..registry.errors import RegistryError

    from ..registry.loader import load_registry

    try:
        return load_registry()
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


# ------------------------------------------------------------------------------------ where the set is


def _argv_additional_config(argv: list[str]) -> Optional[str]:
    """The value of ``--additional-config`` as vLLM's parser will read this command line: a ``--config FILE`` is
    expanded by vLLM's own loader, its arguments before the command line's (the last value wins)."""
    args = [re.sub(r"^--additional_config(?==|$)", "--additional-config", a) for a in argv]
    if "--config" in args and args.index("--config") + 1 < len(args):
        i = args.index("--config")
        try:
            from vllm.utils.argparse_utils import FlexibleArgumentParser
        except ImportError:  # no vLLM here (unit tests of the core): nothing parses the file
            return last_value(args, "--additional-config")
        try:
            cfg = FlexibleArgumentParser().load_config_file(args[i + 1])
        except Exception as exc:  # noqa: BLE001 - vLLM itself refuses this file next; say why, located
            raise StartupError([f"{args[i + 1]}:1:1: error[manifest]: vLLM's --config file does not load: "
                                f"{type(exc).__name__}: {exc}"]) from None
        cfg = [re.sub(r"^--additional_config(?==|$)", "--additional-config", a) for a in cfg]
        args = cfg + args[:i] + args[i + 2:]
    return last_value(args, "--additional-config")


def find_carrier(argv: Optional[list[str]] = None, depth: int = 12) -> tuple[Optional[Any], str]:
    """The ``"r9k"`` entry of vLLM's ``additional_config`` for this process, and where it was found: a
    ``vllm_config`` (or ``EngineArgs``) of a calling frame, else the command line (API server, headless node)."""
    f = sys._getframe(1)
    for _ in range(depth):
        if f is None:
            break
        for cand in (f.f_locals.get("vllm_config"), f.f_locals.get("self")):
            ac = getattr(cand, "additional_config", None) if cand is not None else None
            if isinstance(ac, dict):
                return ac.get(CARRIER_KEY), f"additional_config of {type(cand).__name__}"
        f = f.f_back
    argv_ = list(sys.argv if argv is None else argv)
    raw = _argv_additional_config(argv_)
    if raw is None:
        return None, ""
    try:
        ac = json.loads(raw)
    except ValueError as exc:
        raise StartupError([f"error[manifest]: --additional-config is not JSON: {exc}"]) from None
    where = "--additional-config of the command line" + (" (with --config)" if "--config" in argv_ else "")
    return (ac.get(CARRIER_KEY) if isinstance(ac, dict) else None), where


def this_registry_fingerprint(environ: Optional[Mapping[str, str]] = None) -> str:
    """The fingerprint of the registry files this process would load (:func:`manifest.registry_fingerprint`)."""
    from ..registry.manifest import registry_fingerprint

    from ..registry.loader import PACKAGE_DIR, default_registry_root

    return registry_fingerprint(default_registry_root(environ), PACKAGE_DIR / "adapters.toml")


def check_manifest(m: Manifest, where: str, environ: Mapping[str, str], launched: bool = False) -> None:
    """What every process checks of its manifest: the registry it came from is the one here, no knob variable
    of this environment says otherwise, and (``launched``) every variable a launcher knob sets has its value."""
    errors = []
    if launched:
        from ..registry.vllm_map import env_pairs

        for r in sorted(m.items.values(), key=lambda r: r.variant.knob):
            s = r.variant.sets
            if s is None or s.kind != "env" or r.value in (None, "") or r.value == r.variant.stock:
                continue
            for name, value in env_pairs(str(r.value), s).items():  # what the launch exported for this value
                if environ.get(name) != value:
                    errors.append(f"{where}: error[launcher-env]: {r.variant.knob}={r.value} sets {name}={value}, "
                                  f"this process has {name}={environ.get(name)!r}")
    if m.registry:
        here = this_registry_fingerprint(environ)
        if here != m.registry:
            errors.append(f"{where}: error[registry-drift]: the manifest was resolved from registry {m.registry}, "
                          f"this process's registry files are {here} (another version of the registry or of "
                          f"r9k-stack on this node?)")
    for r in sorted(m.items.values(), key=lambda r: r.variant.knob):
        k = r.variant.knob
        if k in environ and r.variant.category != "launcher" and environ[k] != (r.value or ""):
            errors.append(f"{where}: error[manifest-drift]: {k}={environ[k]!r} in this process's environment, "
                          f"the manifest ({m.hash}) has {k}={r.value!r}")
    if errors:
        raise StartupError(errors, f"r9k: the manifest {m.hash} does not hold here; refusing to start vLLM")


def _manifest_file(path: str) -> Manifest:
    from ..registry import fileio
    from ..registry.manifest import from_dict

    try:  # the checked reader: a missing, binary, non-UTF-8 or malformed file is one located line
        data = fileio.read_json(path, "launch manifest", expect=dict)
    except fileio.FileError as exc:
        from ..registry.errors import RegistryError

        if isinstance(exc, RegistryError):
            raise StartupError([d.format() for d in exc.diagnostics]) from None
        raise StartupError([f"{path}: error[manifest]: cannot read the manifest: {exc}"]) from None
    try:
        return from_dict(data)
    except ManifestError as exc:
        raise StartupError([f"{path}{_json_key_location(path, str(exc))}: error[manifest]: {exc}"]) from None


def _json_key_location(path: str, problem: str) -> str:
    """``:line:col`` of the key a manifest problem names (``'values.x'`` ...) in the file; ``""`` if unreadable."""
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


def load_active(environ: Optional[Mapping[str, str]] = None, carried: Any = None,
                carried_from: str = "") -> Optional[Active]:
    """The active set of this process (None: inactive): the carried manifest, else the named manifest file,
    else one resolution (started by hand)."""
    from ..registry.manifest import from_carrier

    environ = os.environ if environ is None else environ
    path = envvars.MANIFEST.get(environ)
    if carried is not None:
        try:
            m, server = from_carrier(carried)
        except ManifestError as exc:
            raise StartupError([f"error[manifest]: {carried_from}: {exc}"]) from None
        if path:  # a file named too (the first process of this node wrote it): it must be the same set
            try:
                other = _manifest_file(path)
            except StartupError:
                other = None  # unreadable here: the carrier is authoritative
            if other is not None and other.hash != m.hash:
                raise StartupError([f"{path}: error[manifest-drift]: the manifest file has set {other.hash}, vLLM's "
                                    f"config carries {m.hash} ({carried_from}); first difference: "
                                    f"{_first_diff(other, m)}"])
        where = f"{carried_from}, from r9kctl launch"
        check_manifest(m, where, environ, launched=True)
        # the launch's server id: carried, else the launch's envvars.SERVER (by hand: never an earlier paste's)
        return Active(m, where, list(m.warnings), server or envvars.SERVER.get(environ) or "")
    if path:
        m = _manifest_file(path)
        check_manifest(m, path, environ)
        return Active(m, f"manifest {path}", list(m.warnings), envvars.SERVER.get(environ) or "")
    if not wants_activation(environ):
        return None
    return resolve_once(environ)


def _first_diff(a: Manifest, b: Manifest) -> str:
    from ..registry.manifest import first_difference

    return first_difference(a.knob_values(), b.knob_values()) or f"profile env {masked(a.extra_env)} vs {masked(b.extra_env)}"


def resolve_once(environ: Mapping[str, str]) -> Active:
    """Started by hand: resolve and validate ``envvars.PROFILE`` (at ``envvars.TP``), or the TP size's shipped
    default, once, into a manifest like the launcher's."""
    from ..registry.manifest import from_resolved
    from ..registry.resolve import resolve

    reg = _load_registry()
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
    from ..registry.redact import is_secret
    from ..registry.validate import gate_labels

    return Active(from_resolved(rs, this_registry_fingerprint(environ), warnings, gate_labels(reg, rs)),
                  f"{origin}, resolved by this process", warnings,
                  credentials={k: v for k, v in rs.extra_env.items() if is_secret(k)})


def hand_on(active: Active, environ=None) -> Optional[str]:
    """Started by hand: write the manifest and name it in ``envvars.MANIFEST`` for the processes to come."""
    environ = os.environ if environ is None else environ
    if envvars.MANIFEST.get(environ):
        return None
    from ..registry import fileio

    path = envvars.cache_dir(environ) / "run" / f"manifest-{active.hash}-{os.getpid()}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fileio.atomic_write(path, json.dumps(active.rs.to_dict()), "launch manifest")
    except OSError:
        return None
    environ[envvars.MANIFEST.name] = str(path)
    return str(path)


def _raise_on_resolve_errors(rs) -> None:
    errors = [d for d in rs.diagnostics if d.level == "error"]
    if errors:
        raise StartupError([d.format() for d in errors],
                           f"r9k: profile '{rs.profile}' does not resolve; refusing to start vLLM")


def check_agreement(active: Active, proc: ProcessInfo, environ=None) -> bool:
    """Compare this process's hash with the launch's (exported by the first process); True when this is the
    first process (or the launcher that exec'd into it). Raises on disagreement."""
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
    """Export the profile's ``[env]`` where unset (a differing value is kept, with a warning line). A credential
    carried by reference (``registry/redact.py``) must be here with that value: else a one-line
    :class:`StartupError` naming the variable, never a value."""
    from ..registry.redact import is_reference, mask, reference_problem

    environ = os.environ if environ is None else environ
    notes = []
    for k, v in active.rs.extra_env.items():
        cur = environ.get(k)
        if is_reference(v):
            if cur is None and k in active.credentials:  # resolved here from the profile: its own value
                environ[k] = cur = active.credentials[k]
            problem = reference_problem(k, v, environ, active.rs.profile)
            if problem:
                raise StartupError([f"error[credential]: {problem}"])
        elif cur is None:
            environ[k] = v
        elif cur != v:
            notes.append(f"profile '{active.rs.profile}' sets {k}={mask(k, v)}, but the environment has "
                         f"{k}={mask(k, cur)} (kept)")
    return notes


def server_id(active: Active, proc: ProcessInfo, environ=None, first: bool = False) -> str:
    """This server's instance id: the first process takes the launch's (or makes one) and claims it
    (:func:`claim_server_id`); the processes it starts inherit it through ``envvars.SERVER``."""
    environ = os.environ if environ is None else environ
    from ..registry.manifest import new_server_id

    if first:
        sid = active.server or new_server_id(active.rs.profile)
        if "--headless" not in sys.argv:  # a headless node of a multi-node server writes under the head's id
            sid = claim_server_id(sid, proc, environ)
    else:
        sid = envvars.SERVER.get(environ) or active.server or new_server_id(active.rs.profile)
    active.server = sid
    environ[envvars.SERVER.name] = sid
    return sid


def claim_server_id(base: str, proc: ProcessInfo, environ=None) -> str:
    """``base``, or ``base.2``, ``base.3``...: the first whose claim file (``<cache>/run/server-<id>.claim``) this
    process creates exclusively, or whose claimant no longer runs (:func:`process_alive`)."""
    run = Path(status_file_for("x", environ)).parent
    try:
        run.mkdir(parents=True, exist_ok=True)
    except OSError:
        return base
    mine = json.dumps({"pid": proc.pid, "started": proc.started, "node": proc.node})
    for n in range(1, 1000):
        sid = base if n == 1 else f"{base}.{n}"
        claim = run / f"server-{sid}.claim"
        for _ in range(2):
            try:
                fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                from ..registry import fileio

                try:  # a regular file only: a FIFO or folder at the name is never opened, only passed over
                    held = fileio.read_json(claim, "server id claim", expect=dict, max_bytes=4096)
                except fileio.FileError:
                    break  # not a claim to take over: the next id
                if held.get("node") not in (None, proc.node) or process_alive(held.get("pid"), held.get("started")):
                    break  # another live server's (or another node's): the next id
                try:  # a dead server's claim: free it and try again
                    claim.unlink()
                except OSError:
                    break
                continue
            except OSError:
                return base  # no claims possible here (read-only cache): the carried id, as before
            with os.fdopen(fd, "w") as f:
                f.write(mine)
            return sid
    return base


def status_file_for(server: str, environ=None) -> str:
    """Where the status file of server instance ``server`` is (its counter files lie beside it)."""
    return str(envvars.cache_dir(os.environ if environ is None else environ) / "run" / f"server-{server}.status.json")


def default_status_file(environ=None, server: str = "") -> str:
    """The status file of this server: ``envvars.STATUS_FILE``, else :func:`status_file_for`, exported for the
    server's other processes."""
    environ = os.environ if environ is None else environ
    path = environ.get(STATUS_FILE_VAR)
    if not path:
        path = status_file_for(server or f"pid{os.getpid()}", environ)
        environ[STATUS_FILE_VAR] = path
    return path


# ------------------------------------------------------------------------------ agreement across ranks


def rank_record(active: Active, proc: ProcessInfo, rank: int, table=None) -> dict:
    """What one rank tells the others: where it runs, its set (hash and every knob's value), its plan."""
    return {"node": proc.node or socket.gethostname(), "rank": rank, "pid": proc.pid, "started": proc.started,
            "process": proc.name, "server": active.server, "hash": active.hash,
            "values": active.rs.knob_values(), "extra_env": dict(active.rs.extra_env), **plan_view(table)}


def plan_view(table) -> dict:
    """What the ranks share of their dispatch table: ``in_use`` and ``modes`` (variant id -> state)."""
    if table is None:
        return {"in_use": {}, "modes": {}}
    return {"in_use": table.in_use(), "modes": {vid: str(p.state) for vid, p in sorted(table.plans.items())}}


def compare_ranks(records: list[dict]) -> list[str]:
    """One located line per rank whose set differs from rank 0's (empty when all agree)."""
    from ..registry.manifest import first_difference

    if not records:
        return []
    ref = min(records, key=lambda r: r["rank"])
    out = []
    for r in sorted(records, key=lambda r: r["rank"]):
        if r["hash"] == ref["hash"]:
            continue
        diff = first_difference(ref["values"], r["values"])
        if diff is None and ref.get("extra_env") != r.get("extra_env"):
            diff = f"profile env {masked(ref.get('extra_env') or {})} vs {masked(r.get('extra_env') or {})}"
        out.append(f"error[rank-mismatch]: node {r['node']} rank {r['rank']} (pid {r['pid']}) runs set {r['hash']}, "
                   f"node {ref['node']} rank {ref['rank']} runs {ref['hash']}; first differing knob: "
                   f"{diff or 'none (another registry?)'}")
    return out
