"""The gate ledger: which declared gate tests passed, on what, and for which version of the sources.

:func:`ledger_path` is append-only JSON Lines, one :class:`GateRecord` per gate run of one variant, written by
``r9kctl gate``. A record counts when its source hash (:func:`hash_of` over :func:`dependencies`: declared
sources, gate tests, their import closure and the pytest configuration) and its platform's toolchain
(:class:`Toolchains`) are the current ones. :func:`gate_states` gives each variant that declares gate tests a
state: ``failed``, ``fresh``, ``stale`` (with ``changes`` saying why) or ``missing``; notes/evidence.md has the
rules. This module imports nothing heavy.
"""
from __future__ import annotations

import glob as _glob
import hashlib
import json
import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from . import envvars, fileio
from .errors import Diagnostic
from . import gatedeps
from . import provenance  # toolchain() looked up at call time: callers and tests replace provenance.toolchain
from .gatedeps import closure_cached, content_hash, lookups_for_a_gate, one_pass
from .availability import platform_admits

LEDGER_RELPATH = Path("gates") / "ledger.jsonl"

PASSED, FAILED, ERROR, SKIPPED, NEEDS_GPU, NOT_FOUND, NOT_RUN = (
    "passed", "failed", "error", "skipped", "needs-gpu", "not-found", "not-run")
FAILING = {FAILED, ERROR, NOT_FOUND}

STATES = ("fresh", "stale", "missing", "failed")
RAN_HERE = "ran here"
RAN_ELSEWHERE = "ran elsewhere"  # by r9kctl gate, in another checkout or on another machine: came with the ledger

# Never part of a source hash: caches and bytecode that change without a source edit.
_IGNORED_PARTS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
_IGNORED_SUFFIXES = {".pyc", ".pyo"}


# --------------------------------------------------------------------------------------------- paths

def registry_root(reg_or_root: Any) -> Path:
    if isinstance(reg_or_root, (str, Path)):  # a Path has a .root too: "/"
        return Path(reg_or_root)
    return Path(reg_or_root.root)


def repo_root(reg_or_root: Any) -> Path:
    """Source paths and pytest ids are relative to the repository root: the registry folder's parent, or
    ``envvars.REPO_ROOT``."""
    forced = envvars.REPO_ROOT.get()
    return Path(forced).resolve() if forced else registry_root(reg_or_root).resolve().parent


_PACKAGE_DIR = Path(__file__).resolve().parent


def installed_copy(root: Path) -> bool:
    """Whether ``root`` is this package's own registry tree outside a repository (a wheel's copy)."""
    return Path(root).resolve() == _PACKAGE_DIR and not (_PACKAGE_DIR.parents[1] / ".git").exists()


def ledger_path(reg_or_root: Any) -> Path:
    """``envvars.LEDGER``, else ``<registry root>/gates/ledger.jsonl``; an installed copy uses
    ``<state dir>/gates/ledger-<version>.jsonl``, started from the packaged ledger."""
    forced = envvars.LEDGER.get()
    if forced:
        return Path(forced)
    root = registry_root(reg_or_root)
    own = root / LEDGER_RELPATH
    if not installed_copy(root):
        return own
    import importlib.metadata

    try:
        version = importlib.metadata.version("r9k-stack")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    state = envvars.state_dir() / "gates" / f"ledger-{version}.jsonl"
    if not state.exists():
        try:
            state.parent.mkdir(parents=True, exist_ok=True)
            fileio.atomic_write(state, fileio.read_bytes(own, "gate ledger") if own.is_file() else b"",
                                "gate ledger")
        except (OSError, fileio.FileError):
            return own
    return state


def test_file(node_id: str) -> str:
    """The file part of a pytest node id."""
    return node_id.split("::", 1)[0]


def item_of(nodeid: str, declared: str) -> bool:
    """Whether a pytest item belongs to a declared id: the id, a parametrization (``id[...]``) or an item
    under it (``id::...``)."""
    return nodeid == declared or nodeid.startswith(declared + "::") or nodeid.startswith(declared + "[")


def declared_tests(variant: Any) -> list[str]:
    return list(variant.gate.tests) if variant.gate else []


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
    """The declared part of what a variant's hash covers: implementation sources plus gate test files."""
    sources = list(variant.implementation.sources)
    return sources + [t for t in dict.fromkeys(test_file(t) for t in declared_tests(variant)) if t not in sources]


