"""Unsaved edits of a panel that could not ask before it ended (the terminal was closed: SIGHUP, a SIGTERM,
or a ``kill -9`` that nothing can catch): ``tui-recovery.json`` in the cache directory
(``envvars.cache_dir()``) is a journal, rewritten atomically after every change of the edits (an edit, a
reset, undo, redo, a save; removed when none are left or the panel ends by asking), and restored as
unsaved edits at the next start, so that no way out loses an edit. The file holds variant id ->
canonical value (null: the profile's key removed), per profile; restored edits go through
``Session.set_value`` / ``reset`` (re-checked, undoable)."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

from .session import REMOVED, EditError, Session
from ...registry.envvars import cache_dir


def recovery_path() -> Path:
    return cache_dir() / "tui-recovery.json"


def _edits(s: Session) -> dict:
    return {p: {vid: (None if v is REMOVED else str(v)) for vid, v in e.items()} for p, e in s.edits.items() if e}


def journal(s: Session) -> None:
    """After every change (``Session.journal``): the edits on disk, or no file when there are none."""
    edits = _edits(s)
    state = (s.profile, repr(edits))
    if getattr(s, "_journaled", None) == state:
        return
    if edits:
        if write_recovery(s) is None:
            return  # not written (a read-only cache): try again at the next change
    else:
        clear_journal()
    s._journaled = state


def clear_journal() -> None:
    """The panel ended by asking (or the edits were saved): nothing to restore next time."""
    try:
        recovery_path().unlink()
    except OSError:
        pass


def write_recovery(s: Session) -> Optional[Path]:
    edits = _edits(s)
    if not edits:
        return None
    path = recovery_path()
    try:
        from ...registry.profile_io import atomic_write

        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps({"written": time.time(), "profile": s.profile, "edits": edits}, indent=1))
    except OSError:
        return None
    return path


def restore_recovery(s: Session) -> int:
    """Apply the recovery file's edits (then delete it); returns how many were restored."""
    path = recovery_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    n = 0
    start = s.profile
    for profile, edits in (data.get("edits") or {}).items():
        if profile not in s.reg.profiles or not isinstance(edits, dict):
            continue
        s.set_profile(profile)
        for vid, value in edits.items():
            if vid not in s.reg.variants:
                continue
            try:
                if value is None:
                    s.reset(vid)
                else:
                    s.set_value(vid, value)
                n += 1
            except EditError:
                continue
    if data.get("profile") in s.reg.profiles:
        start = data["profile"]
    if s.profile != start:
        s.set_profile(start)
    try:
        path.unlink()
    except OSError:
        pass
    return n
