"""The one availability rule: can a variant a profile switches on run, and if not, why.

A non-stock variant runs when its implementation (``implementation.module``) exists and is importable (found,
not imported), exists for the profile's platform (``implementation.platforms``, or its family), has an adapter
for its extension point (``registry/adapters.toml``) whose module exists, and its declared gate tests exist.
Every caller (validate, launch, the control panel, the plugin's ``DispatchTable.plan``) applies this rule and
nothing else; the result per variant is one :class:`r9k.registry.manifest.Impl` over the items of a
:class:`r9k.registry.manifest.Manifest`. Imports no torch, vLLM, textual or rich.
"""
from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional
from . import envvars

from .manifest import Impl, Item, Manifest

ADAPTERS_FILE = "adapters.toml"
STATES = tuple(Impl)
INSTALLS = ("register_oot", "call")


@dataclass(frozen=True)
class Adapter:
    extension_point: str
    ops: tuple[str, ...]
    install: str
    vllm_module: str
    vllm_class: str
    adapter: str  # "module:attr"
    models: tuple[str, ...] = ()
    eligibility: str = ""
    line: Optional[int] = None

    @property
    def adapter_module(self) -> str:
        return self.adapter.partition(":")[0]


@dataclass
class Adapters:
    """The parsed ``registry/adapters.toml``."""

    path: Optional[Path]
    adapters: dict[str, Adapter] = field(default_factory=dict)  # extension point -> adapter
    missing: dict[str, str] = field(default_factory=dict)  # extension point -> why it has no adapter
    problems: list[tuple[str, Optional[int], Optional[int], str]] = field(default_factory=list)  # (file, line, col, message)


_ADAPTERS_CACHE: dict[tuple, Adapters] = {}


def default_repo_root() -> Path:
    """Where gate-test paths are relative to: ``envvars.REPO_ROOT``, else the package ``r9k/`` holding this
    code's ``kernels/`` (gate tests are code: a registry tree kept elsewhere still finds them)."""
    forced = envvars.REPO_ROOT.get()
    if forced:
        return Path(forced).resolve()
    return Path(__file__).resolve().parent.parent


def adapters_path() -> Path:
    """``adapters.toml`` beside this module: a fact of the installed code, not of a registry tree kept elsewhere."""
    return Path(__file__).resolve().parent / ADAPTERS_FILE


def load_adapters(path: Optional[Path] = None) -> Adapters:
    """Parse the adapter table (default :func:`adapters_path`; cached per file version). Problems go to
    :attr:`Adapters.problems`, never raised: an unreadable file means "no adapter anywhere"."""
    path = Path(path) if path else adapters_path()
    try:
        st = path.stat()
        key = (str(path), st.st_mtime_ns, st.st_size)
    except OSError:
        key = (str(path), None, None)
    if key in _ADAPTERS_CACHE:
        return _ADAPTERS_CACHE[key]
    out = Adapters(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except OSError as exc:
        out.problems.append((str(path), None, None, f"cannot read the adapter table: {exc.strerror or exc}"))
        data = {}
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+), column (\d+)", str(exc))
        out.problems.append((str(path), int(m.group(1)) if m else None, int(m.group(2)) if m else None,
                             f"TOML syntax: {re.sub(r' [(]at line.*$', '', str(exc))}"))
        data = {}
    need = ("extension_point", "ops", "install", "vllm_module", "vllm_class", "adapter")
    for i, a in enumerate(data.get("adapter", [])):
        ep = a.get("extension_point", "")
        ln = next((n for n, line in enumerate(text.splitlines(), 1) if f'"{ep}"' in line), None) if ep else None
        loc = (str(path), ln, 1 if ln else None)
        lacking = [k for k in need if not a.get(k)]
        if lacking:
            out.problems.append((*loc, f"adapter #{i + 1} lacks {', '.join(lacking)}"))
            continue
        if a["install"] not in INSTALLS:
            out.problems.append((*loc, f"{ep}: install {a['install']!r} is not one of {', '.join(INSTALLS)}"))
            continue
        if ep in out.adapters:
            out.problems.append((*loc, f"{ep} has two adapters"))
            continue
        out.adapters[ep] = Adapter(ep, tuple(a["ops"]), a["install"], a["vllm_module"], a["vllm_class"],
                                   a["adapter"], tuple(a.get("models", ())), a.get("eligibility", ""), ln)
    for n in data.get("no_adapter", []):
        ep = n.get("extension_point")
        if ep:
            out.missing[ep] = n.get("reason", "")
    _ADAPTERS_CACHE[key] = out
    return out


# ----------------------------------------------------------------------------------------- platforms

def platform_family(platform: Optional[str]) -> Optional[str]:
    """``cpu``, ``cuda`` or ``rocm`` (None when unknown). Triton's interpreter is the ``cpu`` family."""
    if not platform:
        return None
    p = platform.lower()
    if p in ("cpu", "interpret", "triton-interpret") or p.startswith("cpu-"):
        return "cpu"
    if p.startswith(("cuda", "h100", "h200", "b200", "a100")):
        return "cuda"
    if p.startswith(("rocm", "gfx", "mi300", "r9700")):
        return "rocm"
    return p.split("-")[0]