def dependencies(reg_or_root: Any, variant: Any) -> tuple[list[str], list[str]]:
    """(files a variant's gate depends on, declared paths that match nothing), repo-relative and sorted: the
    declared paths (:func:`hashed_paths`) and the import closure of its tests, their conftest.py files, the
    implementation module and the Python files under the declared sources."""
    root = repo_root(reg_or_root)
    declared, missing = expand_sources(root, hashed_paths(variant))
    roots = [f for f in declared if f.endswith(".py") and not gatedeps.is_script(root, f)]
    for t in dict.fromkeys(test_file(t) for t in declared_tests(variant)):
        roots += gatedeps.conftests(root, t)
    mod = gatedeps.module_path(root, variant.implementation.module)
    if mod:
        roots.append(mod)
    files = gatedeps.closure(root, roots)
    return sorted(set(files) | set(declared)), missing


def file_hashes(reg_or_root: Any, variant: Any) -> tuple[dict[str, str], list[str]]:
    """(path -> sha256 of every file the gate depends on, missing declared paths), cached on disk per gate."""
    lookups_for_a_gate()
    root = repo_root(reg_or_root)
    key = [str(root), hashed_paths(variant), declared_tests(variant), variant.implementation.module]

    def compute() -> tuple[dict[str, str], list[str]]:
        files, missing = dependencies(reg_or_root, variant)
        return {rel: content_hash(root / rel)[0] for rel in files}, missing

    files, missing = closure_cached(root, key, compute)
    cfg = provenance.ini_options_hash(root)  # what the tests run under: in every gate's hash
    return ({**files, provenance.PYTEST_CONFIG: cfg} if cfg else files), missing


