"""Gate results from a JUnit XML file, for runs on a machine where the registry tools do not run.

The lent GPU machine has pytest but not this project's dependencies (pydantic...), so ``r9kctl gate``
cannot run there. Instead the gate tests run there under plain pytest with
``--junitxml=FILE -o junit_family=xunit1`` (xunit1 keeps each test's file), and
``r9kctl gate --import-junit FILE --platform cuda-h200`` turns the file into ledger records here, one per
variant whose declared gate tests it covers, at the variant's *current* source hash: import right after
the run, from the same tree that was sent to the machine.
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from r9k.registry import ledger as L

from .pytest_plugin import matches


def read_junit(path: str | Path) -> dict[str, str]:
    """pytest node id -> outcome (passed, failed, error, skipped, needs-gpu) for every test case."""
    from r9k.registry import fileio

    root = fileio.read_xml(path, "JUnit XML file")
    if root.tag not in ("testsuites", "testsuite"):
        raise fileio.error(path, "junit", f"not a JUnit XML file: the root element is <{root.tag}>, not "
                           "<testsuites> or <testsuite>", 1, 1)
    out: dict[str, str] = {}
    for case in root.iter("testcase"):
        name = case.get("name", "")
        file = case.get("file")
        classname = case.get("classname", "")
        if not file:  # xunit2: module path only; assume no class
            file = classname.replace(".", "/") + ".py"
            cls = None
        else:
            mod = file[:-3].replace("/", ".") if file.endswith(".py") else file
            cls = classname[len(mod) + 1:] if classname.startswith(mod + ".") else None
        nodeid = f"{file}::{cls}::{name}" if cls else f"{file}::{name}"
        if case.find("failure") is not None:
            outcome = L.FAILED
        elif case.find("error") is not None:
            outcome = L.ERROR
        elif case.find("skipped") is not None:
            msg = (case.find("skipped").get("message") or "").lower()
            outcome = L.NEEDS_GPU if "gpu" in msg else L.SKIPPED
        else:
            outcome = L.PASSED
        out[nodeid] = outcome
    return out


def records_from_junit(reg: Any, outcomes: dict[str, str], platform: str, note: str | None = None) -> list:
    """One GateRecord per variant with declared tests that the outcomes cover."""
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    records = []
    for vid, v in sorted(reg.variants.items()):
        tests = L.declared_tests(v)
        if not tests:
            continue
        mine = {n: o for n, o in outcomes.items() if any(matches(n, t) for t in tests)}
        if not mine:
            continue
        h, nfiles = L.source_hash(reg, v)
        records.append(L.GateRecord(variant=vid, tests=tests, result=L.summarize(mine), outcomes=mine,
                                    platform=platform, date=date, source_hash=h, files=nfiles,
                                    note=note or "imported from JUnit XML"))
    return records
