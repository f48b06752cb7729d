"""Loading the registry tree and the profiles, with located errors.

    <root>/variants/<area>.toml    [[variant]] tables (schema.Variant)
    <root>/releases/<version>.toml  one release file each (schema.Release)
    <root>/models.toml              [[model]] tables (schema.ModelSpec)

Profiles: the packaged ``profiles/`` folder, ``envvars.PROFILES_DIR`` and ``profile_dirs``
(:func:`load_profiles`). Only on an error is the text scanned for the key's line and column (:func:`locate`).
"""
from __future__ import annotations

import bisect
import difflib
import functools
import hashlib
import json
import os
import pickle
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from pydantic import ValidationError

from . import envvars, fileio
from .errors import Diagnostic, RegistryError
from .fileio import display_path  # noqa: F401 - re-exported (r9kctl, the plugin and the TUI use it)
from .schema import ModelSpec, Profile, Release, Variant

PACKAGE_DIR = Path(__file__).resolve().parent


def default_registry_root(environ=None) -> Path:
    own = envvars.REGISTRY.get(environ)
    return Path(own).expanduser() if own else PACKAGE_DIR


def default_profile_dirs() -> list[Path]:
    from r9k import profiles as _profiles_pkg

    return [Path(_profiles_pkg.__file__).resolve().parent] + envvars.PROFILES_DIR.paths()


# --------------------------------------------------------------------------------- locating keys


_HEADER = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\-\"]+)\s*\]\]?")


class _Index:
    """One text's lines, table headers and ``key =`` lines, indexed once: each error is located in O(log n)."""

    _KEY = re.compile(r'^\s*(?:"([^"]*)"|([A-Za-z0-9_\-]+))\s*=')

    def __init__(self, text: str):
        self.lines = text.splitlines()
        self.headers: list[int] = []  # line numbers of every header
        self.heads: list = []  # their matches
        self.by_name: dict[tuple[bool, str], list[int]] = {}  # (array of tables?, exact name) -> lines
        self.keys: dict[str, list[int]] = {}  # key -> lines where it starts a line
        self.braces: list[int] = []  # lines holding an inline table
        for n, ln in enumerate(self.lines):
            m = _HEADER.match(ln)
            if m:
                self.headers.append(n)
                self.heads.append(m)
                e = re.match(r"^\s*(\[\[?)\s*(.*?)\s*\]", ln)
                if e:
                    self.by_name.setdefault((e.group(1) == "[[", e.group(2)), []).append(n)
            k = self._KEY.match(ln)
            if k:
                self.keys.setdefault(k.group(1) if k.group(1) is not None else k.group(2), []).append(n)
            if "{" in ln:
                self.braces.append(n)

    @staticmethod
    def within(positions: list[int], lo: int, hi: int) -> list[int]:
        return positions[bisect.bisect_left(positions, lo):bisect.bisect_left(positions, hi)]

    def first_header(self, lo: int, hi: int, stop) -> int:
        """The first header line in ``lo..hi`` for which ``stop(match, line)`` holds; ``hi`` if none."""
        for j in range(bisect.bisect_left(self.headers, lo), len(self.headers)):
            n = self.headers[j]
            if n >= hi:
                break
            if stop(self.heads[j], self.lines[n]):
                return n
        return hi


@functools.lru_cache(maxsize=8)
def _index(text: str) -> _Index:
    return _Index(text)