def hash_of(files: Mapping[str, str], missing: Iterable[str] = ()) -> str:
    """The source hash: sha256 over (path, file sha256) of every dependency, plus a marker per missing path."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + bytes.fromhex(files[rel]) + b"\n")
    for rel in sorted(set(missing)):
        h.update(rel.encode() + b"\0<missing>\n")
    return h.hexdigest()


def source_hash(reg_or_root: Any, variant: Any) -> tuple[str, int]:
    """(sha256 hex over everything the variant's gate depends on, number of files hashed)."""
    files, missing = file_hashes(reg_or_root, variant)
    return hash_of(files, missing), len(files)


def file_changes(old: Mapping[str, str] | None, new: Mapping[str, str], limit: int = 3) -> list[str]:
    """What differs between two dependency maps, e.g. ``["kernels/router/tl_common.py changed"]``."""
    if old is None:
        return ["recorded without per-file hashes (before dependency tracking)"]
    out = [f"{f} changed" for f in sorted(new) if f in old and old[f] != new[f]]
    out += [f"{f} added" for f in sorted(set(new) - set(old))]
    out += [f"{f} removed" for f in sorted(set(old) - set(new))]
    return out[:limit] + ([f"{len(out) - limit} more file(s)"] if len(out) > limit else [])


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
    deps: dict[str, str] | None = None  # repo-relative path -> sha256 of every file the gate depends on
    toolchain: dict[str, str | None] | None = None  # r9k.registry.provenance.toolchain() of the run
    # Set on a record made by ``r9kctl gate --import-junit`` (the run was elsewhere; nothing here re-ran it):
    # {"file": the JUnit file's name, "created": the provenance's date, "checks": what the import checked}
    imported: dict[str, Any] | None = None
    # provenance.checkout_id() of the checkout and machine r9kctl gate ran in (None: an import, or older)
    ran_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "GateRecord":
        known = cls.__dataclass_fields__
        missing = {"variant", "tests", "result", "outcomes", "platform", "date", "source_hash"} - set(d)
        if missing:
            raise ValueError(f"missing {', '.join(sorted(missing))}")
        return cls(**{k: v for k, v in d.items() if k in known})

    @property
    def was_imported(self) -> bool:
        """Made by an import (also the records written before imports were marked: their note says so)."""
        return self.imported is not None or (self.note or "").startswith("imported from")

    def evidence(self, here: str | None = None) -> str:
        """``ran here`` (by ``r9kctl gate`` in the checkout and machine ``here``), ``ran elsewhere, <date>``,
        or ``imported from <platform>, <date>, unverified``."""
        if not self.was_imported:
            if here is not None and self.ran_at == here:
                return RAN_HERE
            return f"{RAN_ELSEWHERE}, {self.date[:10]}"
        created = (self.imported or {}).get("created") or ""
        if not created and "(provenance of " in (self.note or ""):
            created = self.note.split("(provenance of ", 1)[1]
        return f"imported from {self.platform}, {(created or self.date)[:10]}, unverified"

    def outcomes_for(self, test_id: str) -> list[str]:
        """Outcomes of the items a declared id covers."""
        if test_id in self.outcomes:
            return [self.outcomes[test_id]]
        under = (test_id + "::", test_id + "[")  # item_of, inlined: this runs per record x declared test
        return [o for item, o in self.outcomes.items() if item.startswith(under)]


def summarize(outcomes: Mapping[str, str]) -> str:
    vals = set(outcomes.values())
    if vals & FAILING or NOT_RUN in vals:
        return "fail"
    if not vals or PASSED not in vals:
        return "skipped"
    return "pass" if vals == {PASSED} else "partial"


#: An append that would take the ledger past SEGMENT_BYTES first moves it aside, unchanged, as
#: ``ledger.0001.jsonl`` (then 0002, ...); readers read the segments in order, then the ledger, line by line.
SEGMENT_BYTES = 8 * 1024 * 1024
#: A longer line is not a record (the largest are ~10 kB): skipped with a warning, read no further.
LINE_BYTES = 1024 * 1024


def segments(path: str | Path) -> list[Path]:
    """The ledger's files in time order: its moved-aside segments (``<stem>.NNNN<suffix>``), then itself."""
    p = Path(path)
    old = []
    for q in p.parent.glob(f"{_glob.escape(p.stem)}.[0-9][0-9][0-9][0-9]*{_glob.escape(p.suffix)}"):
        num = q.name[len(p.stem) + 1: len(q.name) - len(p.suffix)]
        if num.isdigit():
            old.append((int(num), q))
    return [q for _, q in sorted(old)] + [p]


def _bad(p: Path, lineno: int, col: int, why: str, code: str = "ledger-line"):
    return Diagnostic("warning", code, why if code != "ledger-line" else f"line skipped: {why}",
                      fileio.display_path(p), lineno, col)


def _read_segment(p: Path, records: list[GateRecord], problems: list) -> None:
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return
    except OSError as exc:
        problems.append(_bad(p, 1, 1, f"cannot read the gate ledger ({exc.strerror}); its records are not "
                             "counted", "ledger"))
        return
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        problems.append(_bad(p, 1, 1, "the gate ledger is not a regular file; its records are not counted",
                             "ledger"))
        return
    with os.fdopen(fd, "rb") as fh:
        lineno = 0
        while True:
            raw = fh.readline(LINE_BYTES + 1)
            if not raw:
                break
            lineno += 1
            if len(raw) > LINE_BYTES and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):  # the rest of the long line, read and dropped
                    raw = fh.readline(LINE_BYTES)
                problems.append(_bad(p, lineno, 1, f"longer than {LINE_BYTES // 1024} KiB"))
                continue
            if not raw.strip():
                continue
            nul = raw.find(b"\0")
            if nul >= 0:
                problems.append(_bad(p, lineno, nul + 1, "holds a NUL byte"))
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                problems.append(_bad(p, lineno, exc.start + 1, f"not UTF-8 (byte 0x{raw[exc.start]:02x})"))
                continue
            try:
                obj = fileio.parse_json(text, p, f"line {lineno} of this gate ledger", dict, lineno - 1)
                records.append(GateRecord.from_json(obj))
            except fileio.FileError as exc:
                problems.append(_bad(p, lineno, exc.diagnostic.col or 1, exc.diagnostic.message))
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                problems.append(_bad(p, lineno, 1, f"not a gate record ({exc})"))


