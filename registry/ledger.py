"""The gate ledger: which declared gate tests passed, on what, and for which version of the sources.

File: ``registry/gates/ledger.jsonl`` (``<registry root>/gates/ledger.jsonl``, or ``$R9K_LEDGER``),
append-only JSON Lines, one line per gate run of one variant, written by ``r9kctl gate``::

    {"variant": "router_gemm", "tests": ["kernels/router/test_router.py"], "result": "pass",
     "outcomes": {"kernels/router/test_router.py::test_exact[4]": "passed", ...},
     "platform": "cpu-triton-interpret", "date": "2026-11-30T15:40:02Z",
     "source_hash": "<sha256 hex>", "files": 5, "commit": "3440341", "dirty": true, "duration_s": 12.3}

``outcomes`` holds one entry per pytest item that ran (``passed``, ``failed``, ``error``, ``skipped``,
``needs-gpu``: skipped because it is marked ``gpu`` and no GPU was there), plus the declared id itself when it
produced no item (``not-found``, or ``not-run`` when pytest died before reaching it).

The **source hash** covers the variant's ``implementation.sources`` (files, directories taken recursively,
or glob patterns, relative to the repository root, which is the registry folder's parent) and the files of
its declared gate tests: a gate is evidence about a particular version of the code *and* of the test, so
editing either makes the recorded result stale. Each file contributes its path and the sha256 of its bytes;
a declared path that does not exist contributes a marker, so creating it changes the hash too.

**Gate state** of a variant with declared gate tests (:func:`gate_states`), from the records whose source
hash equals the current one; per declared test and platform the latest conclusive outcome counts (passed /
failed / error / not-found; a skip proves nothing):

* ``failed``  some test's latest conclusive outcome on some platform at the current sources is a failure;
* ``fresh``   every declared test passed at the current sources (on at least one platform) and none failed;
* ``stale``   not fresh, nothing failed, and some test passed only at an older hash (sources changed since);
* ``missing`` no usable record (never run, or only skipped, e.g. ``needs-gpu`` on a CPU-only machine).

Variants that declare no gate tests have no runnable gate and are absent from :func:`gate_states`.
This module reads files only; it imports nothing heavy (``r9kctl validate`` and the control panel call it).
"""
from __future__ import annotations

import glob as _glob
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from . import fileio

LEDGER_RELPATH = Path("gates") / "ledger.jsonl"

PASSED, FAILED, ERROR, SKIPPED, NEEDS_GPU, NOT_FOUND, NOT_RUN = (
    "passed", "failed", "error", "skipped", "needs-gpu", "not-found", "not-run")
CONCLUSIVE = {PASSED, FAILED, ERROR, NOT_FOUND}
FAILING = {FAILED, ERROR, NOT_FOUND}

STATES = ("fresh", "stale", "missing", "failed")

# Never part of a source hash: caches and bytecode that change without a source edit.
_IGNORED_PARTS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
_IGNORED_SUFFIXES = {".pyc", ".pyo"}


# --------------------------------------------------------------------------------------------- paths

def registry_root(reg_or_root: Any) -> Path:
    return Path(reg_or_root.root if hasattr(reg_or_root, "root") else reg_or_root)


def repo_root(reg_or_root: Any) -> Path:
    """Source paths and pytest ids are relative to the repository root: the registry folder's parent, or
    ``$R9K_REPO_ROOT`` (for a registry tree kept outside the repository whose code it describes)."""
    forced = os.environ.get("R9K_REPO_ROOT")
    return Path(forced).resolve() if forced else registry_root(reg_or_root).resolve().parent


def ledger_path(reg_or_root: Any) -> Path:
    """The ledger file: ``$R9K_LEDGER`` when set, else ``<registry root>/gates/ledger.jsonl``."""
    forced = os.environ.get("R9K_LEDGER")
    return Path(forced) if forced else registry_root(reg_or_root) / LEDGER_RELPATH


def test_file(node_id: str) -> str:
    """The file part of a pytest node id (``kernels/router/test_x.py::test_y[4]`` -> ``kernels/router/test_x.py``)."""
    return node_id.split("::", 1)[0]