def locate(text: str, loc: Iterable) -> tuple[Optional[int], Optional[int]]:
    """Best-effort 1-based line and column of a pydantic error location inside a TOML text (arrays of tables,
    sub-tables, inline tables, top-level keys); (None, None) when nothing matches."""
    ix = _index(text)
    lines = ix.lines
    lo, hi = 0, len(lines)
    best: tuple[Optional[int], Optional[int]] = (None, None)
    prefix = ""
    loc = list(loc)
    i = 0
    while i < len(loc):
        part = loc[i]
        if isinstance(part, int):
            i += 1
            continue
        name = f"{prefix}.{part}" if prefix else str(part)
        nxt = loc[i + 1] if i + 1 < len(loc) else None
        heads = ix.within(ix.by_name.get((True, name), []), lo, hi)
        if heads and isinstance(nxt, int) and nxt < len(heads):
            start = heads[nxt]
            # up to the next element of this array, or a header outside it
            end = ix.first_header(start + 1, hi, lambda m, ln: (ln.lstrip().startswith("[[") and m.group(1) == name)
                                  or not m.group(1).startswith(name))
            lo, hi = start, end
            best = (start + 1, 1)
            prefix = name
            i += 2
            continue
        tabs = ix.within(ix.by_name.get((False, name), []), lo, hi)
        if tabs:
            start = tabs[0]
            # up to the next header that is not one of its own sub-tables
            end = ix.first_header(start + 1, hi, lambda m, ln: not m.group(1).startswith(name + "."))
            lo, hi = start, end
            best = (start + 1, 1)
            prefix = name
            i += 1
            continue
        # the key: on its own line before the next table, or inside a one-line inline table before that
        stop = ix.first_header(lo + 1, hi, lambda m, ln: True)
        own = ix.within(ix.keys.get(str(part), []), lo, stop)
        found = own[0] if own else None
        pat = re.compile(r"[{,]\s*(?:\"%s\"|%s)\s*=" % (re.escape(str(part)), re.escape(str(part))))
        for n in ix.within(ix.braces, lo + 1, found if found is not None else stop):
            m = pat.search(lines[n])
            if m and n < hi:
                found = n
                best = (n + 1, m.start() + 2)
                break
        if found is None:
            break
        col = len(lines[found]) - len(lines[found].lstrip()) + 1
        if best[0] != found + 1:
            best = (found + 1, col)
        lo = found
        # a multi-line value: stay from this key to the next key/header
        hi = min(ix.first_header(found + 1, hi, lambda m, ln: True), _next_key_line(ix, found + 1, hi))
        prefix = name
        i += 1
    return best


def _next_key_line(ix: _Index, lo: int, hi: int) -> int:
    """The first line in ``lo..hi`` that starts with ``key =`` (any key) before a header; ``hi`` if none."""
    for n in range(lo, hi):  # usually the very next line: a value rarely spans many
        if re.match(r"^\s*[A-Za-z0-9_\"\-]+\s*=", ix.lines[n]):
            return n
        if _HEADER.match(ix.lines[n]):
            return hi
    return hi


def _source_text(path: Path) -> str:
    """The text of a file read before (served from the parse cache), to locate an error in it."""
    try:
        return fileio.read_text(path)
    except fileio.FileError:
        return ""


_TYPE_NAMES = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean"}


def _merge_union_errors(errors: list) -> list:
    """One error for a value that matches no member of a union (pydantic reports one per member)."""
    out: list = []
    for err in errors:
        loc = tuple(err["loc"])
        prev = out[-1] if out else None
        if loc and loc[-1] in _TYPE_NAMES and prev is not None and prev.get("_members") \
                and tuple(prev["loc"]) == loc[:-1]:
            prev["_members"].append(loc[-1])
        elif loc and loc[-1] in _TYPE_NAMES:
            out.append(dict(err, loc=loc[:-1], _members=[loc[-1]]))
        else:
            out.append(err)
    for err in out:
        members = err.pop("_members", None)
        if members and len(members) == 1:  # not a union of scalars after all
            err["loc"] = tuple(err["loc"]) + tuple(members)
        elif members:
            kinds = [_TYPE_NAMES[m] for m in members]
            kinds = ", ".join(kinds[:-1]) + " or " + kinds[-1]
            value = err.get("input")
            got = {list: "an array", dict: "a table"}.get(type(value), f"a {type(value).__name__}")
            err["msg"] = f"Input should be {kinds}, not {got}"
    return out


def _schema_diags(path: Path, text: Optional[str], exc: ValidationError, base_loc: tuple = (),
                  items=()) -> list[Diagnostic]:
    out = []
    if text is None:  # parsed data came from the cache: read the text only now, to locate the error
        text = _source_text(path)
    for err in _merge_union_errors(exc.errors()):
        loc = base_loc + tuple(err["loc"])
        line, col = locate(text, loc)
        if line is None and err["type"] == "missing":  # a missing key: at its table (the file's top: line 1)
            line, col = locate(text, loc[:-1]) if loc[:-1] else (1, 1)
            line, col = (line, col) if line else (1, 1)
        where = ".".join(str(p) for p in loc)
        msg = err["msg"]
        named = re.match(r"^Value error, ([a-z_]+(?:\.[A-Za-z0-9_]+)*) ", msg)
        if named and err["type"] == "value_error":  # a check of the whole table naming its key: point at the key
            kl, kc = locate(text, loc + tuple(named.group(1).split(".")))
            if kl and kl != line:
                line, col = kl, kc
        keyed = re.match(r"""^Value error, env (?:key|value of) ('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""", msg)
        if keyed and err["type"] == "value_error":  # an [env] key or value: point at its line
            import ast

            key = ast.literal_eval(keyed.group(1))
            kl, kc = key_index(text).get((loc[-1], key), (None, None)) if loc else (None, None)
            if not kl:
                kl, kc = locate(text, loc + (key,))
            if kl:
                line, col = kl, kc
        if err["type"] == "extra_forbidden":
            msg = f"unknown field '{loc[-1]}'"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        out.append(Diagnostic("error", "schema", f"{where}: {msg}", display_path(path), line, col, list(items)))
    return out