def split_by_where_it_ran(outcomes: Mapping[str, str], ran_on: Mapping[str, str | None], platform: str,
                          toolchain: Mapping[str, Any] | None) -> list[tuple[str, dict[str, str], dict | None]]:
    """[(platform, outcomes, toolchain)] of one gate run: on a GPU platform the items that ran on the CPU
    (:func:`r9k.registry.provenance.ran_on`) are a record of their own on ``cpu``."""
    cpu = {n: o for n, o in outcomes.items() if ran_on.get(n) == "cpu"}
    if platform_matches(platform, "cpu") or not cpu:
        return [(platform, dict(outcomes), dict(toolchain) if toolchain is not None else None)]
    gpu = {n: o for n, o in outcomes.items() if n not in cpu}
    out = [(platform, gpu, dict(toolchain) if toolchain is not None else None)] if gpu else []
    return out + [("cpu", cpu, dict(toolchain or {}, device="cpu"))]


def read_ledger(path: str | Path) -> tuple[list[GateRecord], list[str]]:
    """:func:`read_ledger_diagnostics` with the problems as text lines."""
    records, diags = read_ledger_diagnostics(path)
    return records, [d.format() for d in diags]


def read_ledger_diagnostics(path: str | Path) -> tuple[list[GateRecord], list]:
    """(records in time order, one located warning per line that is not a record); segments read first."""
    records: list[GateRecord] = []
    problems: list = []
    for seg in segments(path):
        _read_segment(seg, records, problems)
    return records, problems


def append_records(path: str | Path, records: Iterable[GateRecord]) -> None:
    """Append under the ledger's lock, all or nothing; past SEGMENT_BYTES the ledger is first moved aside."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in records)
    with fileio.locked(p):
        try:
            size = os.stat(p).st_size if p.is_file() and not p.is_symlink() else 0
        except OSError:
            size = 0
        if size and size + len(text.encode("utf-8")) > SEGMENT_BYTES:
            old = segments(p)[:-1]
            nxt = (int(old[-1].name[len(p.stem) + 1: len(old[-1].name) - len(p.suffix)]) + 1) if old else 1
            fileio.move_into_place(p, p.with_name(f"{p.stem}.{nxt:04d}{p.suffix}"), "gate ledger segment")
        fileio.atomic_append(p, text, "gate ledger")  # a failed write leaves the ledger as it was


class States(dict):
    """Gate states by variant id, with ``problems``: the ledger's located warnings (Diagnostics)."""

    problems: list = []


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
    changes: list[str] = field(default_factory=list)  # what changed since the newest record that no longer counts
    toolchains: dict[str, dict] = field(default_factory=dict)  # platform -> toolchain of the passes counted
    # platform -> "ran here" | "imported from <platform>, <date>, unverified": the newest counted record there
    evidence: dict[str, str] = field(default_factory=dict)
    # platform -> the state from that platform's records alone (every platform with a record of this variant)
    per_platform: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.state == "fresh"

    def label(self) -> str:
        """Where the counted evidence came from (per platform when there are several), or ``no record``."""
        if not self.evidence:
            return "no record" if not self.per_platform else "nothing counts"
        vals = list(dict.fromkeys(self.evidence.values()))
        if len(self.evidence) == 1 or len(vals) == 1 and vals[0] == RAN_HERE:
            return vals[0]
        return "; ".join(f"{p}: {e}" for p, e in self.evidence.items())

    def line(self) -> str:
        """One state line: ``fresh (imported from cuda-h200, 2026-12-01, unverified): 4/4 passed ...``."""
        if not self.per_platform:
            return f"{self.state}: {self.detail}"
        return f"{self.state} ({self.label()}): {self.detail}"

    def on(self, platform: str | None) -> tuple[str, str]:
        """(state, detail) counting only records made on ``platform`` (or its family's names)."""
        if not platform:
            return self.state, f"{self.label()}: {self.detail}"
        mine = {p: st for p, st in self.per_platform.items() if platform_matches(p, platform)}
        others = ", ".join(f"{st} on {p} ({self.evidence.get(p, 'nothing counts')})"
                           for p, st in self.per_platform.items() if p not in mine)
        if not mine:
            return "missing", f"no record on {platform}" + (f" (only: {others})" if others else "")
        states = set(mine.values())
        state = next(s for s in ("failed", "fresh", "stale", "missing") if s in states)
        where = "; ".join(f"{p}: {self.evidence.get(p, 'nothing counts')}" for p in mine)
        return state, f"{where}" + (f"; elsewhere: {others}" if others else "")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["label"] = self.label()
        return d


