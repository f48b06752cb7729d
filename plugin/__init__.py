"""The vLLM plugin of r9k-stack (entry point ``vllm.general_plugins: r9k = r9k.plugin:register``).

vLLM calls :func:`register` in every process it starts (API server, engine core, each worker),
possibly more than once. It:

1. loads the active set: the manifest ``r9kctl launch`` carries in vLLM's ``--additional-config`` (or a
   manifest file ``envvars.MANIFEST`` names), checked, never resolved again; started by hand
   (``envvars.PROFILE``, ``envvars.TP``), the first process resolves and validates once and hands the same
   manifest on (:mod:`r9k.plugin.startup`); any error raises :class:`~r9k.plugin.startup.StartupError` with
   located lines, before vLLM builds the model or loads weights;
2. checks that this process agrees with the server's first process (hash of the set); the ranks agree
   once vLLM has made its world group, through the world's rendezvous store (:mod:`r9k.plugin.agree`), and
   then share their live figures there for the head's status;
3. plans the dispatch table (which implementation each variant gets here; fallback to stock with one
   warning, or an error in strict mode);
4. declares the knobs to vLLM's environment-variable registry (graph-affecting ones reach the
   torch.compile cache key);
5. installs the implementations through vLLM's extension points (``PluggableLayer.register_oot``);
6. logs one startup table (rank 0 in full, other ranks one line) and writes its status section.

It imports neither textual nor rich, nor torch-heavy modules of its own; the kernel modules load at
model construction. Nothing happens when neither vLLM's config carries a set nor an ``R9K_*`` variable
asks for one (plain vLLM use), except that a worker rank, once vLLM made its world group, sets one key in the
ranks' store saying it has no set (so that a server whose other ranks run one refuses at once, naming it).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

from ..registry import envvars

logger = logging.getLogger("vllm.r9k")

# Variables that only say where things are; alone they do not switch the plugin on.
_PATH_VARS = (envvars.CACHE_DIR.name, envvars.REGISTRY.name, envvars.PROFILES_DIR.name)

_done = False
_error: Optional[BaseException] = None
_active = None
_proc = None
_status_path: Optional[str] = None
_applied: Optional[dict] = None  # what vLLM applied of the launch's requests (API server; plugin.applied)
_flusher = None
_ranks: Optional[list] = None  # every rank's record, once the ranks agreed (agree.agree)
_live = None  # (agree.LivePublisher, this rank's agreement record), once the ranks agreed

#: Seconds between two looks of a process's flusher at its counters (a write only when they changed).
FLUSH_INTERVAL_S = 1.0


def register() -> None:
    """vLLM's general-plugin hook: idempotent (a second call in one process does nothing more)."""
    global _done, _error
    if _done:
        if _error is not None:
            raise _error
        return
    _done = True
    try:
        _register()
    except Exception as exc:
        from .startup import StartupError

        if not isinstance(exc, StartupError):  # only the startup error leaves the plugin: one line saying what
            text = " ".join(str(exc).split())[:300]
            err = StartupError([f"error[internal]: {type(exc).__name__}: {text}; this is a bug in the r9k plugin "
                                f"(set {envvars.DEBUG.name}=1 to see its traceback)"])
            _error = err
            if envvars.DEBUG.on():
                raise err from exc
            raise err from None
        _error = exc
        raise
    except BaseException as exc:
        _error = exc
        raise


