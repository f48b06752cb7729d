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
6. logs one startup table (rank 0 in full, other ranks one line) and writes its status section
   (:mod:`r9k.plugin.report` holds this process's report).

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

_done = False
_error: Optional[BaseException] = None


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
    from .agree import watch_world_group
    from .startup import find_carrier

    carried, carried_from = find_carrier()
    activators = {envvars.MANIFEST.name, envvars.PROFILE.name, envvars.TP.name}
    if carried is None and not any(k.startswith(envvars.PREFIX) and (k in activators or not envvars.is_control(k))
                                   for k in os.environ):
        watch_world_group(None)  # plain vLLM use: nothing imported; a rank only says it has no set
        return
    from . import dispatch, envdecl, install, report, startup

    proc = startup.process_info()
    active = startup.load_active(os.environ, carried, carried_from)
    if active is None:
        logger.debug("r9k: only R9K_* paths set; plugin inactive in %s", proc.label)
        watch_world_group(None)
        return
    notes = startup.apply_profile_env(active)
    first_process = startup.check_agreement(active, proc)
    if first_process:  # the processes this one starts (helpers included) load its manifest, never resolve
        startup.hand_on(active)
    server = startup.server_id(active, proc, first=first_process)
    table = dispatch.DispatchTable(active.rs, strict=active.rs.strict)
    table.plan()
    envdecl.declare(active.rs)
    report._active, report._proc = active, proc
    dispatch.set_table(table)
    for plan in table.installs():
        install.install(plan, install.install_failed)
    # The architectures this plugin brings (r9k.plugin.models) and its block-fp8 quantization method
    # (r9k.plugin.quant) are registered whatever the variants say: without them vLLM cannot build such a model,
    # or load a block-fp8 checkpoint, on this backend at all (post-import hooks).
    from . import models, quant

    install.HOOKS.add(models.REGISTRY_MODULE, models.register_architectures)
    # strict: the launch's requests are compared with vLLM's final config before weights load
    install.HOOKS.add("vllm.config.vllm", report.hook_final_config)
    install.HOOKS.add(quant.QUANT_MODULE, quant.register_config)
    report.install_choice_hooks()  # vLLM's own kernel choices per layer, read once the model is built
    # A "MainProcess" that is not the first plugin process of the launch is a helper vLLM runs as a
    # plain subprocess (e.g. the model inspection of vllm.model_executor.models.registry): it checks
    # agreement like every process, but does not speak for the server in the status file.
    helper = proc.role == "main" and not first_process
    if proc.role == "main" and first_process:  # the API server: the counters on vLLM's /metrics
        from . import metrics

        metrics.install(install.HOOKS)
    report._status_path = None if helper else startup.default_status_file(server=server)
    if first_process and report._status_path:  # a new server: clean the files of dead servers, start its own
        report.clean_dead(Path(report._status_path).parent, keep=report._status_path)
        try:
            os.unlink(report._status_path)
        except OSError:
            pass
    table.on_change = report.write_status
    from .agree import agree_ranks

    table.on_first_layer = agree_ranks  # where vLLM's world group was made without init_world_group
    watch_world_group(install.HOOKS)
    for line in active.warnings + notes + table.warnings:
        report.emit(logging.WARNING, f"r9k {active.hash}: {line}")
    for line in report.startup_table(active, table, proc):
        report.emit(logging.INFO, line)
    report.write_status(table)
    if report._status_path and table.installs():
        report.start_flusher()
