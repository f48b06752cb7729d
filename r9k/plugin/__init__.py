"""The vLLM plugin of r9k-stack (entry point ``vllm.general_plugins: r9k = r9k.plugin:register``).

vLLM calls :func:`register` in every process it starts, possibly more than once. It loads and checks the
active set (:mod:`r9k.plugin.startup`; errors raise :class:`~r9k.plugin.startup.StartupError` before vLLM
loads weights), checks agreement with the server's first process (the ranks agree later:
:mod:`r9k.plugin.agree`), plans the dispatch table, declares the knobs to vLLM's environment registry, installs
the implementations through vLLM's extension points, logs the startup table and writes its status section
(:mod:`r9k.plugin.report`). It imports no torch-heavy module; with neither a carried set nor an ``R9K_*``
variable asking for one, a worker rank only says in the ranks' store that it has no set. Order: notes/plugin.md.
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
    # this plugin's architectures and block-fp8 method are registered whatever the variants say: without
    # them vLLM cannot build such a model, or load such a checkpoint, on this backend at all
    from . import models, quant

    install.HOOKS.add(models.REGISTRY_MODULE, models.register_architectures)
    # strict: the launch's requests are compared with vLLM's final config before weights load
    install.HOOKS.add("vllm.config.vllm", report.hook_final_config)
    install.HOOKS.add(quant.QUANT_MODULE, quant.register_config)
    report.install_choice_hooks()  # vLLM's own kernel choices per layer, read once the model is built
    # a "MainProcess" that is not the launch's first is a helper subprocess of vLLM (e.g. its model
    # inspection): it checks agreement but does not speak for the server in the status file
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
