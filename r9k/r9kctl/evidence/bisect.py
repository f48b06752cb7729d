"""``r9kctl bisect``: find the knob whose change moved a result between two profiles.

The variants whose values differ between the two profiles (resolved at one TP size) are the candidates,
grouped where ``requires``/``conflicts`` link them. Each step is a complete configuration written as a
resolved manifest: ``binary`` mode switches the first K groups to the bad values (``p0`` good ... ``pM`` bad)
and binary-searches K; ``each`` mode switches one group at a time. A step is classified against ``p0`` by
``mcnemar`` (p < alpha and worse), ``accuracy`` (``threshold`` points lower) or ``outputs`` (identical share
below ``threshold``). The directory holds ``plan.json``, ``manifests/`` and ``results/``; the status is
recomputed from the result files there, so steps can be run by hand or by :func:`run_end_to_end`.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from ...registry import envvars, fileio, redact
from ...registry.origin import Origin

from . import mcnemar, results
from .record import api_base, record
from .dataset import load_dataset
from .serve_bench import stop

CRITERIA = ("mcnemar", "accuracy", "outputs")
MODES = ("binary", "each")


class BisectError(RuntimeError):
    pass


@dataclass
class Group:
    variants: list[str]
    knobs: list[str]
    good: dict[str, str | None]  # knob -> value in the good profile
    bad: dict[str, str | None]  # knob -> value in the bad profile

    def label(self) -> str:
        shown = lambda v: "(unset)" if v is None else repr(v) if v == "" else v  # noqa: E731
        return ", ".join(f"{k}: {shown(self.good[k])} -> {shown(self.bad[k])}" for k in self.knobs)


@dataclass
class Plan:
    good: str
    bad: str
    tp: int
    mode: str
    criterion: str
    alpha: float
    threshold: float | None
    groups: list[Group]
    steps: dict[str, list[int]]  # step name -> indices of the groups switched to bad values
    dataset: str | None = None
    problems: dict[str, list[str]] = field(default_factory=dict)  # step -> resolve errors

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Plan":
        d = dict(d)
        d["groups"] = [Group(**g) for g in d["groups"]]
        return cls(**d)

    @property
    def good_step(self) -> str:
        return "p0"

    @property
    def bad_step(self) -> str:
        return f"p{len(self.groups)}"


def _groups(reg: Any, differing: list[str]) -> list[list[str]]:
    """The connected components of ``differing`` under requires/conflicts, each and all in registry order."""
    order = {vid: i for i, vid in enumerate(reg.variants)}
    groups: list[set[str]] = []
    for vid in differing:
        v = reg.variants[vid]
        linked = {vid} | {o.id for o in map(reg.find_variant, [*v.requires, *v.conflicts])
                          if o is not None and o.id in differing}
        touching = [g for g in groups if g & linked]
        groups = [g for g in groups if not g & linked] + [linked.union(*touching)]
    return sorted((sorted(g, key=order.__getitem__) for g in groups), key=lambda g: order[g[0]])


def step_set(reg: Any, plan: Plan, step: str):
    """The resolved set of one step: the good profile with the step's groups at the bad values."""
    from ...registry.resolve import resolve

    sets: dict[str, str] = {}
    unset: list[str] = []
    for gi in plan.steps[step]:
        for knob, val in plan.groups[gi].bad.items():
            (unset.append(knob) if val is None else sets.__setitem__(knob, val))
    rs = resolve(reg, plan.good, tp=plan.tp, env={}, sets=sets)
    for knob in unset:  # `--set` cannot express "not set"; the resolved item is patched instead
        r = rs.items[reg.variant(knob).id]
        r.override(None, Origin("override", detail="bisect (unset, as in the bad profile)"))
    return rs