def _register() -> None:
    global _active, _proc, _status_path
    from .startup import find_carrier

    carried, carried_from = find_carrier()
    activators = {envvars.MANIFEST.name, envvars.PROFILE.name, envvars.TP.name}
    if carried is None and not any(k.startswith(envvars.PREFIX) and (k in activators or not envvars.is_control(k))
                                   for k in os.environ):
        _watch_world_group(None)  # plain vLLM use: nothing imported; a rank only says it has no set
        return
    from . import dispatch, envdecl, install, startup

    proc = startup.process_info()
    active = startup.load_active(os.environ, carried, carried_from)
    if active is None:
        logger.debug("r9k: only R9K_* paths set; plugin inactive in %s", proc.label)
        _watch_world_group(None)
        return
    notes = startup.apply_profile_env(active)
    first_process = startup.check_agreement(active, proc)
    if first_process:  # the processes this one starts (helpers included) load its manifest, never resolve
        startup.hand_on(active)
    server = startup.server_id(active, proc, first=first_process)
    table = dispatch.DispatchTable(active.rs, strict=active.rs.strict)
    table.plan()
    envdecl.declare(active.rs)
    _active, _proc = active, proc
    dispatch.set_table(table)
    for plan in table.installs():
        install.install(plan, _install_failed)
    # The architectures this plugin brings (r9k.plugin.models) are registered whatever the variants say:
    # without them vLLM cannot build such a model on this backend at all (a lazy "module:Class" string).
    from . import models

    install.HOOKS.add(models.REGISTRY_MODULE, models.register_architectures)
    from . import applied  # strict: the launch's requests are compared with vLLM's final config before weights load

    install.HOOKS.add("vllm.config.vllm", applied.hook_final_config)
    _register_quantization(install)
    _install_vllm_choices()
    # A "MainProcess" that is not the first plugin process of the launch is a helper vLLM runs as a
    # plain subprocess (e.g. the model inspection of vllm.model_executor.models.registry): it checks
    # agreement like every process, but does not speak for the server in the status file.
    helper = proc.role == "main" and not first_process
    if proc.role == "main" and first_process:  # the API server: the counters on vLLM's /metrics
        from . import metrics

        metrics.install(install.HOOKS)
    _status_path = None if helper else startup.default_status_file(server=server)
    if first_process and _status_path:  # a new server: clean the files of dead servers, start its own
        from . import status

        status.clean_dead(Path(_status_path).parent, keep=_status_path)
        try:
            os.unlink(_status_path)
        except OSError:
            pass
    table.on_change = _write_status
    table.on_first_layer = _agree_ranks  # where vLLM's world group was made without init_world_group
    _watch_world_group(install.HOOKS)
    for line in active.warnings + notes + table.warnings:
        _emit(logging.WARNING, f"r9k {active.hash}: {line}")
    for line in startup_table(active, table, proc):
        _emit(logging.INFO, line)
    _write_status(table)
    if _status_path and table.installs():
        _start_flusher()


def _register_quantization(install) -> None:
    """The block-fp8 quantization method (r9k.plugin.quant), registered whatever the variants say, like the
    architectures: without it vLLM's CPU backend cannot load a block-fp8 checkpoint at all."""
    from . import quant

    install.HOOKS.add(quant.QUANT_MODULE, quant.register_config)


class _Flusher:
    """A daemon thread that writes this process's counters (its own small file beside the status file,
    ``status.write_counters``) when they changed, so the API server (``/r9k/status``) sees the workers'
    layer and call counters. Per look: one copy of the counters dict (a few ops) and a comparison; a
    write at most once per interval (measured: notes/plugin.md). Once the
    model's layers are recorded and stable, it logs the per-op layer table once ("model built")."""

    def __init__(self, interval: float = FLUSH_INTERVAL_S):
        import threading

        self.interval = interval
        self.last: Optional[dict] = None
        self.layers_logged = False
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="r9k-status-flush", daemon=True)

    def _run(self) -> None:
        from . import counters, dispatch

        while not self.stop.wait(self.interval):
            try:
                snap = counters.snapshot()
                self.look(snap, dispatch.get_table())
                _share_live(snap, dispatch.get_table())
            except Exception as exc:  # noqa: BLE001 - the status is informative; never kill the worker
                logger.debug("r9k: status flush failed: %s", exc)

    def look(self, snap: dict, table) -> None:
        if snap == self.last:
            if snap and not self.layers_logged and any(c["installed"] or c["kept"] for c in snap.values()):
                self.layers_logged = True  # stable for one interval: the model is built
                for line in layers_table(_active, snap, _proc):
                    _emit(logging.INFO, line)
            return
        self.last = snap
        _write_counters(snap)


