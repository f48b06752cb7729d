"""The ranks of one server, across nodes: their agreement on one set, and their live figures for the head's status.

The channel is the rendezvous store of vLLM's world group (the ``TCPStore`` rank 0 hosts): no shared file
system, no extra port, never blocking a collective; a rank that never writes is seen as missing (why this
channel: notes/multinode.md).

* Agreement (:func:`agree`): once vLLM made its world group (:func:`patch_world_group`), every rank sets
  ``r9k/agree/<rank>`` to its record (an inactive one: :func:`no_set_record`) and reads every rank's, bounded by
  :data:`AGREE_TIMEOUT_S`; a rank without a set, with another set, or silent stops the start on every active rank.
* Live figures (:class:`LivePublisher`): every rank sets ``r9k/live/<rank>`` when its counters change and at
  least every :data:`HEARTBEAT_S`; rank 0 collects them, stamped with the head's clock, into the cluster file.

Imports neither torch nor vLLM at module level.
"""
from __future__ import annotations

import json
import logging
import socket
import time
from typing import Any, Callable, Optional

from ..registry import envvars
from .startup import StartupError, compare_ranks, plan_view

logger = logging.getLogger("vllm.r9k")

AGREE_KEY = "r9k/agree/{rank}"
LIVE_KEY = "r9k/live/{rank}"
READ_KEY = "r9k/read/{rank}"  # a refusing rank has read every record (rank 0, the store's host, waits for them)
READ_WAIT_S = 30.0
#: How long an active rank waits for every rank's record (the ranks reach it together; only a rank without
#: this plugin makes it wait this long).
AGREE_TIMEOUT_S = 300.0
POLL_S = 0.2
#: A rank publishes its live figures when they change, and at least this often (the head then knows it runs).
HEARTBEAT_S = 5.0
#: Figures older than this (head's clock) are reported stale: a live rank refreshes them every HEARTBEAT_S.
STALE_AFTER_S = 3 * HEARTBEAT_S


def world_store(world=None) -> Optional[tuple[Any, int, int, Optional[int]]]:
    """``(store, rank, world_size, nnodes)`` of vLLM's world group (``world``, else the one of this process),
    or None before it exists."""
    try:
        import torch.distributed as dist
        from vllm.distributed import parallel_state
    except ImportError:
        return None
    world = world if world is not None else parallel_state._WORLD
    if world is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.distributed_c10d._get_default_store(), world.rank, world.world_size, _nnodes()


def _nnodes() -> Optional[int]:
    try:
        from vllm.config import get_current_vllm_config_or_none

        cfg = get_current_vllm_config_or_none()
    except Exception:  # noqa: BLE001 - only used to name a missing rank's node
        return None
    pc = getattr(cfg, "parallel_config", None)
    if pc is None or getattr(pc, "data_parallel_size", 1) != 1:
        return None  # with data parallelism the rank layout is not one block per node
    return getattr(pc, "nnodes", None)


def no_set_record(rank: int) -> dict:
    """What a rank whose plugin is inactive tells the others."""
    import multiprocessing
    import os

    return {"node": socket.gethostname(), "rank": rank, "pid": os.getpid(),
            "process": multiprocessing.current_process().name, "hash": None}


def publish(store, key: str, record: dict) -> None:
    store.set(key, json.dumps(record, separators=(",", ":"), sort_keys=True))


def read(store, key: str) -> Optional[dict]:
    """The record under ``key``, or None when no rank set it (never blocks: ``check`` first)."""
    if not store.check([key]):
        return None
    raw = store.get(key)
    return json.loads(raw.decode() if isinstance(raw, (bytes, bytearray)) else raw)