def platform_matches(recorded: str, wanted: str) -> bool:
    """Whether a record made on ``recorded`` is evidence for a profile on ``wanted``: the same name, one a
    refinement of the other (``cuda`` / ``cuda-h200``), or both on the CPU (``cpu`` / ``cpu-triton-interpret``)."""
    return platform_admits([recorded], wanted)


def _record_outcome(rec: GateRecord, test_id: str) -> str | None:
    """A declared test's outcome in one record: failed if any item failed, passed only when every item
    passed, else None (proves nothing)."""
    outs = rec.outcomes_for(test_id)
    if any(o in FAILING for o in outs):
        return FAILED
    if outs and all(o == PASSED for o in outs):
        return PASSED
    return None


class Toolchains:
    """The current toolchain of each platform: this machine's own for its platforms, else the newest record's."""

    def __init__(self, records: Iterable[GateRecord], local: Mapping[str, Any] | None = None):
        self.local = dict(local) if local is not None else provenance.toolchain()
        dev = self.local.get("device") or "cpu"
        self._mine = {"cpu", "cpu-triton-interpret"} if dev == "cpu" else {f"cuda-{dev}", f"rocm-{dev}"}
        self._latest: dict[str, dict] = {}
        for r in records:
            if r.toolchain is not None:
                self._latest[r.platform] = r.toolchain

    def current(self, platform: str) -> Mapping[str, Any] | None:
        return self.local if platform in self._mine else self._latest.get(platform)

    def ok(self, rec: GateRecord) -> bool:
        cur = self.current(rec.platform)
        return rec.toolchain is not None and cur is not None and dict(rec.toolchain) == dict(cur)


def _test_status(test_id: str, records: list[GateRecord], current: str,
                 tcs: Toolchains, seen: dict | None = None) -> tuple[str, set[str], dict[str, GateRecord]]:
    """``seen``: (record's id, test id) -> outcome, shared by the calls of one :func:`state_of`."""
    latest: dict[str, str] = {}  # platform -> latest conclusive outcome of a valid record
    deciding: dict[str, GateRecord] = {}  # platform -> the record that gave it
    passed_before = False
    needs_gpu = False
    for rec in records:  # file order = time order
        if seen is None:
            outcome = _record_outcome(rec, test_id)
        elif (key := (id(rec), test_id)) in seen:
            outcome = seen[key]
        else:
            outcome = seen[key] = _record_outcome(rec, test_id)
        if rec.source_hash != current or not tcs.ok(rec):
            passed_before |= outcome == PASSED
            continue
        if outcome is not None:
            latest[rec.platform] = outcome
            deciding[rec.platform] = rec
        elif NEEDS_GPU in rec.outcomes_for(test_id):
            needs_gpu = True
    if any(v == FAILED for v in latest.values()):
        return "failed", set(), deciding
    passed_on = {p for p, v in latest.items() if v == PASSED}
    if passed_on:
        return "passed", passed_on, deciding
    if passed_before:
        return "stale", set(), deciding
    return ("needs-gpu" if needs_gpu else "missing"), set(), deciding


def _changes(rec: GateRecord, current: str, files: Mapping[str, str], tcs: Toolchains) -> list[str]:
    """Why a record no longer counts: the files that changed and the toolchain entries that differ."""
    out: list[str] = []
    if rec.source_hash != current:
        out += file_changes(rec.deps, files) or ["declared sources changed"]
    cur = tcs.current(rec.platform)
    if cur is not None and (rec.toolchain is None or dict(rec.toolchain) != dict(cur)):
        out += [f"{c} on {rec.platform}" for c in provenance.toolchain_changes(rec.toolchain, cur)]
    return out


def _platform_state(statuses: Mapping[str, str], platform: str) -> str:
    """The state from one platform's records alone; on a CPU platform a test that needs a GPU proves nothing."""
    vals = set(statuses.values())
    if "failed" in vals:
        return "failed"
    cpu = platform_matches(platform, "cpu")
    if vals == {"passed"} or (cpu and "passed" in vals and vals <= {"passed", "needs-gpu"}):
        return "fresh"
    return "stale" if "stale" in vals else "missing"


