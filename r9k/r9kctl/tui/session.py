"""The control panel's editing state, without any widget: the profile and TP size shown, the unsaved edits
(applied to a copy of the profile in a shallow copy of the registry) and the resolved set, report and budget.

The recovery journal, ``tui-recovery.json`` in the cache directory, holds the unsaved edits (profile -> variant
id -> canonical value, null: the key removed) after every change, for a panel that ends without asking (SIGHUP,
SIGTERM, ``kill -9``); the next start restores them through ``set_value`` / ``reset`` (notes/tui.md).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import time
from pathlib import Path
from typing import Mapping, Optional

from ...registry.envvars import cache_dir
from ...registry.errors import Diagnostic
from ...registry.loader import Registry, default_profile_dirs, load_registry
from ...registry.memory import VariantCost, budget, cost_if_toggled
from ...registry.origin import Origin
from ...registry.resolve import ResolvedSet, resolve
from ...registry.validate import Report, check_profile, check_registry, gate_states
from ...registry.profile_io import find_profile_file, ProfileDocument, save_as
from ...registry.ledger import platform_matches

REMOVED = object()  # an edit that deletes the profile's own key (the inherited value applies again)
UNSAVED = "unsaved edit"
UNDO_DEPTH = 200


class EditError(ValueError):
    """A value the variant does not accept; the message says why and what is allowed."""


@dataclasses.dataclass
class Snapshot:
    """The unsaved edits of every profile before a change, and the profile it was made in."""

    label: str
    profile: str
    edits: dict[str, dict[str, object]]


def toml_value(v, value: str) -> object:
    """A canonical value as the TOML value it is declared as: bool and int as an int, float as a float;
    anything else (and special words, '') as a string."""
    if value == "" or value in v.special:
        return value
    with contextlib.suppress(ValueError):
        if v.type in ("bool", "int"):
            return int(value)
        if v.type == "float":
            return float(value)
    return value


def match_rank(label: str, words: list[str]) -> int:
    """How well a name matches what was typed (the pickers' order, the closest profile): 0 exact (or no
    words), 1 a prefix, 2 a prefix of one of its words (split at ``-_.`` and space), 3 anywhere."""
    if not words:
        return 0
    q = " ".join(words)
    low = label.lower()
    if low == q:
        return 0
    if low.startswith(words[0]):
        return 1
    return 2 if any(p.startswith(words[0]) for p in re.split(r"[-_. ]+", low)) else 3


def save_as_description(base: str, knobs: dict) -> str:
    """What a new profile made by save-as is: its base and the knobs it sets, as written."""
    if not knobs:
        return f"{base}, unchanged"
    sets = ", ".join(f"{k} = {val!r}" if isinstance(val, str) else f"{k} = {val}" for k, val in sorted(knobs.items()))
    return f"{base} with {sets}"


class Session:
    """The state behind the main screen. ``env`` is the environment resolved against (default: the process's)."""

    def __init__(self, reg: Registry, profile: Optional[str] = None, tp: Optional[int] = None,
                 env: Optional[Mapping[str, str]] = None, profile_dirs: Optional[list[Path]] = None,
                 sets: Optional[Mapping[str, object]] = None, root: Optional[Path] = None,
                 defer_validation: bool = False):
        self.reg = reg
        self.root = root  # the registry tree (None: the loader's default)
        self.env = dict(os.environ) if env is None else dict(env)
        self.sets = dict(sets or {})  # --set KNOB=VALUE: the override layer, above every edit
        self.profile_dirs = profile_dirs
        self.registry_report, self.gates = Report(), None
        # deferred: the first frame shows the values and the budget; the checks follow (finish_validation)
        self.validated = not defer_validation
        if self.validated:
            self._check_registry()
        self.edits: dict[str, dict[str, object]] = {}  # profile -> variant id -> value | REMOVED
        # undo / redo: what the edits were before each change; a save starts afresh
        self.undo_stack: list[Snapshot] = []
        self.redo_stack: list[Snapshot] = []
        self.extra_args: list[str] = []  # extra vllm serve arguments for a launch (the launch screen's field)
        self.journal = None  # called with this session after every change of the edits (journal, below)
        self._capture_files()
        self.profile = profile if profile in reg.profiles else (self.closest_profile(profile) or self.default_profile())
        self.tp_choice = tp  # None: the profile's own TP size
        self.kv_history: list[int] = []
        self._noenv: Optional[ResolvedSet] = None
        self._switched()

    @classmethod
    def open(cls, profile: Optional[str] = None, tp: Optional[int] = None,
             env: Optional[Mapping[str, str]] = None, sets: Optional[Mapping[str, object]] = None,
             root: Optional[Path] = None, profile_dirs: Optional[list[Path]] = None,
             defer_validation: bool = False) -> "Session":
        """Load the registry and profiles (a broken profile raises RegistryError: the panel edits them all)."""
        return cls(load_registry(root, profile_dirs, broken_profiles="raise"), profile, tp, env,
                   profile_dirs=profile_dirs, sets=sets, root=root, defer_validation=defer_validation)

    def closest_profile(self, query: Optional[str]) -> Optional[str]:
        """The profile a shortened name most likely means (``tp2`` -> tp2-default): the best prefix or word-prefix
        match (:func:`match_rank`); None if nothing starts so."""
        if not query:
            return None
        words = query.lower().split()
        ranked = sorted((match_rank(n, words), n) for n in self.reg.profiles if query.lower() in n.lower())
        return ranked[0][1] if ranked and ranked[0][0] <= 2 else None

    def default_profile(self) -> str:
        return next((n for n in ("tp4-default", "tp2-default") if n in self.reg.profiles), min(self.reg.profiles))

    def _capture_files(self) -> None:
        """The bytes of every profile file as of this load, which a save compares against (the loader keeps no
        text when its parse cache answers)."""
        self._files: dict[str, tuple[Path, bytes, Optional[int]]] = {}
        for name in self.reg.profiles:
            path = self.profile_path(name)
            if path is None:
                continue
            with contextlib.suppress(OSError):
                self._files[name] = (path, path.read_bytes(), path.stat().st_mtime_ns)

    def reload(self, keep_others: bool = False) -> None:
        """Reload everything from disk (raises RegistryError), dropping the edits (undoable); ``keep_others`` (after
        $EDITOR) keeps the other profiles' edits."""
        before = self.snapshot("edit in $EDITOR" if keep_others else "reload")
        kept = self.other_edits() if keep_others else {}
        self._reload_keep(kept)
        if before.edits != kept:
            self._push_undo(before)

    def snapshot(self, label: str) -> "Snapshot":
        return Snapshot(label, self.profile, {p: dict(e) for p, e in self.edits.items() if e})

    def _push_undo(self, snap: "Snapshot") -> None:
        self.undo_stack.append(snap)
        del self.undo_stack[:-UNDO_DEPTH]
        self.redo_stack.clear()

    @contextlib.contextmanager
    def _undoable(self, label: str):
        """Around an edit: the state before it goes on the undo stack when the edit changed anything."""
        before = self.snapshot(label)
        yield
        if self.snapshot(label).edits != before.edits:
            self._push_undo(before)

    def _restore(self, snap: "Snapshot") -> None:
        self.edits = {p: {vid: v for vid, v in e.items() if vid in self.reg.variants}
                      for p, e in snap.edits.items() if p in self.reg.profiles}
        if snap.profile in self.reg.profiles:
            self.profile = snap.profile
        self._switched()

    def undo(self) -> Optional[str]:
        """Go back one change (an edit, a reset, a reload); returns what was undone, None if nothing."""
        return self._step(self.undo_stack, self.redo_stack)

    def redo(self) -> Optional[str]:
        """Do again the change last undone; returns what was redone, None if nothing."""
        return self._step(self.redo_stack, self.undo_stack)

    def _step(self, take: list, keep: list) -> Optional[str]:
        """Restore the last snapshot of ``take``; the state it replaces goes on ``keep``."""
        if not take:
            return None
        snap = take.pop()
        keep.append(self.snapshot(snap.label))
        self._restore(snap)
        return snap.label

    def _switched(self) -> None:
        """After the profile or TP size changed: the current numbers, and the saved state's budget."""
        self._noenv = None
        self.kv_history = []
        self.recompute()
        if self.has_edits():
            saved = resolve(self.reg, self.profile, tp=self.tp_choice, env=self.env, sets=self.sets)
            self.saved_budget = budget(self.reg, saved)
        else:
            self.saved_budget = self.budget

    @property
    def _saved_noenv(self) -> ResolvedSet:
        """The saved profile resolved without the environment."""
        if self._noenv is None:
            self._noenv = resolve(self.reg, self.profile, tp=self.tp_choice, env={})
        return self._noenv

    def set_profile(self, name: str) -> None:
        if name not in self.reg.profiles:
            raise KeyError(name)
        self.profile = name
        self._switched()

    def set_tp(self, tp: Optional[int]) -> None:
        self.tp_choice = tp
        self._switched()

    @property
    def tp(self) -> int:
        return self.rs.tp

    @property
    def profile_tp(self) -> int:
        """The profile's own TP size (what the TP picker's first choice means)."""
        return self.rs.tp if self.tp_choice is None else self._saved_noenv.tp

    def tp_options(self) -> list[int]:
        """TP sizes the profile's model is described at (its own first)."""
        model = self.rs.model
        sizes: set[int] = set()
        if model and model in self.reg.models:
            sizes = {int(k[2:]) for k in self.reg.models[model].kv_bytes_per_token}
        sizes.add(self.profile_tp)
        return sorted(sizes)

    @property
    def current_edits(self) -> dict[str, object]:
        return self.edits.setdefault(self.profile, {})

    def has_edits(self) -> bool:
        return bool(self.edits.get(self.profile))

    def saved_knobs(self) -> dict:
        return dict(self.reg.profiles[self.profile].knobs)

    def key_for(self, vid: str) -> str:
        """The key the profile file uses for a variant (knob, id or alias), else the knob."""
        for key in self.saved_knobs():
            v = self.reg.find_variant(key)
            if v is not None and v.id == vid:
                return key
        return self.reg.variants[vid].knob

    def edited_knobs(self) -> dict:
        knobs = self.saved_knobs()
        for vid, val in self.edits.get(self.profile, {}).items():
            if val is REMOVED:
                knobs.pop(self.key_for(vid), None)
            else:
                knobs[self.key_for(vid)] = val
        return knobs

    def edited_registry(self, alias: Optional[str] = None) -> Registry:
        """The registry with the current profile's edits applied to a copy of it; with ``alias``, the edited copy
        is added under that name beside the saved one (for diffs)."""
        if not self.edits.get(self.profile) and alias is None:
            return self.reg
        name = alias or self.profile
        edited = self.reg.profiles[self.profile].model_copy(update={"knobs": self.edited_knobs(), "name": name})
        return dataclasses.replace(self.reg, profiles={**self.reg.profiles, name: edited})

    def inherited_value(self, vid: str) -> Optional[str]:
        """The value the profile chain gives a variant without this profile's own key (no env)."""
        r = self._saved_noenv.items[vid]
        # with a key of this profile's, it was applied last (no environment here): the entry before it
        return r.history[-1][1] if r.history and self.key_for(vid) in self.saved_knobs() else r.value

    def set_value(self, vid: str, raw: object) -> str:
        """Set a variant to ``raw`` (unsaved); returns the canonical value, raises :class:`EditError`. Back to the
        saved value (or the inherited one when the file has no key for it) drops the edit."""
        v = self.reg.variants[vid]
        try:
            value = v.normalize(raw)
        except ValueError as exc:
            raise EditError(f"{v.knob}={raw!r}: {exc} (allowed: {v.allowed_text()})") from None
        key = self.key_for(vid)
        saved = self.saved_knobs()
        if key in saved:
            try:
                same = v.normalize(saved[key]) == value
            except ValueError:
                same = False
        else:
            same = value == self.inherited_value(vid)
        with self._undoable(f"{v.knob} = {raw}"):
            if same:
                self.current_edits.pop(vid, None)
            else:
                self.current_edits[vid] = value
            self.recompute()
        return value

    def reset(self, vid: str) -> None:
        """Remove the profile's own key for a variant (the inherited value applies)."""
        with self._undoable(f"reset {self.reg.variants[vid].knob}"):
            if self.key_for(vid) in self.saved_knobs():
                self.current_edits[vid] = REMOVED
            else:
                self.current_edits.pop(vid, None)
            self.recompute()

    def drop_edits(self, label: str) -> None:
        """Drop the current profile's unsaved edits (undoable)."""
        with self._undoable(label):
            self.edits.pop(self.profile, None)
            self.recompute()

    def next_value(self, vid: str) -> Optional[str]:
        """What space/enter cycles a bool or enum to; None for other types (they open an input)."""
        v = self.reg.variants[vid]
        cur = self.rs.items[vid].value
        if v.type == "bool":
            return "0" if cur == "1" else "1"
        if v.type == "enum":
            order = list(v.choices) + ([""] if v.allow_unset else [])
            return order[(order.index(cur) + 1) % len(order)] if cur in order else order[0]
        return None

    def cycle(self, vid: str) -> Optional[str]:
        nxt = self.next_value(vid)
        return None if nxt is None else self.set_value(vid, nxt)

    def env_overrides(self, vid: str) -> Optional[str]:
        """What hides the profile's value of a variant (an environment variable or --set), if anything."""
        r = self.rs.items[vid]
        if r.layer == "environment":
            return r.origin.key
        if r.layer == "override":
            return r.source
        return None

    def finish_validation(self) -> None:
        """The checks a deferred start left out; afterwards every change is re-validated."""
        if self.validated:
            return
        self.validated = True
        self._check_registry()
        self._switched()

    def _check_registry(self) -> None:
        self.registry_report = Report()
        check_registry(self.reg, self.registry_report)
        try:
            self.gates = gate_states(self.reg)  # memoized on the registry: a toggle does not re-hash sources
        except Exception:  # noqa: BLE001 - check_profile reports the unreadable ledger itself ('-' shown)
            self.gates = None

    def recompute(self) -> None:
        """Re-resolve and re-validate."""
        if not self.validated and (self.has_edits() or hasattr(self, "rs")):
            self.finish_validation()  # an edit before the deferred checks: check it all now
            return
        reg = self.edited_registry()
        rs = resolve(reg, self.profile, tp=self.tp_choice, env=self.env, sets=self.sets)
        edits = self.edits.get(self.profile, {})
        if edits:
            file = self.shown_path
            for vid in edits:
                r = rs.items[vid]
                if r.layer == "profile":
                    # the key is not in the file yet (or not with this value): no line to point at
                    r.origin = Origin("profile", file, detail=UNSAVED)
        report = Report(list(self.registry_report.diagnostics))
        if self.validated:
            self.budget = check_profile(reg, rs, report)
        else:
            self.budget = budget(reg, rs, [])  # the first frame's numbers; the checks follow
        self.rs, self.report = rs, report
        if self.budget is not None:
            kv = self.budget.kv_tokens
            if not self.kv_history or self.kv_history[-1] != kv:
                self.kv_history.append(kv)
        if self.journal is not None:
            self.journal(self)

    @property
    def kv_delta(self) -> Optional[int]:
        if self.budget is None or getattr(self, "saved_budget", None) is None:
            return None
        return self.budget.kv_tokens - self.saved_budget.kv_tokens

    def problems_by_item(self) -> dict[str, str]:
        """variant id -> worst level among the diagnostics that name it."""
        out: dict[str, str] = {}
        for d in self.report.diagnostics:
            for item in d.items:
                if item in self.reg.variants and out.get(item) != "error":
                    out[item] = d.level
        return out

    def cost(self, vid: str) -> Optional[VariantCost]:
        return cost_if_toggled(self.reg, self.rs, vid)

    def gate_state(self, vid: str) -> str:
        if not self.validated:
            return "…"
        if self.gates is None:
            return "-"
        st = self.gates.get(vid)
        if st is None:
            return "-" if not (self.reg.variants[vid].gate and self.reg.variants[vid].gate.tests) else "?"
        # on the profile's platform; "fresh*": only imported evidence, "none": records only elsewhere
        plat = self.rs.platform
        state, _ = st.on(plat)
        if state == "missing" and plat and st.per_platform and \
                not any(platform_matches(p, plat) for p in st.per_platform):
            return "none"
        ev = [e for p, e in st.evidence.items() if plat is None or platform_matches(p, plat)]
        return state + ("*" if state == "fresh" and ev and "ran here" not in ev else "")

    def diagnostics(self) -> list[Diagnostic]:
        order = {"error": 0, "warning": 1, "info": 2}
        return sorted(self.report.diagnostics, key=lambda d: order.get(d.level, 3))

    def profile_dirs_now(self) -> list[Path]:
        return self.profile_dirs if self.profile_dirs is not None else default_profile_dirs()

    @property
    def shown_path(self) -> str:
        """The profile's file as provenance names it."""
        return self.reg.origins.get(("profile", self.profile), (self.profile, 0))[0]

    def profile_path(self, name: Optional[str] = None) -> Optional[Path]:
        return find_profile_file(name or self.profile, self.profile_dirs_now())

    def document(self) -> ProfileDocument:
        """The profile's file for round-trip editing, as it was when the registry was loaded."""
        if self.profile in self._files:
            return ProfileDocument.from_bytes(*self._files[self.profile])
        path = self.profile_path()
        if path is None:
            raise FileNotFoundError(f"no file for profile '{self.profile}'")
        return ProfileDocument.load(path)

    def save(self) -> Path:
        """Write the current profile's edits into its file (comments and layout kept), atomically, then reload.
        Raises ProfileConflict when the file changed on disk since it was loaded."""
        doc = self.document()
        in_file = doc.knobs()
        for vid, val in self.current_edits.items():
            key = self.key_for(vid)
            if val is REMOVED:
                doc.remove_knob(key)
            else:
                v = self.reg.variants[vid]
                typed = toml_value(v, str(val))
                if v.type == "bool" and isinstance(in_file.get(key), bool) and isinstance(typed, int):
                    typed = bool(typed)  # the file spells this one true/false: keep its spelling
                doc.set_knob(key, typed)
        doc.save()  # a failed save leaves the edits in the session; the next one starts from the loaded bytes
        self._reload_after_save(self.profile)
        return doc.path

    def save_as_target(self) -> Path:
        """Where save-as writes: the last extra profile folder (--profiles-dir), else the current profile's."""
        dirs = self.profile_dirs_now()
        if len(dirs) > 1:
            return Path(dirs[-1])
        path = self.profile_path()
        return path.parent if path else Path(dirs[0])

    def save_as(self, name: str) -> Path:
        """A new profile that extends the current (saved) one with the current edits' values."""
        if name in self.reg.profiles:
            raise FileExistsError(f"a profile named '{name}' exists")
        noenv = resolve(self.edited_registry(), self.profile, tp=self.tp_choice, env={})
        knobs: dict[str, object] = {}
        for vid in self.current_edits:
            # a reset too: the saved base still has the key, so the new profile writes the inherited value
            v = self.reg.variants[vid]
            val = noenv.items[vid].value
            if val is not None:
                knobs[v.knob] = toml_value(v, val)
        path = save_as(self.save_as_target(), name, self.profile, knobs,
                       save_as_description(self.profile, knobs))
        self._reload_after_save(name)
        return path

    def other_edits(self) -> dict:
        """The unsaved edits of every profile but the current one."""
        return {p: e for p, e in self.edits.items() if p != self.profile and e}

    def _reload_after_save(self, profile: str) -> None:
        """Reload showing ``profile``, the other profiles' edits kept; undo goes back to this save, not past it."""
        kept = self.other_edits()
        self.profile = profile
        self._reload_keep(kept)
        self.undo_stack.clear()
        self.redo_stack.clear()

    def _reload_keep(self, edits: dict) -> None:
        """Read the registry and profiles again, keeping ``edits`` (profile -> its edits) whose profile exists."""
        self.reg = load_registry(self.root, self.profile_dirs, broken_profiles="raise")
        self._check_registry()
        self._capture_files()
        self.edits = {p: e for p, e in edits.items() if p in self.reg.profiles}
        if self.profile not in self.reg.profiles:
            self.profile = self.default_profile()
        self._switched()

    def diff_sides(self, a: str, b: str):
        from ...registry.diff import diff

        return diff(self.edited_registry(alias=f"{self.profile}*"), a, b, tp=None)

    def plan_launch(self, final: bool = False):
        """The launch plan of the current state, as ``r9kctl launch`` makes it; ``final`` writes the manifest."""
        from ..launch import plan_launch

        return plan_launch(self.edited_registry(), self.profile, tp=self.tp_choice, env=self.env, sets=self.sets,
                           extra_args=list(self.extra_args), write_manifest=final, build_model=final)


# ------------------------------------------------------------------------------ the recovery journal

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
    if edits and write_recovery(s) is None:
        return  # not written (a read-only cache): try again at the next change
    if not edits:
        clear_journal()
    s._journaled = state


def clear_journal() -> None:
    """The panel ended by asking: nothing to restore next time."""
    with contextlib.suppress(OSError):
        recovery_path().unlink()


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
    start = data["profile"] if data.get("profile") in s.reg.profiles else s.profile
    for profile, edits in (data.get("edits") or {}).items():
        if profile not in s.reg.profiles or not isinstance(edits, dict):
            continue
        s.set_profile(profile)
        for vid, value in edits.items():
            if vid not in s.reg.variants:
                continue
            with contextlib.suppress(EditError):
                if value is None:
                    s.reset(vid)
                else:
                    s.set_value(vid, value)
                n += 1
    if s.profile != start:
        s.set_profile(start)
    clear_journal()
    return n
