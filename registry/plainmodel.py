"""The schema's classes without pydantic until something is checked (issue 24 item 7).

``registry/schema.py`` declares every model once, with pydantic's spelling (``Field(...)``,
``field_validator``, ``model_validator``, ``ConfigDict``) imported from here. A class so declared is a plain
Python class: its instances hold their fields in ``__dict__`` and carry the schema's own methods. Importing
pydantic and building its model classes cost about a third of a ``r9kctl validate`` whose items were all
checked before (``registry/itemcache.py`` rebuilds those from their cached form); here that cost is paid only
when an item is checked.

Checking goes through a pydantic model made from the same declaration on first use (:func:`pydantic_model`:
the same annotations, field specs, validators, methods and config, nested models replaced by theirs), and
its result is turned back into the plain classes. So the declaration in ``schema.py`` stays the one source:
there is no second copy of a field or a rule to drift. What the rest of the project uses of pydantic's API is
here with pydantic's meaning: ``model_validate`` and the constructor check (raising pydantic's
``ValidationError``), ``model_fields``, ``model_copy`` (no check, as pydantic), ``==`` (same class and field
values), ``repr``, iteration over (name, value); ``model_dump``, ``model_dump_json`` and any other ``model_*``
method of an instance are pydantic's own, run on the equivalent pydantic object
(``tests/core/test_plain_schema.py`` compares both forms on every shipped item).

Standard library only at import.
"""
from __future__ import annotations

import sys
import threading
from typing import Any

_MISSING = object()
ConfigDict = dict


class FieldSpec:
    """What ``Field(...)`` (or a bare default) declares: the default or its factory, and pydantic's other
    arguments (constraints, alias) kept for the checking model."""

    __slots__ = ("default", "default_factory", "kwargs")

    def __init__(self, default: Any = _MISSING, *, default_factory: Any = None, **kwargs: Any) -> None:
        self.default = _MISSING if default is Ellipsis else default  # Field(...): required, as pydantic
        self.default_factory = default_factory
        self.kwargs = kwargs

    def is_required(self) -> bool:
        return self.default is _MISSING and self.default_factory is None

    @property
    def alias(self):
        return self.kwargs.get("alias")

    def _pydantic(self):
        from pydantic import Field as _Field  # noqa: PLC0415 - only when something is checked

        kw = dict(self.kwargs)
        if self.default is not _MISSING:
            kw["default"] = self.default
        if self.default_factory is not None:  # a model as its own factory: the checking model's (no check of {})
            f = self.default_factory
            kw["default_factory"] = pydantic_model(f) if isinstance(f, type) and issubclass(f, PlainModel) else f
        return _Field(**kw)

    def __repr__(self) -> str:
        d = "required" if self.is_required() else (f"default_factory={self.default_factory!r}"
                                                   if self.default_factory else f"default={self.default!r}")
        return f"FieldSpec({d}{''.join(f', {k}={v!r}' for k, v in self.kwargs.items())})"


def Field(default: Any = _MISSING, **kwargs: Any) -> FieldSpec:  # noqa: N802 - pydantic's name
    return FieldSpec(default, **kwargs)


class _Validator:
    """A ``field_validator`` / ``model_validator`` declaration, applied by pydantic on the checking model."""

    __slots__ = ("kind", "args", "kwargs", "func")

    def __init__(self, kind: str, args: tuple, kwargs: dict, func: Any) -> None:
        self.kind, self.args, self.kwargs, self.func = kind, args, kwargs, func

    def _pydantic(self):
        import pydantic  # noqa: PLC0415 - only when something is checked

        make = pydantic.field_validator if self.kind == "field" else pydantic.model_validator
        return make(*self.args, **self.kwargs)(self.func)


def field_validator(*fields: str, **kwargs: Any):
    return lambda func: _Validator("field", fields, kwargs, func)


def model_validator(**kwargs: Any):
    return lambda func: _Validator("model", (), kwargs, func)


def validation_error() -> type:
    """pydantic's ``ValidationError`` (for an ``except`` clause: evaluated only when something was raised)."""
    from pydantic import ValidationError  # noqa: PLC0415

    return ValidationError


# ------------------------------------------------------------------------------------------ the classes

_CLASSES: list[type] = []  # every PlainModel subclass, in definition order (a nested model before its user)
_TWINS: dict[type, type] = {}  # plain class -> its pydantic model
_PLAIN_OF: dict[type, type] = {}  # pydantic model -> plain class
_TYPES: dict[type, dict] = {}


