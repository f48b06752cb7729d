"""Unsaved edits of a panel that could not ask before it ended (the terminal was closed: SIGHUP, or a
SIGTERM): written to ``tui-recovery.json`` in the cache directory (``envvars.cache_dir()``) and restored
as unsaved edits at the next start, so that no way out loses an edit. The file holds variant id ->
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


def write_recovery(s: Session) -> Optional[Path]:
    edits = {p: {vid: (None if v is REMOVED else str(v)) for vid, v in e.items()} for p, e in s.edits.items() if e}
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