def _write_counters(snap: dict) -> None:
    """This process's counters into its own small file beside the status file (no lock: one writer)."""
    from . import status

    if _proc is None or _status_path is None:
        return
    try:
        status.write_counters(_status_path, _proc.name, snap)
    except OSError as exc:
        logger.debug("r9k: cannot write the counters file: %s", exc)


def _start_flusher() -> None:
    global _flusher
    if _flusher is None:
        _flusher = _Flusher()
        _flusher.thread.start()


def layers_table(active, snap: dict, proc) -> list[str]:
    """Per op: layer instances running this project's kernel, layers that kept vLLM's path and why."""
    head = f"r9k {active.hash}: model built ({proc.label})"
    if proc.rank != 0:
        n = sum(len(c["installed"]) for c in snap.values())
        return [head + f"; rank {proc.rank}: {n} layer(s) run r9k kernels; table on rank 0"]
    lines = [head + ": per op, layers running r9k's kernel / keeping vLLM's path:"]
    for op, c in sorted(snap.items()):
        kept = "; ".join(f"{len(v)} {r}" for r, v in sorted(c["kept"].items())) or "none"
        first = ", ".join(c["installed"][:3]) + (", ..." if len(c["installed"]) > 3 else "")
        lines.append(f"r9k {active.hash}:   {op}: {len(c['installed'])} run r9k ({first or '-'}); kept vLLM's: {kept}")
    from . import selfcheck

    if selfcheck.SPENT:
        lines.append(f"r9k {active.hash}: {selfcheck.summary()}")
    from . import dispatch, status

    table = dispatch.get_table()
    for line in status.superseded(snap, table.by_op if table is not None else {}).values():
        lines.append(f"r9k {active.hash}:   {line}")
    return lines


def check_applied(vllm_config, server_args=None) -> Optional[dict]:
    """Compare the launch's launcher-knob requests with vLLM's final config (called by the status
    endpoint's ``init_state`` in the API server); log the result, record it in the status, and stop the
    start on a mismatch in strict mode."""
    global _applied
    if _active is None:
        return None
    from . import applied, dispatch
    from .startup import StartupError

    result = applied.compare(_active.rs, vllm_config, None, server_args)
    _applied = result
    level = logging.WARNING if result["mismatches"] else logging.INFO
    for line in applied.table_lines(result, f"r9k {_active.hash}:"):
        _emit(level, line)
    _write_status(dispatch.get_table())
    if result["mismatches"] and _active.rs.strict:
        raise StartupError([f"error[not-applied]: {m['knob']}: requested {m['requested']}, vLLM applied "
                            f"{m['applied']} ({m['where']}) (strict mode)" for m in result["mismatches"]],
                           "r9k: vLLM did not apply what the launch requested; refusing to serve")
    return result


def _install_vllm_choices() -> None:
    """vLLM's own kernel choices per layer, read once the model is built (:mod:`r9k.plugin.vllm_choices`)."""
    from . import vllm_choices

    vllm_choices.install_hooks()


def record_vllm_choices(res: dict) -> None:
    """Log vLLM's choices beside the profile's requested switches and write them into the status."""
    from . import dispatch, vllm_choices

    level = logging.WARNING if res["mismatches"] else logging.INFO
    for line in vllm_choices.table_lines(res, f"r9k {_active.hash if _active else '?'}:"):
        _emit(level, line)
    _write_status(dispatch.get_table())


def _install_failed(plan, reason: str) -> None:
    """An adapter that does not install: one line naming variant, extension point and reason; the variant
    keeps vLLM's path, or the start stops in strict mode (before the model is built: installs run at
    register() or when vLLM imports the layer's module, both before weights load)."""
    from . import dispatch
    from .startup import StartupError

    line = (f"{plan.knob}={plan.value} (variant {plan.variant_id}): the adapter for {plan.extension_point} "
            f"does not install: {reason}")
    table = dispatch.get_table()
    if table is not None and table.strict:
        raise StartupError([f"error[adapter-install]: {line} (strict mode)"],
                           "r9k: an adapter does not install; refusing to start vLLM")
    from ..registry.manifest import Impl

    plan.mode, plan.reason = Impl.FALLBACK, f"adapter does not install: {reason}"
    _emit(logging.WARNING, f"r9k {_active.hash if _active else '?'}: {line}; using vLLM's own path")
    _write_status(table)