def make_plan(reg: Any, good: str, bad: str, *, tp: int | None = None, mode: str = "binary",
              criterion: str = "mcnemar", alpha: float = 0.05, threshold: float | None = None,
              dataset: str | None = None) -> Plan:
    from ...registry.resolve import resolve

    if mode not in MODES:
        raise BisectError(f"unknown mode {mode!r} ({', '.join(MODES)})")
    if criterion not in CRITERIA:
        raise BisectError(f"unknown criterion {criterion!r} ({', '.join(CRITERIA)})")
    for name in (good, bad):
        if name not in reg.profiles:
            raise BisectError(f"unknown profile {name!r}")
    g = resolve(reg, good, tp=tp, env={})
    tp = g.tp
    b = resolve(reg, bad, tp=tp, env={})
    errs = [d.format() for rs in (g, b) for d in rs.diagnostics if d.level == "error"]
    if errs:
        raise BisectError("cannot resolve the profiles:\n" + "\n".join(errs))
    if g.model != b.model:
        raise BisectError(f"the profiles serve different models ({g.model} vs {b.model}); a knob bisect needs one")
    differing = [vid for vid in g.items if g.items[vid].value != b.items[vid].value]
    if not differing:
        raise BisectError(f"{good} and {bad} resolve to the same values at TP{tp}: nothing to bisect")
    groups = []
    for ids in _groups(reg, differing):
        knobs = [reg.variants[i].knob for i in ids]
        groups.append(Group(ids, knobs, {k: g.items[i].value for k, i in zip(knobs, ids)},
                            {k: b.items[i].value for k, i in zip(knobs, ids)}))
    m = len(groups)
    steps = {f"p{k}": list(range(k)) for k in range(m + 1)}
    if mode == "each":
        steps.update({f"g{i}": [i] for i in range(m)})
    if threshold is None:
        threshold = {"mcnemar": None, "accuracy": 1.0, "outputs": 1.0}[criterion]
    return Plan(good, bad, tp, mode, criterion, alpha, threshold, groups, steps, dataset)


def write_plan(reg: Any, plan: Plan, directory: str | Path, replace: bool = False) -> Path:
    """Write the plan and its step manifests; refuses a directory that holds a plan already (its recorded
    results belong to that plan) unless ``replace`` (see :func:`set_aside_results`)."""
    d = Path(directory)
    if (d / "plan.json").exists() and not replace:
        results_there = sorted((d / "results").glob("*.jsonl")) if (d / "results").is_dir() else []
        raise BisectError(f"{d / 'plan.json'}: a bisect plan exists here already"
                          + (f" with {len(results_there)} recorded result(s)" if results_there else "")
                          + "; use another --dir, or --force to replace the plan (results of the old plan are "
                            "then moved to results.old/)")
    (d / "manifests").mkdir(parents=True, exist_ok=True)
    (d / "results").mkdir(exist_ok=True)
    needed = ([plan.good_step, plan.bad_step] + [f"g{i}" for i in range(len(plan.groups))]
              if plan.mode == "each" else list(plan.steps))
    for step in needed:
        rs = step_set(reg, plan, step)
        errs = [x.format() for x in rs.diagnostics if x.level == "error"]
        if errs:
            plan.problems[step] = errs
        manifest = rs.to_manifest()
        manifest["bisect"] = {"step": step, "good": plan.good, "bad": plan.bad,
                              "switched": [plan.groups[i].knobs for i in plan.steps[step]]}
        fileio.atomic_write(d / "manifests" / f"{step}.json", json.dumps(manifest, indent=2) + "\n", "manifest")
    fileio.atomic_write(d / "plan.json", json.dumps(plan.to_json(), indent=2) + "\n", "bisect plan")
    return d


def set_aside_results(directory: str | Path) -> Path | None:
    """Move the results of a plan about to be replaced to ``results.old`` (``results.old2``...): they
    belong to the old plan's steps. Returns where they went (None when there were none)."""
    d = Path(directory)
    if not (d / "results").is_dir() or not any((d / "results").iterdir()):
        return None
    old, n = d / "results.old", 1
    while old.exists():
        n += 1
        old = d / f"results.old{n}"
    (d / "results").rename(old)
    return old