def state_of(reg_or_root: Any, variant: Any, records: list[GateRecord], tcs: Toolchains | None = None) -> GateState:
    files, missing = file_hashes(reg_or_root, variant)
    current = hash_of(files, missing)
    tcs = tcs or Toolchains(records)
    mine = [r for r in records if r.variant == variant.id]
    tests = declared_tests(variant)
    statuses: dict[str, str] = {}
    platforms: set[str] = set()
    deciding: dict[str, GateRecord] = {}
    seen: dict = {}  # the records live as long as this call: their ids are not reused within it
    for t in tests:
        st, on, dec = _test_status(t, mine, current, tcs, seen)
        statuses[t] = st
        platforms |= on
        for p, rec in dec.items():  # the newest record that decided a test there
            if p not in deciding or rec.date > deciding[p].date:
                deciding[p] = rec
    per_platform = {}
    for p in dict.fromkeys(r.platform for r in mine):
        on_p = [r for r in mine if r.platform == p]
        per_platform[p] = _platform_state({t: _test_status(t, on_p, current, tcs, seen)[0] for t in tests}, p)
    counts = {s: sum(1 for v in statuses.values() if v == s) for s in set(statuses.values())}
    n = len(tests)
    needs_gpu = [t for t, s in statuses.items() if s == "needs-gpu"]
    changes: list[str] = []
    invalid = [r for r in mine if r.source_hash != current or not tcs.ok(r)]
    if counts.get("failed"):
        state = "failed"
        detail = f"{counts['failed']}/{n} test(s) failing at the current sources"
    elif counts.get("passed", 0) == n:
        state = "fresh"
        detail = f"{n}/{n} passed at the current sources ({', '.join(sorted(platforms))})"
    elif counts.get("stale"):
        state = "stale"
        changes = _changes(invalid[-1], current, files, tcs) if invalid else []
        detail = f"{counts['stale']}/{n} test(s) passed only before: {'; '.join(changes)}"
    else:
        state = "missing"
        detail = "never run" if not mine else f"{counts.get('passed', 0)}/{n} passed at the current sources"
    if needs_gpu and state != "failed":
        detail += f"; {len(needs_gpu)} need a GPU (only skipped so far)"
    here = provenance.checkout_id(repo_root(reg_or_root))
    evidence = {p: deciding[p].evidence(here) for p in sorted(deciding) if p in platforms or state == "failed"}
    return GateState(variant.id, state, detail, statuses, current, mine[-1].source_hash if mine else None,
                     mine[-1].date if mine else None, sorted(platforms), needs_gpu, changes,
                     {p: dict(tcs.current(p) or {}) for p in sorted(platforms)}, evidence, per_platform)