def declared_tests(variant: Any) -> list[str]:
    gate = getattr(variant, "gate", None)
    return list(getattr(gate, "tests", None) or [])


def _wanted(p: Path) -> bool:
    return p.is_file() and not (_IGNORED_PARTS & set(p.parts)) and p.suffix not in _IGNORED_SUFFIXES


def expand_sources(root: Path, patterns: Iterable[str]) -> tuple[list[str], list[str]]:
    """(existing files, declared paths that match nothing), both repo-relative and sorted."""
    files: set[str] = set()
    missing: list[str] = []
    for pat in patterns:
        p = root / pat
        if any(ch in pat for ch in "*?["):
            matches = [Path(m) for m in _glob.glob(str(p), recursive=True)]
            found = [m for m in matches if _wanted(m)]
            for d in (m for m in matches if m.is_dir()):
                found += [f for f in d.rglob("*") if _wanted(f)]
        elif p.is_dir():
            found = [f for f in p.rglob("*") if _wanted(f)]
        elif p.is_file():
            found = [p]
        else:
            found = []
        if not found:
            missing.append(pat)
        files.update(f.resolve().relative_to(root.resolve()).as_posix() for f in found)
    return sorted(files), sorted(set(missing))


def hashed_paths(variant: Any) -> list[str]:
    """What a variant's source hash covers: implementation sources plus gate test files, as declared."""
    impl = getattr(variant, "implementation", None)
    sources = list(getattr(impl, "sources", None) or [])
    return sources + [t for t in dict.fromkeys(test_file(t) for t in declared_tests(variant)) if t not in sources]


def source_hash(reg_or_root: Any, variant: Any) -> tuple[str, int]:
    """(sha256 hex over the variant's hashed paths, number of files hashed)."""
    root = repo_root(reg_or_root)
    files, missing = expand_sources(root, hashed_paths(variant))
    h = hashlib.sha256()
    for rel in files:
        h.update(rel.encode() + b"\0" + hashlib.sha256((root / rel).read_bytes()).digest() + b"\n")
    for rel in missing:
        h.update(rel.encode() + b"\0<missing>\n")
    return h.hexdigest(), len(files)


# --------------------------------------------------------------------------------------------- records

@dataclass
class GateRecord:
    variant: str
    tests: list[str]
    result: str  # pass | fail | partial (nothing failed, something skipped) | skipped (nothing ran)
    outcomes: dict[str, str]
    platform: str
    date: str
    source_hash: str
    files: int = 0
    commit: str | None = None
    dirty: bool | None = None
    duration_s: float | None = None
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "GateRecord":
        known = {f for f in cls.__dataclass_fields__}
        missing = {"variant", "tests", "result", "outcomes", "platform", "date", "source_hash"} - set(d)
        if missing:
            raise ValueError(f"missing {', '.join(sorted(missing))}")
        return cls(**{k: v for k, v in d.items() if k in known})

    def outcomes_for(self, test_id: str) -> list[str]:
        """Outcomes of the items a declared id covers (the id itself, or items under a file / class id)."""
        if test_id in self.outcomes:
            return [self.outcomes[test_id]]
        prefix = test_id if "::" in test_id else test_id + "::"
        return [o for item, o in self.outcomes.items() if item.startswith(prefix) or item.startswith(test_id + "[")]


def summarize(outcomes: Mapping[str, str]) -> str:
    vals = set(outcomes.values())
    if vals & FAILING or NOT_RUN in vals:
        return "fail"
    if not vals or PASSED not in vals:
        return "skipped"
    return "pass" if vals == {PASSED} else "partial"


def read_ledger(path: str | Path) -> tuple[list[GateRecord], list[str]]:
    """(records in file order, problems: one located message per unreadable line). A missing file is empty."""
    p = Path(path)
    if not p.exists():
        return [], []
    records: list[GateRecord] = []
    problems: list[str] = []
    bad: list = []
    for lineno, obj in fileio.read_jsonl(p, "gate ledger", problems=bad):
        try:
            records.append(GateRecord.from_json(obj))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            problems.append(f"{fileio.display_path(p)}:{lineno}: unreadable ledger line ({exc})")
    problems += [d.format() for d in bad]
    return records, problems