def load_plan(directory: str | Path) -> Plan:
    p = Path(directory) / "plan.json"
    if not os.path.lexists(p):  # a broken link or a loop is reported as what it is
        raise BisectError(f"{p}: no bisect plan here (run r9kctl bisect plan first)")

    data = fileio.read_json(p, "bisect plan", expect=dict)
    try:
        return Plan.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        what = f"missing field {exc}" if isinstance(exc, KeyError) else " ".join(str(exc).split())
        raise fileio.error(p, "bisect-plan", f"not a usable bisect plan ({what})", 1, 1) from None


@dataclass
class StepVerdict:
    step: str
    bad: bool
    summary: str


@dataclass
class Status:
    verdicts: dict[str, StepVerdict]
    next_step: str | None  # the step to evaluate next; None when done
    culprits: list[int]  # group indices named
    done: bool
    message: str


def classify(plan: Plan, step: str, good: results.ResultFile, other: results.ResultFile) -> StepVerdict:
    cmp = mcnemar.compare(good, other)
    acc = f"{100 * cmp.b_accuracy:.2f}% vs {100 * cmp.a_accuracy:.2f}%, b/c {cmp.b}/{cmp.c}, p {cmp.p_value:.3g}"
    if plan.criterion == "mcnemar":
        bad = cmp.p_value < plan.alpha and cmp.c < cmp.b
    elif plan.criterion == "accuracy":
        bad = 100 * (cmp.a_accuracy - cmp.b_accuracy) >= plan.threshold
    else:
        if cmp.identical_share is None:
            raise BisectError("criterion 'outputs' needs output text or hashes in the result files")
        bad = cmp.identical_share < plan.threshold
        acc += f", identical {100 * cmp.identical_share:.1f}%"
    return StepVerdict(step, bad, acc)


def status(directory: str | Path) -> tuple[Plan, Status]:
    d = Path(directory)
    plan = load_plan(d)
    have = {p.stem: p for p in (d / "results").glob("*.jsonl")}
    m = len(plan.groups)
    verdicts: dict[str, StepVerdict] = {}
    if plan.good_step not in have:
        return plan, Status(verdicts, plan.good_step, [], False, "evaluate the good end first")
    good = results.load(have[plan.good_step])
    verdicts[plan.good_step] = StepVerdict(plan.good_step, False, f"{100 * good.accuracy:.2f}% (reference)")
    verdicts.update({step: classify(plan, step, good, results.load(path)) for step, path in have.items()
                     if step != plan.good_step and step in plan.steps})
    if plan.bad_step not in verdicts:
        return plan, Status(verdicts, plan.bad_step, [], False, "evaluate the bad end")
    if not verdicts[plan.bad_step].bad:
        return plan, Status(verdicts, None, [], True,
                            f"the bad end does not differ from the good end by the '{plan.criterion}' criterion "
                            f"({verdicts[plan.bad_step].summary}): nothing to bisect")
    if plan.mode == "each":
        todo = [f"g{i}" for i in range(m) if f"g{i}" not in verdicts]
        culprits = [i for i in range(m) if f"g{i}" in verdicts and verdicts[f"g{i}"].bad]
        if todo:
            return plan, Status(verdicts, todo[0], culprits, False, f"{len(todo)} group(s) left to evaluate")
        msg = ("moved the result on its own: " + "; ".join(plan.groups[i].label() for i in culprits) if culprits
               else "no single group moves the result on its own (an interaction of several)")
        return plan, Status(verdicts, None, culprits, True, msg)
    known = {int(s[1:]): v.bad for s, v in verdicts.items() if s.startswith("p")}
    hi = min(k for k, bad in known.items() if bad)
    lo = max(k for k, bad in known.items() if not bad and k < hi)
    inconsistent = [k for k, bad in known.items() if (bad and k < hi) or (not bad and k > hi)]
    note = (f" (steps {', '.join(f'p{k}' for k in sorted(inconsistent))} disagree with a single change point: "
            "more than one knob matters, or the criterion is noisy; try --mode each)") if inconsistent else ""
    if hi - lo == 1:
        return plan, Status(verdicts, None, [lo], True,
                            f"first bad step p{hi}; it switched group {lo}: {plan.groups[lo].label()}{note}")
    nxt = (lo + hi) // 2
    return plan, Status(verdicts, f"p{nxt}", [], False, f"searching between p{lo} (good) and p{hi} (bad){note}")


