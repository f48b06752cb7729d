"""The schema is plain pydantic: its classes are ``BaseModel`` subclasses, declared with pydantic's own
``Field`` and validators, and checking refuses what the declaration refuses (pydantic's ValidationError)."""
from __future__ import annotations

import pytest
from pydantic import BaseModel, Field, ValidationError, model_validator

from r9k.registry import load_registry, schema


def test_the_schema_classes_are_pydantic_models():
    reg = load_registry()
    for item in [*reg.variants.values(), *reg.releases.values(), *reg.profiles.values(), *reg.models.values()]:
        assert isinstance(item, BaseModel)
    assert schema.Strict.model_config["extra"] == "forbid"


def test_a_declaration_with_pydantics_own_field_works():
    """Ordinary ``from pydantic import Field`` in a schema class: constraints, a required field, a nested
    model as a default factory, a model validator."""

    class Inner(schema.Strict):
        n: int = Field(default=1, ge=1)

    class Outer(schema.Strict):
        a: int = Field(..., ge=1)
        inner: Inner = Field(default_factory=Inner)
        more: list[Inner] = Field(default_factory=list)

        @model_validator(mode="after")
        def _odd(self):
            if self.a == 7:
                raise ValueError("a is not 7")
            return self

    o = Outer(a=2, more=[{"n": 3}])
    assert type(o.inner) is Inner and o.inner.n == 1 and o.more[0].n == 3
    for bad in ({}, {"a": 0}, {"a": 7}, {"a": 1, "more": [{"n": 0}]}, {"a": 1, "x": 1}):
        with pytest.raises(ValidationError):
            Outer.model_validate(bad)


def test_checking_refuses_what_the_declaration_refuses():
    """Constraints, validators (field and model), unknown fields and the alias: pydantic's ValidationError,
    naming the field."""
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
