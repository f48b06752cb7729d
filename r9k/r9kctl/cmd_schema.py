"""``r9kctl schema profile``: a JSON Schema (draft-07) of profile files, generated from the registry (every
knob, its id and aliases, allowed values, defaults, summary), for editors (Taplo, VS Code).

It accepts what the loader accepts (``Variant.normalize``), the typed form first; range checks apply to the
typed form only. The shipped copy is ``profiles/profile.schema.json``, named by each shipped profile's first line.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from ..registry.loader import Registry
from ..registry.schema import _FALSE, _TRUE, Profile, Variant

from .common import fail, load

SCHEMA_ID = "https://r9k-stack.invalid/schemas/profile.schema.json"
INT_STRING = r"^\s*[+-]?[0-9]+\s*$"
FLOAT_STRING = r"^\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*$"


def _any_case(words) -> str:
    alts = ["".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in w) for w in sorted(words)]
    return r"^\s*(" + "|".join(alts) + r")\s*$"


def _typed(v: Variant, value: str) -> Any:
    """A canonical value as the TOML value a profile writes (what the control panel saves)."""
    if value in v.special or value == "":
        return value
    if v.type == "bool":
        return int(value)
    if v.type == "int":
        return int(value)
    if v.type == "float":
        return float(value)
    return value


def _values(v: Variant) -> dict:
    """The allowed values of one variant."""
    alts: list[dict] = []
    if v.type == "bool":
        alts = [{"type": "integer", "enum": [0, 1]}, {"type": "boolean"},
                {"type": "string", "pattern": _any_case(_TRUE | _FALSE)}]
    elif v.type == "enum":
        alts = [{"type": "string", "enum": list(v.choices)}]
    elif v.type in ("int", "float"):
        num: dict = {"type": "integer" if v.type == "int" else "number"}
        if v.range is not None and v.range.min is not None:
            num["minimum"] = int(v.range.min) if v.type == "int" and v.range.min == int(v.range.min) else v.range.min
        if v.range is not None and v.range.max is not None:
            num["maximum"] = int(v.range.max) if v.type == "int" and v.range.max == int(v.range.max) else v.range.max
        alts = [num, {"type": "string", "pattern": INT_STRING if v.type == "int" else FLOAT_STRING}]
        if v.type == "float":
            alts.insert(1, {"type": "integer"} | {k: num[k] for k in ("minimum", "maximum") if k in num})
    else:  # string, path
        alts = [{"type": "string"}]
    if v.special:
        alts.append({"type": "string", "enum": list(v.special)})
    if v.allow_unset and v.type not in ("string", "path"):
        alts.append({"type": "string", "enum": [""]})
    return alts[0] if len(alts) == 1 else {"anyOf": alts}


def _describe(v: Variant) -> str:
    parts = [v.summary, f"Allowed: {v.allowed_text()}."]
    if v.defaults:
        parts.append("Default: " + ", ".join(f"{k}={d!r}" for k, d in sorted(v.defaults.items())) + ".")
    if v.stock is not None:
        parts.append(f"Stock (vLLM's own path): {v.stock!r}.")
    parts.append(f"Status: {v.status.state}. Variant {v.id}; r9kctl show {v.knob}")
    return " ".join(parts)


def _knob_schema(v: Variant) -> dict:
    s: dict = {"title": f"{v.knob} ({v.id})", "description": _describe(v)}
    s.update(_values(v))
    default = v.defaults.get("tp4", v.defaults.get("tp2", v.stock))
    if default is not None:
        s["default"] = _typed(v, default)
    return s


def _hardware() -> dict:
    return {"type": "object", "additionalProperties": False, "required": ["gpus", "memory_gib_per_gpu"],
            "properties": {
                "gpus": {"type": "integer", "minimum": 1, "description": "GPUs the profile serves on"},
                "memory_gib_per_gpu": {"type": "number", "exclusiveMinimum": 0,
                                       "description": "memory of one GPU in GiB (the KV-cache budget uses it)"},
                "name": {"type": "string", "description": "the card's name"}}}


def profile_schema(reg: Registry) -> dict:
    """The schema of a profile file for this registry."""
    knob_defs: dict[str, dict] = {}
    knob_props: dict[str, dict] = {}
    for v in sorted(reg.variants.values(), key=lambda v: v.knob):
        knob_defs[v.knob] = _knob_schema(v)
        ref = {"$ref": f"#/definitions/knobs/{v.knob}"}
        knob_props[v.knob] = ref
    for v in sorted(reg.variants.values(), key=lambda v: v.id):
        for alias in [v.id] + list(v.also_knobs):
            if alias not in knob_props:
                knob_props[alias] = {"$ref": f"#/definitions/knobs/{v.knob}", "description": f"another name of {v.knob}"}
    releases = [f"release:{r}" for r in reg.release_order()]
    props: dict[str, dict] = {
        "name": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9._-]*$",
                 "description": "the profile's name; when given it must equal the file name without .toml"},
        "description": {"type": "string", "description": "one line: what this profile is for"},
        "extends": {"type": "string", "description": "the profile, release (release:VERSION) or 'stock' this "
                                                     "one starts from; its knobs apply on top",
                    "examples": ["stock"] + list(reversed(releases)) + sorted(reg.profiles)},
        "platform": {"type": "string", "description": "where it is served (rocm-gfx1201, cuda, cpu): the "
                                                      "implementation checks use it",
                     "examples": ["rocm-gfx1201", "cuda", "cpu"]},
        "model": {"type": "string", "enum": sorted(reg.models), "description": "the model (registry/models.toml)"},
        "tp": {"type": "integer", "minimum": 1, "description": "tensor-parallel size"},
        "hardware": _hardware(),
        "gpu_memory_utilization": {"type": "number", "exclusiveMinimum": 0, "maximum": 1,
                                   "description": "vLLM's --gpu-memory-utilization"},
        "serve_args": {"type": "array", "items": {"type": "string"},
                       "description": "extra vllm serve arguments"},
        "model_path": {"type": "string", "description": "the model's folder or hub name for vllm serve"},
        "knobs": {"type": "object", "additionalProperties": False, "properties": knob_props,
                  "description": "declared knobs (by knob, variant id or alias) and their values"},
        "env": {"type": "object", "additionalProperties": {"type": "string"},
                "description": "free-form extra environment of the server"},
        "strict": {"type": "boolean", "description": "refuse warnings at launch too"},
    }
    missing = set(Profile.model_fields) - set(props)
    if missing:  # a field added to the Profile model: say so rather than write a schema that rejects it
        raise RuntimeError(f"profile_schema: no schema for Profile field(s) {sorted(missing)}")
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": SCHEMA_ID,
        "title": "r9k-stack serving profile",
        "description": "A profile file (profiles/NAME.toml); generated by 'r9kctl schema profile' from the registry.",
        "type": "object",
        "additionalProperties": False,
        "properties": props,
        "definitions": {"knobs": knob_defs},
    }


def add_parser(sub):
    p = sub.add_parser("schema", help="print a JSON Schema generated from the registry (profile files)")
    p.add_argument("what", choices=("profile",), help="which file kind: profile")
    p.add_argument("--out", metavar="FILE", help="write it to FILE instead of standard output")
    p.add_argument("--check", metavar="FILE", help="exit 1 when FILE differs from the generated schema")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    reg = load(args)
    text = json.dumps(profile_schema(reg), indent=2, ensure_ascii=False) + "\n"
    if args.check:
        try:
            have = Path(args.check).read_text(encoding="utf-8")
        except OSError as exc:
            return fail(f"{args.check}: cannot read: {exc.strerror or exc}", "io")
        if have != text:
            sys.stderr.write(f"{args.check}: stale: regenerate with 'r9kctl schema profile --out {args.check}'\n")
            return 1
        print(f"{args.check}: up to date")
        return 0
    if args.out:
        from ..registry.profile_io import atomic_write

        atomic_write(Path(args.out), text)
        return 0
    sys.stdout.write(text)
    return 0
