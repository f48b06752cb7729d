"""The schema's classes are plain until something is checked (registry/plainmodel.py, issue 24 item 7): the pydantic
model that checks an item is made from the one declaration in registry/schema.py (every field, default, constraint,
alias and validator), every shipped item is what pydantic makes of it, and the plain objects behave as pydantic's
did where the project uses them."""
from __future__ import annotations

import copy
import json
import os
import pickle
import subprocess
import sys

import pytest
from pydantic import BaseModel, Field, ValidationError

from r9k.registry import envvars, itemcache, load_registry, plainmodel, schema
from r9k.registry.plainmodel import PlainModel, pydantic_model, to_plain, to_pydantic

CLASSES = [c for c in plainmodel._CLASSES if c.__module__ == schema.__name__]


@pytest.fixture(scope="module")
def reg():
    old = os.environ.get(envvars.NO_CACHE.name)
    os.environ[envvars.NO_CACHE.name] = "1"  # every item checked by pydantic, none rebuilt from a cache
    try:
        return load_registry()
    finally:
        if old is None:
            del os.environ[envvars.NO_CACHE.name]
        else:
            os.environ[envvars.NO_CACHE.name] = old


def _items(reg):
    for kind in ("variants", "releases", "models", "profiles"):
        yield from getattr(reg, kind).values()


def _no_pydantic_object(obj, where="item"):
    """Every model inside a plain item is a plain one (none of the checking models' objects left over)."""
    assert not isinstance(obj, BaseModel), where
    if isinstance(obj, PlainModel):
        for k, v in obj.__dict__.items():
            _no_pydantic_object(v, f"{where}.{k}")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _no_pydantic_object(v, f"{where}[{k!r}]")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _no_pydantic_object(v, f"{where}[{i}]")


def test_the_checking_models_are_made_from_the_declaration():
    """Field for field (names and order, annotation, required or default, factory, alias, constraints) and
    validator for validator, the pydantic model of each schema class is its declaration."""
    assert len(CLASSES) > 20
    for cls in CLASSES:
        twin = pydantic_model(cls)
        assert issubclass(twin, BaseModel) and twin.__name__ == cls.__name__ and plainmodel._PLAIN_OF[twin] is cls
        assert list(twin.model_fields) == list(cls.model_fields), cls
        for c in cls.__mro__:
            glob = vars(sys.modules[c.__module__])
            for name, ann in c.__dict__.get("__plain_annotations__", {}).items():
                f, spec = twin.model_fields[name], cls.model_fields[name]
                assert repr(f.annotation) == repr(eval(ann, glob)), (cls, name)  # same qualified names
                assert f.is_required() == spec.is_required(), (cls, name)
                assert f.alias == spec.alias, (cls, name)
                factory = spec.default_factory  # a model as its own factory: the checking model's
                assert f.default_factory is (pydantic_model(factory) if factory in plainmodel._TWINS else factory)
                if not spec.is_required() and spec.default_factory is None:
                    assert f.default == spec.default, (cls, name)
                assert f.metadata == Field(**spec.kwargs).metadata, (cls, name)  # ge, gt, min_length...
        declared = {k for c in cls.__mro__ for k, v in c.__dict__.items() if isinstance(v, plainmodel._Validator)}
        decs = twin.__pydantic_decorators__
        assert set(decs.field_validators) | set(decs.model_validators) == declared, cls
        assert dict(twin.model_config) == {**pydantic_model(schema.Strict).model_config, **dict(cls.model_config)}
    assert schema.Strict.model_config["extra"] == "forbid"


def test_every_shipped_item_is_what_pydantic_makes_of_it(reg):
    """Each item (checked through its pydantic model, then made plain) equals pydantic's own object: type for
    type, and in every form model_dump gives."""
    n = 0
    for item in _items(reg):
        _no_pydantic_object(item)
        checked = pydantic_model(type(item)).model_validate(item.model_dump(by_alias=True))
        assert itemcache._tree(to_plain(checked)) == itemcache._tree(item)
        for kw in ({}, {"mode": "json", "by_alias": True, "exclude_defaults": True}, {"exclude_none": True}):
            assert item.model_dump(**kw) == checked.model_dump(**kw)
        assert repr(item) == repr(checked)
        n += 1
    assert n > 150


