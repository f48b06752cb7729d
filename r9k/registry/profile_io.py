"""Round-trip editing of profile files for the control panel: change knobs, keep comments and layout.

:class:`ProfileDocument` holds one file as a ``tomlkit`` document and touches only the one key;
:meth:`~ProfileDocument.save` writes atomically and refuses a file changed on disk since it was loaded
(:class:`ProfileConflict`); :func:`save_as` creates a new profile that ``extends`` one, never replacing a file.
Values are written as canonical strings, except that a key holding a TOML number or boolean keeps its type.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional
from .fileio import atomic_write as _atomic_write, decode, locked, read_bytes

if TYPE_CHECKING:
    from tomlkit.items import InlineTable, Table

# tomlkit (slow to import) is imported where a document is parsed or written: the panel imports this at start-up.

PROFILE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*\Z")  # \Z: a trailing newline is refused


class ProfileConflict(Exception):
    """The file changed on disk since it was loaded; saving would lose someone else's edit."""

    def __init__(self, path: Path, loaded_mtime_ns: int, disk_mtime_ns: Optional[int]):
        self.path = path
        self.loaded_mtime_ns = loaded_mtime_ns
        self.disk_mtime_ns = disk_mtime_ns
        what = "was deleted" if disk_mtime_ns is None else "changed on disk"
        super().__init__(f"{path} {what} since it was loaded; reload it or save as a new profile")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def find_profile_file(name: str, dirs: Iterable[Path]) -> Optional[Path]:
    """The file a profile was loaded from: the last folder that has ``NAME.toml`` (the loader's rule)."""
    found = None
    for d in dirs:
        p = Path(d) / f"{name}.toml"
        if p.is_file():
            found = p
    return found


@dataclass
class _Stamp:
    mtime_ns: Optional[int]
    sha256: Optional[str]


def _stamp(path: Path) -> _Stamp:
    try:
        data = path.read_bytes()
        st = path.stat()
    except FileNotFoundError:
        return _Stamp(None, None)
    return _Stamp(st.st_mtime_ns, _digest(data))


class ProfileDocument:
    """One profile file, loaded for editing."""

    def __init__(self, path: Path, text: str, stamp: _Stamp):
        import tomlkit

        self.path = Path(path)
        self.text = text  # as loaded (or last saved)
        self.doc = tomlkit.parse(text)
        self._stamp = stamp

    @classmethod
    def load(cls, path: Path) -> "ProfileDocument":
        path = Path(path)
        data = read_bytes(path, "profile")
        decode(data, path, "profile")  # a located error for a file that is not UTF-8
        st = path.stat()
        return cls.from_bytes(path, data, st.st_mtime_ns)

    @classmethod
    def from_bytes(cls, path: Path, data: bytes, mtime_ns: Optional[int]) -> "ProfileDocument":
        """The document as read earlier (``data``): a later save compares the file with these bytes."""
        return cls(Path(path), data.decode("utf-8"), _Stamp(mtime_ns, _digest(data)))

    # ------------------------------------------------------------------------------ reading

    @property
    def loaded_mtime_ns(self) -> Optional[int]:
        return self._stamp.mtime_ns

    def knobs(self) -> dict[str, object]:
        """The ``knobs`` table as plain Python values (what the loader would see)."""
        tab = self.doc.get("knobs")
        return dict(tab.unwrap()) if tab is not None else {}

    def render(self) -> str:
        import tomlkit

        return tomlkit.dumps(self.doc)

    @property
    def dirty(self) -> bool:
        return self.render() != self.text

    def changed_on_disk(self) -> bool:
        """True when the file's content differs from what was loaded (or it was deleted)."""
        return _stamp(self.path).sha256 != self._stamp.sha256

    # ------------------------------------------------------------------------------ editing

    def _knobs_table(self, create: bool) -> Optional[Table | InlineTable]:
        import tomlkit

        tab = self.doc.get("knobs")
        if tab is None and create:
            tab = tomlkit.table()
            # a blank line before the new table, unless the document already ends with one
            if not self.render().endswith("\n\n"):
                self.doc.add(tomlkit.nl())
            self.doc.add("knobs", tab)
            tab = self.doc["knobs"]
        return tab

    def set_knob(self, key: str, value: str) -> None:
        """Set ``key`` (a knob or variant id, as the file spells it) to ``value`` (canonical string);
        an existing key keeps its place, its inline comment and, where it converts, its TOML type."""
        tab = self._knobs_table(create=True)
        tab[key] = _typed_like(tab[key], value) if key in tab else value

    def remove_knob(self, key: str) -> bool:
        """Remove ``key`` from the knobs; False if it was not there. Comments on other lines stay."""
        tab = self._knobs_table(create=False)
        if tab is None or key not in tab:
            return False
        del tab[key]
        return True

    # ------------------------------------------------------------------------------ writing

    def save(self, force: bool = False) -> None:
        """Write the document atomically; :class:`ProfileConflict` if the file changed on disk since it was loaded
        (unless ``force``). Lock, check, write: of two panels saving one profile, the second sees a conflict."""
        text = self.render()
        with locked(self.path):  # refuses a FIFO, socket, device or folder at once
            if not force and self.changed_on_disk():
                raise ProfileConflict(self.path, self._stamp.mtime_ns or 0, _stamp(self.path).mtime_ns)
            written = atomic_write(self.path, text)
            mtime_ns = written.stat().st_mtime_ns
        self.text = text
        self._stamp = _Stamp(mtime_ns, _digest(text.encode("utf-8")))


def _typed_like(old: object, value: str) -> object:
    """``value`` as the same TOML type as ``old`` when it converts cleanly, else the string."""
    raw = old.unwrap() if hasattr(old, "unwrap") else old
    try:
        if isinstance(raw, bool):
            if value in ("1", "0"):
                return value == "1"
        elif isinstance(raw, int):
            return int(value)
        elif isinstance(raw, float):
            return float(value)
    except ValueError:
        pass
    return value


def atomic_write(path: Path, text: str) -> Path:
    """Write a profile's ``text`` to ``path``; :class:`~r9k.registry.fileio.WriteError` leaves the old file."""
    return _atomic_write(path, text, "profile")


def new_profile_text(name: str, extends: str, knobs: dict[str, str], description: str = "") -> str:
    """The TOML text of a new profile that extends ``extends`` and sets ``knobs``."""
    import tomlkit

    doc = tomlkit.document()
    doc.add(tomlkit.comment(f"Created by r9kctl tui: {extends} with {len(knobs)} knob(s) changed."))
    doc.add("description", description or f"{extends} with {len(knobs)} knob(s) changed")
    doc.add("extends", extends)
    doc.add(tomlkit.nl())
    tab = tomlkit.table()
    for k in sorted(knobs):
        tab[k] = knobs[k]
    doc.add("knobs", tab)
    return tomlkit.dumps(doc)


def save_as(folder: Path, name: str, extends: str, knobs: dict[str, str], description: str = "") -> Path:
    """Create ``folder/NAME.toml``, a profile extending ``extends`` with ``knobs``. Raises
    FileExistsError if it exists (never replaces a file) and ValueError for an illegal name."""
    if not PROFILE_NAME_RE.match(name):
        raise ValueError(f"profile name {name!r} must be lower-case letters, digits, '.', '_' or '-'")
    if name == extends:
        raise ValueError("a profile cannot extend itself")
    folder = Path(folder)
    target = folder / f"{name}.toml"
    if target.exists():
        raise FileExistsError(f"{target} exists")
    text = new_profile_text(name, extends, knobs, description)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.link(tmp, target)  # atomic and fails with FileExistsError if someone created it meanwhile
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    return target