class _ParseCache:
    """Parsed TOML by (path, SHA-256 of the file's bytes), pickled in the user's cache directory. The file is
    ``MAGIC``, :func:`_stamp`, the pickle's SHA-256, then the pickle: anything else is ignored and rebuilt.
    ``envvars.NO_CACHE`` turns it off."""

    MAGIC = b"r9k-parse-cache/2\n"

    def __init__(self) -> None:
        self.enabled = not envvars.NO_CACHE.on()
        self.path = envvars.cache_dir() / "toml-cache.pickle"
        self.data: dict = {}
        self.dirty = False
        if self.enabled:
            try:
                self.data = self.decode(fileio.read_bytes(self.path, "parse cache"))
            except fileio.FileError:  # missing, not a file, unreadable: start empty
                pass

    @classmethod
    def decode(cls, raw: bytes) -> dict:
        """The entries of a cache file's bytes; {} for anything but an intact file of this very code."""
        head = cls.MAGIC + _stamp() + b"\n"
        if not raw.startswith(head) or len(raw) < len(head) + 65:
            return {}
        digest, payload = raw[len(head): len(head) + 64], raw[len(head) + 65:]
        if hashlib.sha256(payload).hexdigest().encode() != digest:
            return {}
        try:
            data = pickle.loads(payload)
        except Exception:  # noqa: BLE001 - a cache that cannot be read only costs speed
            return {}
        return data if isinstance(data, dict) else {}

    @classmethod
    def encode(cls, data: dict) -> bytes:
        payload = pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)
        return cls.MAGIC + _stamp() + b"\n" + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload

    def get(self, path: Path, digest: str):
        hit = self.data.get(str(path)) if self.enabled else None
        if isinstance(hit, tuple) and len(hit) == 3 and hit[0] == digest:
            return hit[1], hit[2]
        return None

    def put(self, path: Path, digest: str, data: dict, heads: list[int]) -> None:
        if self.enabled:
            self.data[str(path)] = (digest, data, heads)
            self.dirty = True

    MAX_ENTRIES = 200

    def save(self) -> None:
        if not (self.enabled and self.dirty):
            return
        # forget files that are gone (temporary trees of tests, moved registries), then the oldest entries
        self.data = {k: v for k, v in self.data.items() if os.path.exists(k)}
        while len(self.data) > self.MAX_ENTRIES:
            self.data.pop(next(iter(self.data)))
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fileio.atomic_write(self.path, self.encode(self.data), "parse cache", within=self.path.parent)
        except (OSError, fileio.FileError):
            pass  # a cache that cannot be written (full, read-only, not a file) only costs speed


@functools.cache
def _stamp() -> bytes:
    """What a cache file must have been written by: the project's and Python's versions, a hash of the parser."""
    from r9k import __version__

    h = hashlib.sha256(f"{__version__}:{sys.version_info[:2]}".encode())
    for mod in (__file__, fileio.__file__):
        try:
            h.update(Path(mod).read_bytes())
        except OSError:
            h.update(mod.encode())
    return h.hexdigest()[:16].encode()


def _read(path: Path, diags: list[Diagnostic], cache: Optional[_ParseCache] = None,
          header: str = "[[variant]]") -> tuple[Optional[dict], Optional[str], list[int]]:
    """Parsed data, the text and the lines of ``header`` tables (parsed data from the cache when it holds
    these exact bytes)."""
    try:
        raw = fileio.read_bytes(path, "TOML file")
        text = fileio.decode(raw, path, "TOML file")
        digest = hashlib.sha256(raw).hexdigest() if cache else ""
        hit = cache.get(path, digest) if cache else None
        if hit is not None:
            return hit[0], text, hit[1]
        data = fileio.parse_toml(text, path)
    except fileio.FileError as exc:
        diags.append(exc.diagnostic)
        return None, "", []
    heads = [n + 1 for n, ln in enumerate(text.splitlines()) if ln.strip() == header]
    if cache:
        cache.put(path, digest, data, heads)
    return data, text, heads


