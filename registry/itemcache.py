"""Validated registry items, cached by the content hash of the file they come from (issue 24 item 7).

Checking a variant, release, model or profile with its pydantic schema first builds the schema's validators
(about a third of the CPU time of a ``r9kctl validate`` that loads from the TOML parse cache) and, with
them, pydantic's plugin loader and ``importlib.metadata``. What a check accepts depends only on the item's
data and on the code that checks it, so an item that passed is kept here: its checked fields as JSON, under
the sha256 of its file's text, its index in the file, its schema class and (a profile's name defaults to its
file's) the file's stem. A later load of the same text rebuilds the item as the schema's plain classes
(:mod:`.plainmodel`: nothing is checked twice, and pydantic is not imported); any other text, an item
that fails, or a file of another version of the checking code is checked as before. Only exact items are
kept: one whose rebuilt form differs in any value or type from the checked one (a tuple, a float that JSON
cannot carry) is never cached.

The file, ``<cache dir>/validated-<FORMAT>.json``, is a cache only: its first line holds the format, the
fingerprint of the checking code (:func:`fingerprint`: pydantic's version and the sources of the schema and
what its validators call) and the sha256 of the rest; a file whose line does not match (another version, a
truncated or corrupted file), that is not a regular file in the cache folder (a FIFO, a folder, a link out
of it) or that does not parse is ignored and written again through :func:`r9k.registry.fileio.atomic_write`
(which refuses the same). Each entry is checked for its shape before use. ``envvars.NO_CACHE`` set to 1
turns it off. No pickle: nothing in the file is ever executed.
"""
from __future__ import annotations

import hashlib
import json
import os
import types
from pathlib import Path
from typing import Any, Optional, Union, get_args, get_origin

from . import envvars, fileio
from .plainmodel import PlainModel, field_types

FORMAT = 1
MAGIC = f"r9k-validated/{FORMAT}"
MAX_BYTES = 32 << 20
_FP: list[str] = []


def fingerprint() -> str:
    """The checking code's identity: Python's, pydantic's and pydantic-core's installed versions (read from
    their metadata: importing pydantic is what this cache saves) and the source of every module of this
    project that a schema check runs (the schema, its plain classes, its formula and version-spec parsers,
    this module)."""
    if not _FP:
        import sys

        from . import formula, plainmodel, provenance, schema

        h = hashlib.sha256(f"python {sys.version_info[:3]} pydantic {provenance.dist_version('pydantic')} "
                           f"core {provenance.dist_version('pydantic-core', 'pydantic_core')}".encode())
        for mod in (schema, plainmodel, formula, provenance):
            h.update(Path(mod.__file__).read_bytes())
        h.update(Path(__file__).read_bytes())
        _FP.append(h.hexdigest()[:32])
    return _FP[0]


def text_hash(text: Optional[str]) -> str:
    return hashlib.sha256((text or "").encode("utf-8", "surrogatepass")).hexdigest()


# ----------------------------------------------------------------------------------- rebuilding an item

_PLANS: dict[type, list] = {}


def _converter(ann: Any):
    """How a JSON value becomes the field's value: None (as it is), or a function building nested models."""
    if isinstance(ann, type) and issubclass(ann, PlainModel):
        return lambda v, c=ann: construct(c, v)
    origin = get_origin(ann)
    if origin in (Union, types.UnionType):
        subs = [_converter(a) for a in get_args(ann) if a is not type(None)]
        subs = [s for s in subs if s is not None]
        if not subs:
            return None
        if len(subs) > 1:
            raise TypeError(f"no rebuild for a union of models: {ann!r}")
        sub = subs[0]
        return lambda v: None if v is None else sub(v)
    if origin is list:
        sub = _converter(get_args(ann)[0])
        return None if sub is None else (lambda v: [sub(x) for x in v])
    if origin is dict:
        sub = _converter(get_args(ann)[1])
        return None if sub is None else (lambda v: {k: sub(x) for k, x in v.items()})
    if origin is not None and any(_converter(a) is not None for a in get_args(ann)):
        raise TypeError(f"no rebuild for {ann!r}")
    return None


_REQUIRED = object()


def _default_of(f) -> tuple[Any, Any]:
    """(the default, None) or (None, its factory: a fresh one each time) as validation gives it, or
    (_REQUIRED, None) for a field always stored."""
    if f.is_required():
        return _REQUIRED, None
    if f.default_factory is not None:
        if isinstance(f.default_factory, type) and issubclass(f.default_factory, PlainModel):
            return _REQUIRED, None  # a model made by checking {}: always stored, so a rebuild checks nothing
        return None, f.default_factory
    d = f.default
    if isinstance(d, (list, dict, set)) or (d is not None and type(d) not in (str, int, float, bool)):
        return _REQUIRED, None  # a mutable or odd default: always stored
    return d, None


def _plan(cls: type) -> list:
    """(field name, converter, default, default factory) of each field of a schema class."""
    plan = _PLANS.get(cls)
    if plan is None:
        types_ = field_types(cls)
        plan = _PLANS[cls] = [(name, _converter(types_[name]), *_default_of(f)) for name, f in cls.model_fields.items()]
    return plan


_set = object.__setattr__