def append_records(path: str | Path, records: Iterable[GateRecord]) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in records)
    fileio.atomic_append(p, text, "gate ledger")  # all or nothing: a failed write leaves the ledger as it was


# --------------------------------------------------------------------------------------------- state

@dataclass
class GateState:
    variant: str
    state: str  # fresh | stale | missing | failed
    detail: str
    tests: dict[str, str] = field(default_factory=dict)  # declared id -> passed|failed|stale|needs-gpu|missing
    source_hash: str = ""
    recorded_hash: str | None = None  # hash of the latest record of this variant
    last_run: str | None = None
    platforms: list[str] = field(default_factory=list)  # where the current-hash passes ran
    needs_gpu: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.state == "fresh"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _test_status(test_id: str, records: list[GateRecord], current: str) -> tuple[str, set[str]]:
    latest: dict[str, str] = {}  # platform -> latest conclusive outcome at the current hash
    passed_before = False
    needs_gpu = False
    for rec in records:  # file order = time order
        outs = rec.outcomes_for(test_id)
        if not outs:
            continue
        conclusive = [o for o in outs if o in CONCLUSIVE]
        if rec.source_hash != current:
            passed_before |= bool(conclusive) and all(o == PASSED for o in conclusive)
            continue
        if conclusive:
            latest[rec.platform] = FAILED if any(o in FAILING for o in conclusive) else PASSED
        if NEEDS_GPU in outs:
            needs_gpu = True
    if any(v == FAILED for v in latest.values()):
        return "failed", set()
    passed_on = {p for p, v in latest.items() if v == PASSED}
    if passed_on and not needs_gpu:
        return "passed", passed_on
    if passed_on:  # some items ran and passed here, others need a GPU that was never there
        gpu_pass = {p for p in passed_on if not p.startswith("cpu")}
        return ("passed", passed_on) if gpu_pass else ("needs-gpu", passed_on)
    if passed_before:
        return "stale", set()
    return ("needs-gpu" if needs_gpu else "missing"), set()


def state_of(reg_or_root: Any, variant: Any, records: list[GateRecord]) -> GateState:
    current, _ = source_hash(reg_or_root, variant)
    mine = [r for r in records if r.variant == variant.id]
    tests = declared_tests(variant)
    statuses: dict[str, str] = {}
    platforms: set[str] = set()
    for t in tests:
        st, on = _test_status(t, mine, current)
        statuses[t] = st
        platforms |= on
    counts = {s: sum(1 for v in statuses.values() if v == s) for s in set(statuses.values())}
    n = len(tests)
    needs_gpu = [t for t, s in statuses.items() if s == "needs-gpu"]
    if counts.get("failed"):
        state = "failed"
        detail = f"{counts['failed']}/{n} test(s) failing at the current sources"
    elif counts.get("passed", 0) == n:
        state = "fresh"
        detail = f"{n}/{n} passed at the current sources ({', '.join(sorted(platforms))})"
    elif counts.get("stale"):
        state = "stale"
        detail = f"sources changed since {counts['stale']}/{n} test(s) last passed; run r9kctl gate {variant.id}"
    else:
        state = "missing"
        detail = "never run" if not mine else f"{counts.get('passed', 0)}/{n} passed at the current sources"
    if needs_gpu and state != "failed":
        detail += f"; {len(needs_gpu)} need a GPU (only skipped so far)"
    return GateState(variant.id, state, detail, statuses, current, mine[-1].source_hash if mine else None,
                     mine[-1].date if mine else None, sorted(platforms), needs_gpu)


def gate_states(reg: Any, ledger: str | Path | None = None) -> dict[str, GateState]:
    """Gate state of every variant that declares gate tests, by variant id (see the module doc)."""
    records, _problems = read_ledger(ledger or ledger_path(reg))
    return {vid: state_of(reg, v, records) for vid, v in reg.variants.items() if declared_tests(v)}