def platform_admits(declared: list[str], platform: Optional[str]) -> bool:
    """Whether an implementation that has run on ``declared`` exists for ``platform``: the same name, a
    name one is a refinement of (``cuda`` / ``cuda-h200``), or the CPU and Triton's interpreter."""
    if platform is None or not declared:
        return True  # no platform stated by the profile / no restriction declared
    cpu = platform_family(platform) == "cpu"
    return any(d == platform or platform.startswith(d + "-") or d.startswith(platform + "-")
               or (cpu and platform_family(d) == "cpu") for d in declared)


# ----------------------------------------------------------------------------------------- existence

_FILES: dict[str, Optional[str]] = {}


def _file_text(path: Path) -> Optional[str]:
    key = str(path)
    if key not in _FILES:
        try:
            _FILES[key] = path.read_text(encoding="utf-8")
        except OSError:
            _FILES[key] = None
    return _FILES[key]


def missing_tests(tests: list[str], repo_root: Path) -> list[str]:
    """The gate test ids among ``tests`` whose file or test function does not exist."""
    out = []
    for t in tests:
        file, _, name = t.partition("::")
        text = _file_text(repo_root / file)
        if text is None:
            out.append(f"{t} (no file {file})")
            continue
        func = re.sub(r"\[.*$", "", name.split("::")[-1])
        if func and func not in _defs(text):
            out.append(f"{t} (no test {func} in {file})")
    return out


_DEFS: dict[str, set] = {}  # a file's text -> the names its def lines define
_DEF_LINE = re.compile(r"^\s*(?:async\s+)?def (\w+)\s*\(", re.M)


def _defs(text: str) -> set:
    """The names a file's ``def`` lines define, scanned once per text."""
    if text not in _DEFS:
        _DEFS[text] = set(_DEF_LINE.findall(text))
    return _DEFS[text]


def module_exists(name: str) -> bool:
    """Whether ``name`` is importable (``importlib.util.find_spec``), without importing a parent package that
    is not imported yet: its finders are asked with its search path."""
    try:
        return _spec(name) is not None
    except (ImportError, ValueError):
        return False


def _spec(name: str):
    parent = name.rpartition(".")[0]
    if not parent or parent in sys.modules:
        return importlib.util.find_spec(name)
    pspec = _spec(parent)
    if pspec is None or pspec.submodule_search_locations is None:
        return None  # find_spec: ModuleNotFoundError (no such parent, or not a package)
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(name, pspec.submodule_search_locations) if find is not None else None
        if spec is not None:
            return spec
    return None


# ----------------------------------------------------------------------------------------- the rule

@dataclass
class Decision:
    """Which implementation runs for one variant, and why: made by :func:`decide`, refined by the plugin's
    ``DispatchTable`` with what only a running process knows, and shown by the plugin's report."""

    variant_id: str
    knob: str
    value: Optional[str]
    state: Impl
    reason: str = ""  # why it falls back (state "fallback")
    extension_point: Optional[str] = None
    op: Optional[str] = None
    module: Optional[str] = None
    adapter: Optional[Adapter] = None  # the plugin's adapter for the extension point (adapters.toml)
    launcher: Optional[str] = None  # a launcher knob: the vLLM flag or variable r9kctl launch sets ("--max-num-seqs")
    used: Optional[str] = None  # at model construction: the implementation a layer got
    layers: int = 0  # how many layers asked for it
    fn: Optional[Callable] = None  # the kernel a layer calls (state "fused", once a layer asked)

    @property
    def pluggable(self) -> bool:
        """Whether the plugin has an adapter for the variant's extension point (registry/adapters.toml)."""
        return self.adapter is not None

    def describe(self) -> str:
        """The 'implementation in use' column of the startup table and the status."""
        if self.state is Impl.FUSED:
            got = self.used or (f"{self.module}{':' + self.op if self.op else ''} (r9k, installed; used when the "
                                "model is built)")
            return f"{got} via {self.extension_point}"
        if self.state is Impl.STOCK:
            return "stock (vLLM's own path; nothing installed)"
        if self.state is Impl.FALLBACK:
            return f"stock (fallback: {self.reason})"
        if self.state is Impl.ENV and self.launcher:
            if self.launcher.startswith("not applied"):
                return self.launcher
            return f"{self.launcher}, set by r9kctl launch (what was applied: r9kctl status)"
        if self.state is Impl.ENV:
            return "exported to the environment (read by code outside this project)"
        return "unset (implementation default)"