def construct(cls: type, data: Any) -> Any:
    """``cls`` rebuilt from :func:`dump`'s form without checking (KeyError/TypeError if the form is not one)."""
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__}: not an object")
    fields = _PLANS.get(cls) or _plan(cls)
    kw, found = {}, 0
    for name, conv, default, factory in fields:
        if name in data:
            v = data[name]
            kw[name] = v if conv is None or v is None else conv(v)
            found += 1
        elif factory is not None:
            kw[name] = factory()
        elif default is _REQUIRED:
            raise KeyError(f"{cls.__name__}: {name} missing")
        else:
            kw[name] = default
    if found != len(data):
        raise KeyError(f"{cls.__name__}: unknown fields")
    m = cls.__new__(cls)  # the fields in the order validation gives them, defaults included
    _set(m, "__dict__", kw)
    return m


def _tree(obj: Any) -> Any:
    """A JSON-able picture of an item that keeps what ``==`` does not: each model's class, int/float/bool,
    list/tuple."""
    if isinstance(obj, PlainModel):
        return {"<model>": type(obj).__qualname__, **{k: _tree(getattr(obj, k)) for k in type(obj).model_fields}}
    if isinstance(obj, dict):
        return {"<dict>": [[_tree(k), _tree(v)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return {f"<{type(obj).__name__}>": [_tree(x) for x in obj]}
    if obj is None or type(obj) in (str, int, float, bool):
        return [type(obj).__name__, obj]
    raise TypeError(f"not cached: a {type(obj).__name__}")


def dump(obj: PlainModel) -> Optional[dict]:
    """The cached form of a checked item (its fields as JSON, those at their default left out), or None when
    rebuilding it from that form would not give the very same item."""
    try:
        data = json.loads(json.dumps(_fields_of(obj), allow_nan=False, default=_fields_of))
        same = json.dumps(_tree(construct(type(obj), data)), allow_nan=False) == json.dumps(_tree(obj), allow_nan=False)
    except (TypeError, ValueError, KeyError, RecursionError):
        return None
    return data if same else None


def _fields_of(o: Any) -> Any:
    if isinstance(o, PlainModel):
        out = {}
        for name, _conv, default, factory in _plan(type(o)):
            v = getattr(o, name)
            d = factory() if factory is not None else default
            if d is _REQUIRED or type(v) is not type(d) or v != d:
                out[name] = v
        return out
    raise TypeError(f"not JSON: {type(o).__name__}")


# ----------------------------------------------------------------------------------------- the cache

class ItemCache:
    """One load's view of the cache file (see the module doc): :meth:`check` instead of ``model_validate``,
    :meth:`save` at the end of the load (only the entries this load used are kept)."""

    def __init__(self) -> None:
        self.enabled = not envvars.NO_CACHE.on()
        self.path = envvars.cache_dir() / f"validated-{FORMAT}.json"
        self.items: dict[str, Any] = self._load() if self.enabled else {}
        self.used: dict[str, Any] = {}
        self.dirty = False

    def _head(self) -> str:
        return f"{MAGIC} {fingerprint()}"

    def _load(self) -> dict:
        p = self.path
        try:
            if os.path.islink(p) and os.path.dirname(os.path.realpath(p)) != os.path.realpath(p.parent):
                return {}  # a link out of the cache folder: not ours to read
            raw = fileio.read_bytes(p, "validated-item cache", max_bytes=MAX_BYTES)
        except (OSError, fileio.FileError):
            return {}
        head, _, rest = raw.partition(b"\n")
        parts = head.decode("ascii", "replace").rsplit(" ", 1)
        if len(parts) != 2 or parts[0] != self._head() or hashlib.sha256(rest).hexdigest() != parts[1]:
            return {}
        try:
            data = json.loads(rest)
        except (ValueError, RecursionError):
            return {}
        return data if isinstance(data, dict) else {}

    def check(self, cls: type, raw: Any, text_sha: str, index: int = 0, stem: str = "") -> Any:
        """``cls.model_validate(raw)`` (raising its ValidationError), or the item rebuilt from the cache when
        this very text was checked before (``raw`` is then not looked at)."""
        key = f"{cls.__name__}:{text_sha}:{index}:{stem}"
        hit = self.items.get(key)
        if hit is not None:
            try:
                obj = construct(cls, hit)
            except (KeyError, TypeError, ValueError, AttributeError, RecursionError):
                pass  # a damaged entry: checked again below
            else:
                self.used[key] = hit
                return obj
        obj = cls.model_validate(raw)
        if self.enabled:
            data = dump(obj)
            if data is not None:
                self.used[key] = data
                self.dirty = True
        return obj

    # about five registries' worth (the shipped one is ~200 items, ~270 KB): every run reads the whole file, so
    # it is kept small; the entries a load used go last, the oldest go first
    MAX_ENTRIES = 1000

    def save(self) -> None:
        """Write the cache if this load checked an item anew (atomically; the entries it used go last, the
        oldest beyond :attr:`MAX_ENTRIES` are dropped); a cache that cannot be written only costs speed."""
        if not (self.enabled and self.dirty):
            return
        keep = {k: v for k, v in self.items.items() if k not in self.used}
        keep.update(self.used)
        for k in list(keep)[: max(0, len(keep) - self.MAX_ENTRIES)]:
            del keep[k]
        try:
            body = json.dumps(keep, separators=(",", ":"), allow_nan=False).encode()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fileio.atomic_write(self.path, f"{self._head()} {hashlib.sha256(body).hexdigest()}\n".encode() + body,
                                "validated-item cache", within=self.path.parent)
        except (OSError, fileio.FileError, ValueError, TypeError):
            pass
        self.dirty = False
