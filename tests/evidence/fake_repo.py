"""A temporary repository for the gate and provenance tests: a copy of the shipped registry (TOML only,
no ledger) plus test-only variants, and the tiny kernels and gate tests they name, written by the test
(independent of the real kernels)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Optional

from r9k.registry import envvars
from r9k.registry import ledger as L

SHIPPED = Path(L.__file__).resolve().parent


def variant(id: str, summary: str, tests: list[str], *, kind: str = "bit-exact", type: str = "bool",
            stock: str = "0", state: str = "opt-in", choices: Optional[list[str]] = None,
            defaults: Optional[dict[str, str]] = None, module: Optional[str] = None,
            sources: Optional[list[str]] = None) -> str:
    """One test-only ``[[variant]]`` table (knob ``R9K_<ID>``, area decode, category fusion); the gate
    table comes last, its ``tests`` line last of all."""
    q = json.dumps  # a JSON string or list of strings is a TOML one
    lines = ["[[variant]]", f"id = {q(id)}", f"knob = {q('R9K_' + id.upper())}", f"summary = {q(summary)}",
             'category = "fusion"', 'area = "decode"', f"type = {q(type)}"]
    if choices:
        lines.append(f"choices = {q(choices)}")
    lines += [f"stock = {q(stock)}", "[variant.status]", f"state = {q(state)}", 'reason = "test"']
    if defaults:
        lines += ["[variant.defaults]"] + [f"{k} = {q(v)}" for k, v in defaults.items()]
    if module or sources:
        lines.append("[variant.implementation]")
        lines += [f"module = {q(module)}"] if module else []
        lines += [f"sources = {q(sources)}"] if sources else []
    lines += ["[variant.gate]", f"kind = {q([kind])}", f"tests = {q(tests)}"]
    return "\n".join(lines) + "\n"


def make_repo(tmp_path: Path, monkeypatch, variants: str, files: dict[str, str], toml_name: str) -> Path:
    """``tmp_path/repo``: the shipped registry with ``variants`` in ``registry/variants/<toml_name>``,
    and ``files`` (path relative to the repository -> text). The registry variable points at it; no
    ledger or repository root is forced from outside."""
    root = tmp_path / "repo"
    shutil.copytree(SHIPPED, root / "registry", ignore=shutil.ignore_patterns("__pycache__", "*.py", "gates"))
    (root / "registry" / "variants" / toml_name).write_text(variants)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    monkeypatch.setenv(envvars.REGISTRY.name, str(root / "registry"))
    monkeypatch.delenv(envvars.LEDGER.name, raising=False)
    monkeypatch.delenv(envvars.REPO_ROOT.name, raising=False)
    return root