def known_bad(variant: Any, toolchains: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One message per declared known-bad range a toolchain (``toolchains``: where -> toolchain) falls in."""
    out = []
    for kb in variant.gate.known_bad if variant.gate else []:
        for where, tc in toolchains.items():
            v = tc.get(kb.package)
            if provenance.in_range(v, kb.versions):
                out.append(f"{kb.package} {v} ({where}) is in the known-bad range {kb.versions}: {kb.reason}")
    return out


def gate_states(reg: Any, ledger: str | Path | None = None) -> dict[str, GateState]:
    """Gate state of every variant that declares gate tests, by variant id (see the module doc)."""
    with one_pass():  # every gate of this pass shares the file-system lookups; a file changed since is seen
        records, problems = read_ledger_diagnostics(ledger or ledger_path(reg))
        tcs = Toolchains(records)
        out = States((vid, state_of(reg, v, records, tcs)) for vid, v in reg.variants.items() if declared_tests(v))
        out.problems = problems
        return out


def gate_findings(variants: Iterable[Any], states: Mapping[str, GateState],
                  local_toolchain: Mapping[str, Any] | None = None,
                  platform: str | None = None) -> list[tuple[str, Any, tuple, str]]:
    """(code, variant, TOML key, message) of the gate rule over the variants a launch switches on: ``gate``
    for a default-on variant with code or gate tests whose gate is not fresh (on ``platform``, where it runs
    there), ``gate-unverified``, and ``known-bad`` for a toolchain in a ``gate.known_bad`` range. Warnings."""
    here = dict(local_toolchain) if local_toolchain is not None else provenance.toolchain()
    out: list[tuple[str, Any, tuple, str]] = []
    for v in variants:
        st = states.get(v.id)
        if v.gate and v.gate.known_bad:
            tcs = {"installed here": here, **{f"gate passed on {p}": tc for p, tc in (st.toolchains if st else {}).items()}}
            out += [("known-bad", v, ("gate", "known_bad"), f"variant '{v.id}' ({v.knob}): {m}") for m in known_bad(v, tcs)]
        if v.status.state != "default-on":
            continue
        has_code = bool(v.implementation.module)
        if not declared_tests(v):
            if has_code:
                out.append(("gate", v, ("implementation",), f"default-on variant '{v.id}' ({v.knob}): no gate: it "
                            "runs this project's code but declares no gate tests ([variant.gate] tests)"))
            continue
        impl = v.implementation  # runs on ``platform``: its declared platforms admit it
        runs_there = platform is not None and bool(impl.module) and platform_admits(list(impl.platforms), platform)
        if st is not None and runs_there:
            state, detail = st.on(platform)
            if state != "fresh":
                out.append(("gate", v, ("gate",), f"default-on variant '{v.id}' ({v.knob}): gate {state} on "
                            f"{platform} ({detail}); run `r9kctl gate {v.id}` there"))
            elif (unverified := imported_only_on(st, platform)) and not envvars.ACCEPT_IMPORTED_GATES.on():
                out.append(("gate-unverified", v, ("gate",), f"default-on variant '{v.id}' ({v.knob}): gate fresh "
                            f"on {platform} only on imported records ({'; '.join(unverified)}): nothing here ran "
                            f"them, so a strict launch refuses; run `r9kctl gate {v.id}` there, or accept them "
                            f"with {envvars.ACCEPT_IMPORTED_GATES.name}=1"))
            continue
        if st is None or st.state != "fresh":
            state = st.state if st else "missing"
            detail = f"{st.label()}: {st.detail}" if st else "no recorded result"
            out.append(("gate", v, ("gate",), f"default-on variant '{v.id}' ({v.knob}): gate {state} ({detail}); "
                        f"run `r9kctl gate {v.id}`"))
    return out


def imported_only_on(st: GateState, platform: str) -> list[str]:
    """``platform: evidence`` of each counted record for ``platform`` when all are imports, else []."""
    ev = {p: e for p, e in st.evidence.items() if platform_matches(p, platform)}
    unverified = [f"{p}: {e}" for p, e in ev.items() if e.endswith("unverified")]
    return unverified if ev and len(unverified) == len(ev) else []


def summary(variants: Iterable[Any], states: Mapping[str, GateState], platform: str | None) -> str:
    """One line over the gated variants a profile switches on: fresh (ran here, elsewhere, imported only),
    not fresh, and with no record on the platform."""
    here, elsewhere, imported, other, none = [], [], [], [], []
    for v in variants:
        st = states.get(v.id)
        if st is None:
            continue
        state, _ = st.on(platform)
        on_p = {p: e for p, e in st.evidence.items() if platform is None or platform_matches(p, platform)}
        if platform is not None and not any(platform_matches(p, platform) for p in st.per_platform):
            none.append(v.id)
        elif state == "fresh" and RAN_HERE in on_p.values():
            here.append(v.id)
        elif state == "fresh" and any(e.startswith(RAN_ELSEWHERE) for e in on_p.values()):
            elsewhere.append(v.id)
        elif state == "fresh":
            imported.append(v.id)
        else:
            other.append(f"{v.id} {state}")
    parts = [f"{len(here)} fresh (ran here)"]
    if elsewhere:
        parts.append(f"{len(elsewhere)} fresh on records that ran elsewhere (came with the ledger): "
                     f"{', '.join(elsewhere)}")
    if imported:
        kinds = sorted({e for v in imported for e in states[v].evidence.values() if e.endswith("unverified")})
        parts.append(f"{len(imported)} fresh only on imported evidence ({'; '.join(kinds)}): {', '.join(imported)}")
    if other:
        parts.append(f"not fresh: {', '.join(other)}")
    if none:
        parts.append(f"{len(none)} with no record on {platform}: {', '.join(none)}")
    return f"gates{f' on {platform}' if platform else ''}: " + "; ".join(parts)