def _watch_world_group(hooks) -> None:
    """Take part in the ranks' agreement once vLLM's world group exists (:mod:`r9k.plugin.agree`), active or
    not: vLLM's ``init_distributed_environment`` looks ``parallel_state.init_world_group`` up by name, and
    the wrapper calls :func:`_on_world` after it. Inactive (``hooks`` None), nothing is imported: the wrapper
    goes in only where vLLM's ``parallel_state`` is imported already (a worker: its executor module imports it)."""
    import sys

    mod = sys.modules.get("vllm.distributed.parallel_state")
    if mod is not None:
        _patch_world_group(mod)
    elif hooks is not None:
        hooks.add("vllm.distributed.parallel_state", _patch_world_group)


def _patch_world_group(mod) -> None:
    orig = getattr(mod, "init_world_group", None)
    if orig is None or getattr(orig, "_r9k_hooked", False):
        return

    def init_world_group(*args, **kwargs):
        world = orig(*args, **kwargs)
        _on_world(world)
        return world

    init_world_group._r9k_hooked = True  # type: ignore[attr-defined]
    init_world_group.__wrapped__ = orig  # type: ignore[attr-defined]
    mod.init_world_group = init_world_group


def _on_world(world) -> None:
    """vLLM's world group exists: an inactive rank says it has no set (never fails vLLM for it); an active
    rank agrees with the others (:func:`_agree_ranks`)."""
    if _active is None:
        try:
            from . import agree

            ws = agree.world_store(world)
            if ws is not None:
                agree.publish(ws[0], agree.AGREE_KEY.format(rank=ws[1]), agree.no_set_record(ws[1]))
        except Exception as exc:  # noqa: BLE001 - plain vLLM use: never stop it
            logger.debug("r9k: cannot say this rank has no set: %s", exc)
        return
    from . import dispatch

    _agree_ranks(dispatch.get_table(), world)


def _agree_ranks(table, world=None) -> None:
    """Once vLLM's world group exists (no layer built, no weight loaded): every rank publishes its set in the
    world's rendezvous store and reads every rank's (:func:`r9k.plugin.agree.agree`); a rank without a set,
    with another set, or silent past the bound stops the start, naming node and rank. Rank 0 records every
    rank for the status; every rank then shares its live figures (:func:`_share_live`)."""
    global _ranks, _live
    if _live is not None or _active is None:
        return  # agreed already (at the world group's creation; the first layer then finds nothing to do)
    from . import agree, startup

    ws = agree.world_store(world)
    if ws is None:
        return
    store, rank, world_size, nnodes = ws
    if table is not None:
        table.on_first_layer = None
    record = startup.rank_record(_active, _proc, rank, table)
    records = agree.agree(record, store, world_size, nnodes)
    _live = (agree.LivePublisher(store, rank, world_size), record)
    nodes = sorted({r["node"] for r in records})
    _emit(logging.INFO, f"r9k {_active.hash}: {len(records)} rank(s) on {len(nodes)} node(s) run this set "
                        f"({', '.join(nodes)})")
    if rank == 0:
        _ranks = records
        _write_status(table)
    if world_size > 1 and _status_path:
        _start_flusher()


def _share_live(snap: dict, table) -> None:
    """Each look of the flusher, once the ranks agreed: publish this rank's live figures; rank 0 (on the head)
    collects every rank's into the cluster file that ``/r9k/status`` merges."""
    if _live is None:
        return
    from . import agree, status

    pub, record = _live
    if pub.world_size < 2:
        return
    pub.publish(lambda: agree.live_record(record, snap, table), snap)
    if pub.rank == 0 and _status_path:
        got = pub.collect()
        if got is not None:
            status.write_cluster(_status_path, got)