def why_not(variant, platform: Optional[str], adapters: Adapters, repo_root: Path) -> str:
    """Empty when this project's implementation of ``variant`` (a manifest item's
    :class:`~r9k.registry.manifest.Facts`) can run for ``platform``; else every reason it cannot, joined by "; "."""
    impl = variant.implementation
    ep = impl.extension_point
    if impl.module is None:
        return "its implementation is outside this project"
    reasons = []
    if not module_exists(impl.module):
        reasons.append(f"module {impl.module} does not exist")
    if not platform_admits(list(impl.platforms), platform):
        reasons.append(f"no implementation for platform '{platform}' (it runs on {', '.join(impl.platforms)})")
    adapter = adapters.adapters.get(ep or "")
    if adapter is None:
        why = adapters.missing.get(ep or "")
        reasons.append(f"the plugin has no adapter for {ep}" + (f" ({why})" if why else ""))
    elif impl.op and impl.op not in adapter.ops:
        reasons.append(f"the adapter for {ep} runs {', '.join(adapter.ops)}, not op {impl.op}")
    elif not module_exists(adapter.adapter_module):
        reasons.append(f"the adapter module {adapter.adapter_module} for {ep} does not exist")
    tests = list(variant.gate_tests)
    if not tests:
        reasons.append("no gate tests declared")
    else:
        gone = missing_tests(tests, repo_root)
        if gone:
            reasons.append(f"gate test(s) missing: {', '.join(gone)}")
    return "; ".join(reasons)


def declaration_problems(variants, adapters: Adapters, repo_root: Optional[Path] = None,
                         op_table: Optional[Mapping[str, object]] = None) -> list[tuple[str, str, str]]:
    """``(variant id, field, message)`` for what the TOML declares that does not exist: a module, an op of the op
    table (``op_table``: ``r9k.kernels.ops.load_all()``) or one registered for another variant, a gate test,
    an extension point with no adapter nor ``no_adapter`` entry, an adapter that does not run the variant's op."""
    root = repo_root or default_repo_root()
    out: list[tuple[str, str, str]] = []
    for vid, v in sorted(variants.items()):
        impl = v.implementation
        ep = impl.extension_point
        if impl.module is None:
            if ep not in (None, "env-only"):
                out.append((vid, "extension_point", f"extension point {ep} but no implementation.module"))
            continue
        if not module_exists(impl.module):
            out.append((vid, "module", f"module {impl.module} does not exist"))
        if op_table is not None and impl.op:
            kop = op_table.get(impl.op)
            if kop is None:
                out.append((vid, "op", f"op {impl.op} is not in the op table (r9k.kernels.ops)"))
            elif getattr(kop, "variant", vid) != vid:
                out.append((vid, "op", f"op {impl.op} is registered for variant {kop.variant}"))
        gone = missing_tests(list(v.gate.tests) if v.gate else [], root)
        if gone:
            out.append((vid, "gate", f"gate test(s) missing: {', '.join(gone)}"))
        if ep in (None, "env-only"):
            continue
        a = adapters.adapters.get(ep)
        if a is None and ep not in adapters.missing:
            out.append((vid, "extension_point", f"extension point {ep} has no entry in {ADAPTERS_FILE} "
                        "(neither [[adapter]] nor [[no_adapter]])"))
        elif a is not None:
            if impl.op and impl.op not in a.ops:
                out.append((vid, "extension_point", f"the adapter for {ep} runs {', '.join(a.ops)}, not op {impl.op}"))
            if not module_exists(a.adapter_module):
                out.append((vid, "extension_point", f"adapter module {a.adapter_module} does not exist"))
    return out


def decide(r: Item, platform: Optional[str], adapters: Adapters, repo_root: Path) -> Decision:
    """The decision for one item of a manifest: made here, once, for every caller."""
    v = r.variant
    impl = v.implementation
    ep = impl.extension_point
    out = Decision(v.id, v.knob, r.value, Impl.UNSET, "", ep, impl.op, impl.module, adapters.adapters.get(ep or ""))
    if r.value is None:
        return out
    if r.is_stock or not r.active:
        out.state = Impl.STOCK
    elif ep in (None, "env-only"):
        out.state = Impl.ENV
    elif impl.op and not r.selects_fused:
        out.state, out.reason = Impl.FALLBACK, (f"value {r.value!r} is none of the values that select op {impl.op} "
                                                f"({', '.join(v.fused_values) or 'none'})")
    else:
        reason = why_not(v, platform, adapters, repo_root)
        out.state, out.reason = (Impl.FALLBACK, reason) if reason else (Impl.FUSED, "")
    return out


def plan(m: Manifest, platform: Optional[str] = None, adapters: Optional[Adapters] = None,
         repo_root: Optional[Path] = None, use_profile_platform: bool = True) -> dict[str, Decision]:
    """variant id -> :class:`Decision` for every item of a manifest (on the profile's platform by default)."""
    if platform is None and use_profile_platform:
        platform = m.platform
    adapters = adapters if adapters is not None else load_adapters()
    root = repo_root or default_repo_root()
    return {vid: decide(r, platform, adapters, root) for vid, r in sorted(m.items.items())}


def counts(decisions: Mapping[str, Decision]) -> dict[str, int]:
    return {s: sum(d.state is s for d in decisions.values()) for s in Impl}


def summary_line(decisions: Mapping[str, Decision]) -> str:
    """``N installed, M fall back, K env-only`` (the numbers validate and the plugin's table print)."""
    c = counts(decisions)
    return (f"{c[Impl.FUSED]} installed, {c[Impl.FALLBACK]} fall back to vLLM's path, {c[Impl.ENV]} env-only "
            "(read by code outside this project)")