class PlainModel:
    """Base of the schema's classes (see the module doc)."""

    model_config: dict = {}
    model_fields: dict[str, FieldSpec] = {}  # name -> FieldSpec, a base's fields first (as pydantic)
    __plain_annotations__: dict[str, str] = {}  # this class's own fields' annotations, as written

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = dict(cls.__mro__[1].__dict__.get("model_fields", {}))
        own = {}
        for name, ann in cls.__dict__.get("__annotations__", {}).items():
            if name.startswith("_") or (isinstance(ann, str) and ann.startswith(("ClassVar", "typing.ClassVar"))):
                continue
            value = cls.__dict__.get(name, _MISSING)
            _refuse_pydantic(cls, name, value)
            fields[name] = value if isinstance(value, FieldSpec) else FieldSpec(value)
            own[name] = ann
            if value is not _MISSING:
                delattr(cls, name)  # as pydantic: the default is the field's, not a class attribute
        for name, value in cls.__dict__.items():
            _refuse_pydantic(cls, name, value)
        cls.model_fields = fields
        cls.__plain_annotations__ = own
        _CLASSES.append(cls)

    # ---- checking (pydantic)

    def __init__(self, **data: Any) -> None:
        object.__setattr__(self, "__dict__", type(self).model_validate(data).__dict__)

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any):
        """pydantic's ``model_validate`` (raising its ``ValidationError``), the result as this plain class."""
        if isinstance(obj, PlainModel):
            obj = to_pydantic(obj)
        return to_plain(pydantic_model(cls).model_validate(obj, **kwargs))

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict:
        return pydantic_model(cls).model_json_schema(*args, **kwargs)

    # ---- what pydantic's BaseModel does, without it

    def model_copy(self, *, update: dict | None = None, deep: bool = False):
        """A copy (deep: of every value), ``update`` set on it unchecked: pydantic's ``model_copy``."""
        if deep:
            import copy  # noqa: PLC0415

            d = copy.deepcopy(self.__dict__)
        else:
            d = dict(self.__dict__)
        if update:
            d.update(update)
        new = type(self).__new__(type(self))
        object.__setattr__(new, "__dict__", d)
        return new

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in type(self).model_fields:
            raise ValueError(f'"{type(self).__name__}" object has no field "{name}"')
        self.__dict__[name] = value

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, PlainModel):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment] - mutable, as pydantic's (not frozen) models

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"

    def __iter__(self):
        yield from self.__dict__.items()

    def __getattr__(self, name: str) -> Any:
        # only for a name not found: model_dump, model_dump_json... of pydantic, on the equivalent object
        if name.startswith("model_"):
            return getattr(to_pydantic(self), name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def _refuse_pydantic(cls: type, name: str, value: Any) -> None:
    """pydantic's own ``Field``/validators in a plain declaration would be a silent default: refused."""
    if type(value).__module__.split(".")[0] in ("pydantic", "pydantic_core"):
        raise TypeError(f"{cls.__qualname__}.{name}: a pydantic {type(value).__name__}; declare the schema with "
                        "registry/plainmodel's Field, field_validator and model_validator")


def field_types(cls: type) -> dict[str, Any]:
    """Each field's annotation evaluated in its class's module (the plain classes, not pydantic's); None for
    one written as text that names none of the model classes (it holds no model: not evaluated, ~30 us each)."""
    types = _TYPES.get(cls)
    if types is None:
        types = {}
        models = [c.__name__ for c in _CLASSES]
        for c in reversed(cls.__mro__):
            if issubclass(c, PlainModel) and c.__plain_annotations__:
                glob = vars(sys.modules[c.__module__])
                for name, ann in c.__plain_annotations__.items():
                    if not isinstance(ann, str):
                        types[name] = ann
                    elif any(m in ann for m in models):  # a substring: at worst evaluated for nothing
                        types[name] = eval(ann, glob)  # noqa: S307 - our own source
                    else:
                        types[name] = None
        _TYPES[cls] = types
    return types


_BUILDING = threading.RLock()  # one model per class, also when two threads check their first items at once


def pydantic_model(cls: type) -> type:
    """The pydantic model checking ``cls``: made on first use from the same declaration (with those of every
    class declared before it, which its fields may nest)."""
    twin = _TWINS.get(cls)
    if twin is None:
        with _BUILDING:
            for c in _CLASSES[: _CLASSES.index(cls) + 1]:
                if c not in _TWINS:
                    _make(c)
        twin = _TWINS[cls]
    return twin


def _make(cls: type) -> None:
    import pydantic  # noqa: PLC0415 - only when something is checked

    base = cls.__mro__[1]
    tbase = pydantic.BaseModel if base is PlainModel else pydantic_model(base)
    glob = dict(vars(sys.modules[cls.__module__]))
    glob.update({c.__name__: t for c, t in _TWINS.items() if c.__module__ == cls.__module__})
    ns: dict[str, Any] = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__annotations__": {}}
    if cls.__doc__ is not None:
        ns["__doc__"] = cls.__doc__
    for name, ann in cls.__plain_annotations__.items():
        ns["__annotations__"][name] = eval(ann, glob) if isinstance(ann, str) else ann  # noqa: S307
        spec = cls.model_fields[name]
        if spec.kwargs or spec.default_factory is not None:
            ns[name] = spec._pydantic()
        elif spec.default is not _MISSING:
            ns[name] = spec.default
    for k, v in cls.__dict__.items():
        if k.startswith("__") or k in ("model_fields", "__plain_annotations__"):
            continue
        ns[k] = v._pydantic() if isinstance(v, _Validator) else (dict(v) if k == "model_config" else v)
    twin = type(cls.__name__, (tbase,), ns)
    _TWINS[cls] = twin
    _PLAIN_OF[twin] = cls


def to_plain(v: Any) -> Any:
    """A checked pydantic object (and what it nests) as the plain classes."""
    p = _PLAIN_OF.get(type(v))
    if p is not None:
        o = p.__new__(p)
        object.__setattr__(o, "__dict__", {k: to_plain(x) for k, x in v.__dict__.items()})
        return o
    if type(v) is list:
        return [to_plain(x) for x in v]
    if type(v) is dict:
        return {k: to_plain(x) for k, x in v.items()}
    return v


def to_pydantic(v: Any) -> Any:
    """A plain object (and what it nests) as the equivalent pydantic object (built, not checked)."""
    if isinstance(v, PlainModel):
        return pydantic_model(type(v)).model_construct(**{k: to_pydantic(x) for k, x in v.__dict__.items()})
    if type(v) is list:
        return [to_pydantic(x) for x in v]
    if type(v) is dict:
        return {k: to_pydantic(x) for k, x in v.items()}
    return v