def gather(store, world_size: int, timeout: float, poll: float = POLL_S,
           clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
           ) -> tuple[list[dict], list[int]]:
    """Every rank's agreement record, waiting at most ``timeout`` s (or until a rank reports "no set");
    returns ``(records, missing ranks)``."""
    deadline = clock() + timeout
    got: dict[int, dict] = {}
    while True:
        for r in range(world_size):
            if r not in got:
                rec = read(store, AGREE_KEY.format(rank=r))
                if rec is not None:
                    got[r] = rec
        missing = [r for r in range(world_size) if r not in got]
        if not missing or any(rec.get("hash") is None for rec in got.values()) or clock() >= deadline:
            return [got[r] for r in sorted(got)], missing
        sleep(poll)


def refusals(records: list[dict], missing: list[int], world_size: int, nnodes: Optional[int],
             timeout: float) -> list[str]:
    """One line per rank that stops the start: no set, not reported in time, another set than rank 0's."""
    active = [r for r in records if r.get("hash") is not None]
    ref = min(active, key=lambda r: r["rank"]) if active else None
    runs = f"; node {ref['node']} rank {ref['rank']} runs set {ref['hash']}" if ref else ""
    out = []
    for r in records:
        if r.get("hash") is None:
            out.append(f"error[rank-no-set]: node {r['node']} rank {r['rank']} (pid {r['pid']}) has no r9k set: the "
                       f"plugin is inactive there (started without the launch's --additional-config and without "
                       f"{envvars.PROFILE.name}){runs}; start every node with the command `r9kctl launch --nnodes` "
                       f"prints for it")
    if not out:
        for rank in missing:
            # the --node-rank of the node vLLM places the rank on (one block of world/nnodes ranks per node)
            nr = rank // (world_size // nnodes) if nnodes and nnodes > 1 and not world_size % nnodes else None
            where = f" (the node started with --node-rank {nr})" if nr is not None else ""
            out.append(f"error[rank-missing]: rank {rank}{where} reported no r9k set within {timeout:g} s{runs}: "
                       f"is r9k installed there, and was the node started with the command `r9kctl launch "
                       f"--nnodes` prints for it?")
    return out + compare_ranks(active)


def agree(record: dict, store, world_size: int, nnodes: Optional[int] = None,
          timeout: float = AGREE_TIMEOUT_S) -> list[dict]:
    """Publish this rank's record, read every rank's; :class:`StartupError` on :func:`refusals`."""
    publish(store, AGREE_KEY.format(rank=record["rank"]), record)
    records, missing = gather(store, world_size, timeout)
    errors = refusals(records, missing, world_size, nnodes, timeout)
    if errors:
        store.set(READ_KEY.format(rank=record["rank"]), "1")
        if record["rank"] == 0:  # rank 0 hosts the store: let every active rank read the records before it goes
            wait_read(store, [r["rank"] for r in records if r.get("hash") is not None and r["rank"] != 0])
        raise StartupError(errors, "r9k: the ranks of this server do not run one set; refusing to load weights")
    return records