def test_checking_refuses_what_the_declaration_refuses():
    """Constraints, validators (field and model), unknown fields and the alias, through model_validate and the
    constructor: pydantic's ValidationError, naming the field."""
    base = dict(id="x_y", knob="R9K_X", type="bool", category="fusion", area="decode", summary="s",
                status={"state": "opt-in", "reason": "r"})
    assert isinstance(schema.Variant.model_validate(base), schema.Variant)
    for bad, field in ((dict(base, id="Bad-Id"), "id"),  # a field validator
                       (dict(base, type="enum"), "choices"),  # the model validator
                       (dict(base, colour="red"), "colour"),  # extra = forbid
                       (dict(base, summary=""), "summary")):  # min_length
        with pytest.raises(ValidationError, match=field):
            schema.Variant.model_validate(bad)
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        schema.Profile(name="p", tp=0)
    with pytest.raises(ValidationError, match="a bench record needs a value"):
        schema.BenchRecord(config="c", metric="m")
    ch = schema.ReleaseChange.model_validate({"tp": "all", "from": "0", "to": "1", "knob": "R9K_X"})
    assert ch.from_ == "0" and ch == schema.ReleaseChange(tp="all", from_="0", to="1", knob="R9K_X")
    assert ch.model_dump(by_alias=True)["from"] == "0"


def test_plain_objects_behave_as_pydantics(reg):
    v = next(iter(reg.variants.values()))
    p = to_pydantic(v)
    assert type(p) is pydantic_model(schema.Variant) and to_plain(p) == v and repr(p) == repr(v)
    assert v == copy.copy(v) and v != v.model_copy(update={"summary": v.summary + "!"})
    with pytest.raises(TypeError):
        hash(v)
    with pytest.raises(ValueError, match='no field "colour"'):
        v.colour = "red"
    w = v.model_copy(update={"requires": ["x"]})  # unchecked, the rest shared (as pydantic: a shallow copy)
    assert w.requires == ["x"] and w.defaults is v.defaults and v.requires != ["x"]
    d = v.model_copy(deep=True)
    assert d == v and d.defaults is not v.defaults
    w.summary = "changed"
    assert w.summary == "changed" and v.summary != "changed"
    assert pickle.loads(pickle.dumps(v)) == v and dict(v) == v.__dict__
    assert json.loads(v.model_dump_json()) == v.model_dump(mode="json")
    with pytest.raises(AttributeError):
        v.no_such_attribute  # noqa: B018


def test_importing_the_schema_imports_no_pydantic():
    code = ("import sys\nfrom r9k.registry import schema, loader, itemcache\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True).stdout
    assert out.strip() == "[]"


def test_a_model_made_by_default_is_cached_so_a_rebuild_checks_nothing(monkeypatch):
    """A variant without an [implementation] table gets ``Implementation()`` (a check of {}): its cached form
    holds it, so rebuilding the variant from the cache checks nothing (and imports no pydantic)."""
    base = dict(id="x_y", knob="R9K_X", type="bool", category="fusion", area="decode", summary="s",
                status={"state": "opt-in", "reason": "r"})
    v = schema.Variant.model_validate(base)
    assert v.implementation == schema.Implementation.model_validate({})
    data = itemcache.dump(v)
    assert data is not None and data["implementation"] == {}
    monkeypatch.setattr(PlainModel, "model_validate", classmethod(lambda cls, *a, **k: pytest.fail("checked")))
    assert itemcache._tree(itemcache.construct(schema.Variant, json.loads(json.dumps(data)))) == itemcache._tree(v)


def test_a_declaration_outside_the_schema_is_checked_as_pydantic_would():
    """``Field(...)`` is required, a nested model and a model as a default factory are the checking model's
    (a class declared after the schema's, in another module)."""
    F = plainmodel.Field

    class Inner(schema.Strict):
        n: int = F(default=1, ge=1)

    class Outer(schema.Strict):
        a: int = F(..., ge=1)
        inner: Inner = F(default_factory=Inner)
        more: list[Inner] = F(default_factory=list)

    twin = pydantic_model(Outer)
    assert Outer.model_fields["a"].is_required() and twin.model_fields["a"].is_required()
    o = Outer(a=2, more=[{"n": 3}])
    assert type(o.inner) is Inner and type(o.more[0]) is Inner and o.more[0].n == 3 and o.inner.n == 1
    for bad in ({}, {"a": 0}, {"a": 1, "more": [{"n": 0}]}, {"a": 1, "x": 1}):
        with pytest.raises(ValidationError):
            Outer.model_validate(bad)
    with pytest.raises(TypeError, match="a pydantic FieldInfo"):
        class Wrong(schema.Strict):  # noqa: F841 - pydantic's own Field in a plain declaration
            a: int = Field(default=1, ge=1)