def _wait_ready(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise BisectError(f"the launch command exited with status {proc.returncode} before serving")
        try:
            with urllib.request.urlopen(api_base(url) + "/models", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise BisectError(f"{url} did not answer within {timeout_s:.0f} s")


def run_end_to_end(reg: Any, directory: str | Path, *, launch: str, url_template: str, dataset: str,
                   port: int = 8000, ready_timeout_s: float = 900.0, max_steps: int = 64,
                   say: Callable[[str], None] = print, record_kwargs: dict | None = None) -> Status:
    """Launch, evaluate and stop each step the search asks for, until it concludes. ``launch``: a command line
    with ``{manifest}``, ``{port}``, ``{profile}``, ``{tp}`` (the step's knobs also in its environment);
    ``url_template``: the server's URL with ``{port}``."""
    d = Path(directory)
    plan, st = status(d)
    ds = load_dataset(dataset)
    for _ in range(max_steps):
        if st.done:
            return st
        step = st.next_step
        manifest = (d / "manifests" / f"{step}.json").resolve()
        if not manifest.exists():  # plans written without this step's manifest (none today) are rebuilt
            write_plan(reg, plan, d, replace=True)
        data = fileio.read_json(manifest, "step manifest", expect=dict)
        env = dict(os.environ)
        # a credential the manifest names by reference comes from this environment (the plugin checks it)
        env.update({k: v for k, v in data.get("extra_env", {}).items() if not redact.is_reference(v)})
        for vid, item in data["values"].items():
            if item["value"] is None:
                env.pop(item["knob"], None)
            else:
                env[item["knob"]] = item["value"]
        env.update({envvars.MANIFEST.name: str(manifest), envvars.PROFILE.name: plan.good, envvars.TP.name: str(plan.tp)})
        cmd = launch.format(manifest=shlex.quote(str(manifest)), port=port, profile=plan.good, tp=plan.tp)
        say(f"[{step}] launch: {cmd}")
        log = fileio.open_for_writing(d / "results" / f"{step}.launch.log", what="log file")
        proc = subprocess.Popen(shlex.split(cmd), env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            url = url_template.format(port=port)
            _wait_ready(url, proc, ready_timeout_s)
            partial = d / "results" / f"{step}.partial"
            record(ds, url, partial, label=f"bisect {step}", progress=None,
                   extra_header={"bisect_step": step, "manifest_hash": data.get("hash")}, **(record_kwargs or {}))
            # only complete files count
            fileio.move_into_place(partial, d / "results" / f"{step}.jsonl", "result file")
        finally:
            stop(proc, grace_s=60)  # the launch's own process group (started with a new session)
            log.close()
        plan, st = status(d)
        v = st.verdicts.get(step)
        say(f"[{step}] {'BAD ' if v and v.bad else 'good'} {v.summary if v else ''}")
    raise BisectError(f"no conclusion after {max_steps} steps")


def describe_step(plan: Plan, step: str, directory: str | Path, url: str = "URL") -> str:
    d = Path(directory)
    switched = [plan.groups[i] for i in plan.steps[step]]
    lines = [f"step {step}: {plan.good} with {len(switched)} group(s) switched to {plan.bad}'s values"]
    lines += [f"    {g.label()}" for g in switched]
    sets = " ".join(f"--set {k}={v}" for g in switched for k, v in g.bad.items() if v is not None)
    unset = [k for g in switched for k, v in g.bad.items() if v is None]
    lines.append(f"  launch: {envvars.MANIFEST.name}={d / 'manifests' / (step + '.json')} vllm serve ...   "
                 f"(or: r9kctl launch --profile {plan.good} --tp {plan.tp} {sets}"
                 + (f"; and unset {' '.join(unset)}" if unset else "") + ")")
    lines.append(f"  record: r9kctl eval record --url {url} --dataset {plan.dataset or 'FILE'} "
                 f"--out {d / 'results' / (step + '.jsonl')}")
    return "\n".join(lines)