def _emit(level: int, line: str) -> None:
    """Log through vLLM's logging; in the API server, vLLM configures logging only after its argument
    parser (which loads the plugins) has run, so until then the line goes straight to stderr."""
    if logging.getLogger("vllm").handlers or logging.getLogger().handlers:
        logger.log(level, "%s", line)
    else:
        import sys

        sys.stderr.write(f"{logging.getLevelName(level)} [r9k.plugin] {line}\n")


def _write_status(table) -> None:
    from . import status

    if _active is None or _status_path is None:
        return
    try:
        status.write_section(_status_path, status.snapshot(_active, table, _proc, _applied, _ranks))
    except OSError as exc:  # the status file is informative; never stop the server for it
        logger.warning("r9k: cannot write the status file %s: %s", _status_path, exc)


def startup_table(active, table, proc) -> list[str]:
    """The startup table: a header with profile and hash; rank 0 lists every non-stock variant."""
    rs = active.rs
    head = (f"r9k {rs.hash}: profile {rs.profile} (tp {rs.tp}, {active.origin}), {proc.label}, "
            f"server {active.server or '?'}"
            f"{' strict' if rs.strict else ''}")
    if proc.rank != 0:
        return [head + f"; rank {proc.rank}: table on rank 0"]
    rows = []
    # Every variant not at stock, and those this plugin could install here (so that a launch at stock
    # also says which implementation, e.g. of the router, it uses).
    shown = [r for r in rs.items.values()
             if not r.is_stock or table.plans.get(r.variant.id) and table.plans[r.variant.id].pluggable]
    from . import status
    from .startup import gate_labels

    gates = gate_labels(active)
    sup = status.superseded({}, table.by_op, {vid: p.mode for vid, p in table.plans.items()})
    for r in sorted(shown, key=lambda r: r.variant.knob):
        p = table.plans.get(r.variant.id)
        rows.append((r.variant.knob, "(unset)" if r.value is None else r.value, f"{r.layer}: {r.source}",
                     (sup.get(r.variant.id) or (p.describe() if p else "?"))
                     + (f"; gate {gates[r.variant.id]}" if r.variant.id in gates else "")))
    n = len(rs.non_stock())
    from ..registry.manifest import Impl

    modes = [p.mode for p in table.plans.values()]
    lines = [head + f"; {n} variant(s) not at stock: {modes.count(Impl.FUSED) - len(sup)} installed"
             f"{f', {len(sup)} superseded' if sup else ''}, {modes.count(Impl.FALLBACK)} "
             f"fall back to vLLM's path, {modes.count(Impl.ENV)} env-only (read by code outside this project)"]
    if rows:
        w = [max(len(x[i]) for x in rows + [("KNOB", "VALUE", "FROM", "")]) for i in range(3)]
        lines.append(f"r9k {rs.hash}:   {'KNOB':<{w[0]}}  {'VALUE':<{w[1]}}  {'FROM':<{w[2]}}  IMPLEMENTATION")
        for k, v, src, impl in rows:
            lines.append(f"r9k {rs.hash}:   {k:<{w[0]}}  {v:<{w[1]}}  {src:<{w[2]}}  {impl}")
    return lines


def active_set():
    """The resolved set of this process (None when inactive); for code that reads knob values."""
    return _active.rs if _active is not None else None


def current_status() -> dict:
    """The status the ``/r9k/status`` route answers (this process merged with the status file)."""
    from . import dispatch, status

    own = status.snapshot(_active, dispatch.get_table(), _proc, _applied, _ranks) if _active is not None else None
    return status.merged_status(own, _status_path or envvars.STATUS_FILE.get())


def _reset_for_tests() -> None:
    """Forget this process's registration (unit tests only)."""
    global _done, _error, _active, _proc, _status_path, _applied, _flusher, _ranks, _live
    from . import dispatch

    if _flusher is not None:
        _flusher.stop.set()
    _done, _error, _active, _proc, _status_path, _applied, _flusher = False, None, None, None, None, None, None
    _ranks = _live = None
    dispatch.set_table(None)