# --------------------------------------------------------------------------------- the registry


@dataclass
class Registry:
    root: Path
    variants: dict[str, Variant]
    releases: dict[str, Release]
    models: dict[str, ModelSpec]
    profiles: dict[str, Profile]
    # where each item was declared: ("variant", id) -> (file, line); ("profile", name) -> ...
    origins: dict[tuple[str, str], tuple[str, int]] = field(default_factory=dict)
    texts: dict[str, Optional[str]] = field(default_factory=dict)  # file -> text (None: read when needed)
    # profiles whose file does not load: name -> its located diagnostics (see load_registry)
    profile_problems: dict[str, list[Diagnostic]] = field(default_factory=dict)
    _knobs: dict[str, str] = field(default_factory=dict)
    _memo: dict = field(default_factory=dict)  # derived data cached for this registry object: see cached()

    def __post_init__(self) -> None:
        for v in self.variants.values():
            self._knobs.setdefault(v.knob, v.id)  # a second declaration never takes a knob over (consistency)
            for k in v.also_knobs:
                self._knobs.setdefault(k, v.id)

    def variant(self, key: str) -> Variant:
        """A variant by id or knob (case-insensitive for knobs); KeyError with suggestions if unknown."""
        if key in self.variants:
            return self.variants[key]
        vid = self._knobs.get(key) or self._knobs.get(key.upper())
        if vid:
            return self.variants[vid]
        raise KeyError(key)

    def find_variant(self, key: str) -> Optional[Variant]:
        try:
            return self.variant(key)
        except KeyError:
            return None

    def cached(self, key: tuple | str, compute):
        """``compute()``, once per registry object and ``key`` (derived data: gate states, located keys)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def knobs(self) -> dict[str, str]:
        return dict(self._knobs)

    def release_order(self) -> list[str]:
        """Releases from oldest to newest: by date, then by version."""
        key = ("release_order",) + tuple((v, r.date) for v, r in self.releases.items())  # sorted once per set
        return list(self.cached(key, lambda: sorted(self.releases, key=lambda v: (self.releases[v].date, _vkey(v)))))

    def latest_release(self) -> Optional[str]:
        order = self.release_order()
        return order[-1] if order else None

    def locate(self, kind: str, key: str, loc: Iterable = ()) -> tuple[Optional[str], Optional[int], Optional[int]]:
        """File, line, column of an item (and optionally a key inside it)."""
        loc = tuple(loc)
        return self.cached(("locate", kind, key, loc), lambda: self._locate(kind, key, loc))

    def _locate(self, kind: str, key: str, loc: tuple):
        origin = self.origins.get((kind, key))
        if not origin:
            return None, None, None
        file, line = origin
        if loc and file in self.texts and self.texts[file] is None:
            try:
                self.texts[file] = fileio.read_text(file)
            except fileio.FileError:
                self.texts.pop(file)
        if loc and file in self.texts and kind not in ("variant", "model") and len(loc) == 2 \
                and all(isinstance(x, str) for x in loc):  # a key of a table: indexed
            hit = self.cached(("key-index", file), lambda: key_index(self.texts[file])).get(loc)
            if hit:
                return file, hit[0], hit[1]
        if loc and file in self.texts:
            lines = self.texts[file].splitlines()
            if kind in ("variant", "model"):
                # search within this item's block, as the first of its array of tables
                head = f"[[{kind}]]"
                start = line - 1
                end = next((n for n in range(start + 1, len(lines)) if lines[n].strip() == head), len(lines))
                sub = "\n".join(lines[start:end])
                ln, col = locate(sub, (kind, 0) + tuple(loc))
                if ln:
                    return file, start + ln, col
            else:
                ln, col = locate(self.texts[file], loc)
                if ln:
                    return file, ln, col
        return file, line, None


def key_index(text: str) -> dict:
    """(table, key) -> (line, col) of every ``key = ...`` line under a plain ``[table]`` header, in one pass;
    quoted keys are unescaped (``"\\u00c9" = 1`` is the key 'É')."""
    index: dict = {}
    table = None
    for n, ln in enumerate(text.splitlines(), 1):
        h = _HEADER.match(ln)
        if h:
            table = None if ln.lstrip().startswith("[[") else h.group(1).strip()
            continue
        if table is None:
            continue
        m = _KEY_LINE.match(ln)
        if m:
            key = m.group(2)
            if key is None:
                try:
                    key = json.loads(m.group(1))
                except ValueError:
                    continue
            index.setdefault((table, key), (n, len(ln) - len(ln.lstrip()) + 1))
    return index


_KEY_LINE = re.compile(r'^\s*(?:("(?:[^"\\]|\\.)*")|([A-Za-z0-9_-]+))\s*=')


def _vkey(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else x for x in re.findall(r"\d+|[A-Za-z]+", v))


def load_profiles(dirs: list[Path], diags: list[Diagnostic], texts: dict, origins: dict,
                  cache: Optional[_ParseCache] = None,
                  problems: Optional[dict[str, list[Diagnostic]]] = None,
                  only: Optional[Iterable[str]] = None) -> dict[str, Profile]:
    """The profiles of ``dirs`` (a later folder's file replaces an earlier one of the same name). A file that
    does not load goes to ``problems`` when given, else to ``diags``. ``only``: read only these profiles and
    what they extend (every file when one of them has no file: the error lists the others)."""
    profiles: dict[str, Profile] = {}
    files = {d: sorted(d.glob("*.toml")) for d in dirs if d.is_dir()}
    need = _profiles_needed(files, only, cache) if only is not None else None
    for d in dirs:
        if not d.is_dir():
            diags.append(Diagnostic("error", "io", "profile folder does not exist", display_path(d)))
            continue
        for path in files[d]:
            if need is not None and path.stem not in need:
                continue
            local: list[Diagnostic] = []
            prof = _load_named(path, Profile, "name", "profile", local, texts, cache, name_from_file=True)
            if local or prof is None:
                profiles.pop(path.stem, None)
                if problems is None:
                    diags += local
                else:
                    problems[path.stem] = local
                continue
            if problems is not None:
                problems.pop(prof.name, None)
            profiles[prof.name] = prof
            origins[("profile", prof.name)] = (display_path(path), 1)
    return profiles


def _profiles_needed(files: dict[Path, list[Path]], only: Iterable[str], cache) -> Optional[set[str]]:
    """The names of ``only`` and of the profiles they extend (transitively); None when one has no file."""
    by_stem: dict[str, list[Path]] = {}
    for paths in files.values():
        for path in paths:
            by_stem.setdefault(path.stem, []).append(path)
    need: set[str] = set()
    todo = list(only)
    while todo:
        name = todo.pop()
        if name in need or name == "stock" and name not in by_stem:
            continue
        if name not in by_stem:
            return None
        need.add(name)
        data, _, _ = _read(by_stem[name][-1], [], cache)  # the last folder's file is the profile
        parent = data.get("extends") if isinstance(data, dict) else None
        if isinstance(parent, str) and not parent.startswith("release:"):
            todo.append(parent)
    return need


def _load_named(path: Path, schema, key: str, what: str, diags: list[Diagnostic], texts: dict, cache,
                name_from_file: bool = False):
    """The item of a file named like it (a profile, a release), checked against ``schema`` and its ``key``
    field against the file's name (the default when ``name_from_file``); None after located errors."""
    data, text, _ = _read(path, diags, cache)
    shown = display_path(path)
    texts[shown] = text
    if data is None:
        return None
    if name_from_file:
        data = dict(data)
        data.setdefault(key, path.stem)
    try:
        item = schema.model_validate(data)
    except ValidationError as exc:
        diags += _schema_diags(path, text, exc, items=[path.stem])
        return None
    name = getattr(item, key)
    if name != path.stem:
        line, col = locate(text or _source_text(path), (key,))
        diags.append(Diagnostic("error", "schema", f"{what} {key} {name!r} differs from its file name "
                                f"{path.stem!r}", shown, line, col, [name]))
        return None
    return item


def _array_of_tables(data: Optional[dict], key: str, text: Optional[str], path: Path, shown: str,
                     diags: list[Diagnostic]) -> list:
    """The ``[[key]]`` tables of a file; [] after a located error when ``key`` holds something else. Any
    other top-level key (a misspelt ``[[models]]``) is a located error too."""
    for k in sorted(set(data or {}) - {key}):
        line, col = locate(text or _source_text(path), (k,)) if not isinstance(data[k], list) else \
            locate(text or _source_text(path), (k, 0))
        hint = difflib.get_close_matches(k, [key], n=1)
        diags.append(Diagnostic("error", "schema", f"unknown top-level key '{k}' ({path.name} holds [[{key}]] "
                                "tables)", shown, line, col, hint=f"did you mean [[{key}]]?" if hint else None))
    tables = (data or {}).get(key, [])
    if isinstance(tables, list):
        return tables
    line, col = locate(text or _source_text(path), (key,))
    diags.append(Diagnostic("error", "schema", f"'{key}' must be an array of tables ([[{key}]]), not "
                            f"{type(tables).__name__}", shown, line, col))
    return []


def _declared_before(origins: dict, key: tuple[str, str], what: str, shown: str, line: Optional[int],
                     diags: list[Diagnostic]) -> bool:
    """Whether ``key`` (kind, name) was declared already; if so, a located error naming the first place."""
    if key not in origins:
        return False
    f0, l0 = origins[key]
    diags.append(Diagnostic("error", "duplicate", f"{what} is declared twice (first at {f0}:{l0})", shown, line, 1,
                            [key[1]]))
    return True


def _load_tables(path: Path, kind: str, into: dict, diags: list[Diagnostic], texts: dict, origins: dict,
                 cache: _ParseCache) -> None:
    """The ``[[variant]]`` (by id) or ``[[model]]`` (by name) tables of one file, added to ``into``."""
    schema, key = (Variant, "id") if kind == "variant" else (ModelSpec, "name")
    data, text, heads = _read(path, diags, cache, header=f"[[{kind}]]")
    shown = display_path(path)
    texts[shown] = text
    if data is None:
        return
    for i, raw in enumerate(_array_of_tables(data, kind, text, path, shown, diags)):
        line = heads[i] if i < len(heads) else (None if kind == "variant" else 1)
        vid = raw.get("id", f"#{i}") if isinstance(raw, dict) else f"#{i}"
        try:
            item = schema.model_validate(raw)
        except ValidationError as exc:
            diags += _schema_diags(path, text, exc, base_loc=(kind, i), items=[str(vid)] if kind == "variant" else ())
            continue
        name = getattr(item, key)
        what = f"variant id '{name}'" if kind == "variant" else f"model '{name}'"
        if _declared_before(origins, (kind, name), what, shown, line, diags):
            continue
        into[name] = item
        origins[(kind, name)] = (shown, line or 1)


def load_registry(root: Optional[Path] = None, profile_dirs: Optional[list[Path]] = None,
                  broken_profiles: str = "keep", only_profiles: Optional[Iterable[str]] = None) -> Registry:
    """Load and schema-check the registry tree and the profiles; raise RegistryError with every located error.

    ``broken_profiles="keep"``: a profile file that does not load is left out, its diagnostics kept in
    ``profile_problems``; ``"raise"`` makes it an error of the load. ``only_profiles``: read only these
    profiles' files and their parents' (:func:`load_profiles`)."""
    root = Path(root).expanduser() if root else default_registry_root()
    diags: list[Diagnostic] = []
    texts: dict[str, str] = {}
    origins: dict[tuple[str, str], tuple[str, int]] = {}
    variants: dict[str, Variant] = {}
    releases: dict[str, Release] = {}
    models: dict[str, ModelSpec] = {}

    if not (root / "variants").is_dir():
        raise RegistryError([Diagnostic("error", "io", "not a registry tree (no variants/ folder)", display_path(root))])

    cache = _ParseCache()
    for path in sorted((root / "variants").glob("*.toml")):
        _load_tables(path, "variant", variants, diags, texts, origins, cache)

    rdir = root / "releases"
    for path in sorted(rdir.glob("*.toml")) if rdir.is_dir() else []:
        rel = _load_named(path, Release, "version", "release", diags, texts, cache)
        if rel is not None:
            releases[rel.version] = rel
            origins[("release", rel.version)] = (display_path(path), 1)

    mpath = root / "models.toml"
    if os.path.lexists(mpath):  # a broken link or a loop is an error of its own, not a missing file
        _load_tables(mpath, "model", models, diags, texts, origins, cache)

    problems: Optional[dict[str, list[Diagnostic]]] = {} if broken_profiles == "keep" else None
    profiles = load_profiles(profile_dirs if profile_dirs is not None else default_profile_dirs(), diags, texts, origins,
                             cache, problems, only_profiles)
    cache.save()
    if diags:
        raise RegistryError(diags)
    return Registry(root=root, variants=variants, releases=releases, models=models, profiles=profiles,
                    origins=origins, texts=texts, profile_problems=problems or {})