def wait_read(store, ranks: list[int], timeout: float = READ_WAIT_S, poll: float = POLL_S,
              clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> list[int]:
    """Wait (bounded) until ``ranks`` said they read the records; returns those that did not."""
    deadline = clock() + timeout
    while True:
        left = [r for r in ranks if not store.check([READ_KEY.format(rank=r)])]
        if not left or clock() >= deadline:
            return left
        sleep(poll)


# ------------------------------------------------------------------------------------------- live figures


def live_record(agreed: dict, counters: dict, table) -> dict:
    """One rank's live figures: who it is (from its agreement record), its table and its counters now."""
    return {"node": agreed["node"], "rank": agreed["rank"], "pid": agreed["pid"], "process": agreed.get("process"),
            "hash": agreed["hash"], **plan_view(table), "counters": counters, "time": time.time()}


class LivePublisher:
    """A rank's side of the live figures (driven by the status flusher, once per look)."""

    def __init__(self, store, rank: int, world_size: int, heartbeat: float = HEARTBEAT_S,
                 clock: Callable[[], float] = time.monotonic):
        self.store, self.rank, self.world_size, self.heartbeat, self.clock = store, rank, world_size, heartbeat, clock
        self.last_counters: Optional[dict] = None
        self.last_sent = float("-inf")
        self.seen: dict[int, tuple[float, float]] = {}  # rank 0: rank -> (its time, head's time first seen)

    def publish(self, make_record: Callable[[], dict], counters: dict) -> bool:
        """Set this rank's key when its counters changed or the heartbeat is due; returns whether it did."""
        if counters == self.last_counters and self.clock() - self.last_sent < self.heartbeat:
            return False
        publish(self.store, LIVE_KEY.format(rank=self.rank), make_record())
        self.last_counters, self.last_sent = counters, self.clock()
        return True

    def collect(self, now: Optional[float] = None) -> Optional[dict]:
        """Rank 0: every rank's live record, stamped ``received`` (the head's clock when first seen); None when
        nothing changed since the last call."""
        now = time.time() if now is None else now
        ranks, changed = {}, False
        for r in range(self.world_size):
            rec = read(self.store, LIVE_KEY.format(rank=r))
            if rec is None:
                continue
            prev = self.seen.get(r)
            if prev is None or prev[0] != rec.get("time"):
                self.seen[r] = prev = (rec.get("time"), now)
                changed = True
            ranks[str(r)] = dict(rec, received=prev[1])
        if not changed:
            return None
        return {"world_size": self.world_size, "collected": now, "ranks": ranks}


# ------------------------------------------------------------------------------ the plugin's hook on vLLM

def watch_world_group(hooks) -> None:
    """Take part in the ranks' agreement once vLLM's world group exists (:func:`patch_world_group`). Inactive
    (``hooks`` None), nothing is imported: the wrapper goes in only where ``parallel_state`` is imported already."""
    import sys

    mod = sys.modules.get("vllm.distributed.parallel_state")
    if mod is not None:
        patch_world_group(mod)
    elif hooks is not None:
        hooks.add("vllm.distributed.parallel_state", patch_world_group)


def patch_world_group(mod) -> None:
    orig = getattr(mod, "init_world_group", None)
    if orig is None or getattr(orig, "_r9k_hooked", False):
        return

    def init_world_group(*args, **kwargs):
        world = orig(*args, **kwargs)
        on_world(world)
        return world

    init_world_group._r9k_hooked = True  # type: ignore[attr-defined]
    init_world_group.__wrapped__ = orig  # type: ignore[attr-defined]
    mod.init_world_group = init_world_group


def on_world(world) -> None:
    """vLLM's world group exists: an inactive rank says it has no set; an active one :func:`agree_ranks`."""
    from . import dispatch, report

    if report._active is None:
        try:
            ws = world_store(world)
            if ws is not None:
                publish(ws[0], AGREE_KEY.format(rank=ws[1]), no_set_record(ws[1]))
        except Exception as exc:  # noqa: BLE001 - plain vLLM use: never stop it
            logger.debug("r9k: cannot say this rank has no set: %s", exc)
        return
    agree_ranks(dispatch.get_table(), world)


def agree_ranks(table, world=None) -> None:
    """Before any weight loads: :func:`agree`; rank 0 records every rank for the status, and every rank then
    shares its live figures (:func:`r9k.plugin.report.share_live`)."""
    from . import report, startup

    if report._live is not None or report._active is None:
        return  # agreed already (at the world group's creation; the first layer then finds nothing to do)
    ws = world_store(world)
    if ws is None:
        return
    store, rank, world_size, nnodes = ws
    if table is not None:
        table.on_first_layer = None
    record = startup.rank_record(report._active, report._proc, rank, table)
    records = agree(record, store, world_size, nnodes)
    report._live = (LivePublisher(store, rank, world_size), record)
    nodes = sorted({r["node"] for r in records})
    report.emit(logging.INFO, f"r9k {report._active.hash}: {len(records)} rank(s) on {len(nodes)} node(s) run this "
                              f"set ({', '.join(nodes)})")
    if rank == 0:
        report._ranks = records
        report.write_status(table)
    if world_size > 1 and report._status_path:
        report.start_flusher()
