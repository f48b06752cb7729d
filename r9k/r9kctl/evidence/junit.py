"""Gate results from a JUnit XML file (``r9kctl gate --import-junit FILE``), for runs on a machine where the
registry tools do not run (plain pytest with ``--junitxml=FILE -o junit_family=xunit1`` plus a provenance file).

The XML becomes ledger records only after checking that the provenance is readable, that every test case
names a test file and function of this tree with the provenance's hash (and every file each covered gate
depends on matches too), and that every case is an item pytest collects here. Any failed check refuses the
whole file with one located line. A declared test passes only when all its parametrizations passed; the
record carries the hash from the provenance's (checked) file hashes and its toolchain, platform and commit.
"""
from __future__ import annotations

import ast
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import re
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape as xml_escape
from pathlib import Path
from typing import Any, Iterable

from ...registry import envvars, fileio
from ...registry import ledger as L
from ...registry import provenance as P


class ImportRefused(ValueError):
    """One located line: ``FILE[:LINE]: error[KIND]: message``."""


def _refuse(file: str | Path, kind: str, msg: str, line: int | None = None) -> ImportRefused:
    return ImportRefused(f"{file}{f':{line}' if line else ''}: error[{kind}]: {msg}")


_NAME_ATTR = re.compile(r'<testcase\b[^>]*?\sname="([^"]*)"')


def _case_lines(text: str) -> dict[str, int]:
    """Test case name (as written, XML-escaped) -> the line of its first <testcase>, in one pass over the text."""
    out: dict[str, int] = {}
    for lineno, ln in enumerate(text.splitlines(), 1):
        if "<testcase" in ln:
            for m in _NAME_ATTR.finditer(ln):
                out.setdefault(m.group(1), lineno)
    return out


def _read(path: str | Path) -> tuple[dict[str, tuple[str, int | None]], dict[str, str]]:
    """(pytest node id -> (outcome, line), the suites' <property> name -> value)."""
    text = fileio.read_text(path, "JUnit XML file")  # located errors: missing, binary, not UTF-8, ...
    root = fileio.parse_xml(text, path, "JUnit XML file")
    if root.tag not in ("testsuites", "testsuite"):
        raise fileio.error(path, "junit", f"not a JUnit XML file: the root element is <{root.tag}>, not "
                           "<testsuites> or <testsuite>", 1, 1)
    lines = _case_lines(text)
    props = {p.get("name", ""): p.get("value", "") for p in root.iter("property")
             if p.get("name") != P.STAMP_RAN_ON}  # the suites' (per-case placements are added below)
    out: dict[str, tuple[str, int | None]] = {}
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
        line = lines.get(xml_escape(name, {'"': "&quot;"})) or lines.get(name)
        out[nodeid] = (outcome, line)
        where = [p.get("value") for p in case.iter("property") if p.get("name") == P.STAMP_RAN_ON]
        if where and where[-1] in ("gpu", "cpu"):
            props[f"{P.STAMP_RAN_ON}:{nodeid}"] = where[-1]
    return out, props


def _differs(there: dict[str, str], rel: str, here: str) -> str:
    """How this tree's ``rel`` (sha256 ``here``) fails the provenance's file hashes ``there``."""
    if rel not in there:
        return "is not in the provenance"
    return f"differs from this tree (sha256 {there[rel][:12]} there, {here[:12]} here)"


def _functions(path: Path) -> set[str]:
    """Test function names a file defines (module level and in classes, as ``Class::name``)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {f"{node.name}::{f.name}" for f in node.body
                      if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return names


def collect(root: Path, test_ids: Iterable[str], timeout_s: float = 300) -> dict[str, list[str]]:
    """Declared id -> the pytest items it selects here (``pytest --collect-only`` with the gate plugin)."""
    ids = list(dict.fromkeys(test_ids))
    files = list(dict.fromkeys(L.test_file(t) for t in ids))
    with tempfile.TemporaryDirectory(prefix="r9k-collect-") as tmp:
        events = Path(tmp) / "events.jsonl"
        env = dict(os.environ, **{envvars.GATE_EVENTS.name: str(events), envvars.GATE_SELECT.name: json.dumps(ids)})
        env.setdefault("TRITON_INTERPRET", "1")
        cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "r9k.r9kctl.evidence.pytest_plugin",
               "-p", "no:cacheprovider", "--rootdir", str(root), *(f"{root.name}/{f}" for f in files)]
        r = subprocess.run(cmd, cwd=root.parent, env=env, capture_output=True, text=True, timeout=timeout_s)
        evs = [json.loads(x) for x in events.read_text().splitlines()] if events.exists() else []
    sel = next((e for e in evs if e["event"] == "selected"), None)
    errs = [e for e in evs if e["event"] == "collect-error"]
    if sel is None or errs:
        why = errs[0]["message"] if errs else (r.stdout + r.stderr).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"pytest could not collect the gate tests here ({why if isinstance(why, str) else why[0]})")
    return {t: [i for i in sel["items"] if L.item_of(i, t)] for t in ids}


def import_junit(reg: Any, xml: str | Path, provenance: str | Path | None = None, platform: str | None = None,
                 collected: dict[str, list[str]] | None = None) -> list[L.GateRecord]:
    """Check a JUnit XML file and its provenance against this tree; the records to append (see the module
    doc). Raises ImportRefused with one located line. ``collected`` (tests) replaces the local collection."""
    xml = Path(xml)
    root = L.repo_root(reg)

    try:
        cases, props = _read(xml)
    except fileio.FileError as exc:  # already one located line
        raise ImportRefused(exc.diagnostic.format()) from None
    except OSError as exc:
        raise _refuse(xml, "junit", f"cannot read: {exc.strerror or exc}") from None
    except ET.ParseError as exc:
        raise _refuse(xml, "junit", f"not XML ({exc})", exc.position[0] if exc.position else None) from None
    if not cases:
        raise _refuse(xml, "junit", "no test cases")
    prov_path = Path(provenance) if provenance else xml.with_name("provenance.json")
    if not prov_path.is_file():
        raise _refuse(xml, "provenance", f"no provenance file ({prov_path} does not exist): the GPU run writes "
                      "it beside the XML with `python3 r9k/registry/provenance.py --root r9k --out provenance.json`")
    try:
        prov = P.read(prov_path)
    except OSError as exc:
        raise _refuse(prov_path, "provenance", f"cannot read: {exc.strerror or exc}") from None
    except P.ProvenanceError as exc:
        raise _refuse(prov_path, "provenance", str(exc)) from None
    there: dict[str, str] = prov["files"]
    if platform and platform != prov["platform"]:
        raise _refuse(prov_path, "platform", f"the run was on {prov['platform']}, not {platform}")
    device = prov["toolchain"].get("device") or "cpu"
    if P.platform_name(device, "cuda", interpret=False) != prov["platform"] and \
            P.platform_name(device, "rocm", interpret=False) != prov["platform"] and \
            not (device == "cpu" and prov["platform"] in ("cpu", "cpu-triton-interpret")):
        raise _refuse(prov_path, "provenance", f"platform {prov['platform']} does not match the toolchain's "
                      f"device {device}")
    checks = _check_stamp(xml, prov, props)

    # Every test case names a file inside this tree (no absolute path, no way out through '..').
    for nid, (_o, line) in cases.items():
        f = L.test_file(nid)
        if f.startswith(("/", "\\")) or ".." in Path(f).parts or ":" in f.split("/", 1)[0] \
                or not (root / f).resolve().is_relative_to(root.resolve()):
            raise _refuse(xml, "outside-tree", f"{nid}: file {f} is not a path inside the tree", line)

    # A file named through the package's links (``r9k/kernels/...``: pytest's module path when the project is
    # installed) is the tree's own file (``kernels/...``).
    real = {f: (root / f).resolve().relative_to(root.resolve()).as_posix() for f in {L.test_file(n) for n in cases}}
    renamed = {nid: real[L.test_file(nid)] + nid[len(L.test_file(nid)):] for nid in cases}
    cases = {renamed[n]: c for n, c in cases.items()}
    props = {(k.split(":", 1)[0] + ":" + renamed[k.split(":", 1)[1]]
              if k.startswith(P.STAMP_RAN_ON + ":") and k.split(":", 1)[1] in renamed else k): v
             for k, v in props.items()}

    # Every test case: a test file of this tree, unchanged, and a function it defines.
    local_hash: dict[str, str | None] = {}
    funcs: dict[str, set[str]] = {}
    for nid, (_o, line) in cases.items():
        f = L.test_file(nid)
        if f not in local_hash:
            p = root / f
            local_hash[f] = P.file_sha256(p) if p.is_file() else None
            funcs[f] = _functions(p) if p.is_file() else set()
        if local_hash[f] is None:
            raise _refuse(xml, "unknown-test", f"{nid}: no test file {f} in this tree", line)
        if there.get(f) != local_hash[f]:
            raise _refuse(xml, "foreign-tree", f"{nid}: {f} {_differs(there, f, local_hash[f])}", line)
        func = nid.split("::", 1)[1].split("[", 1)[0]
        if func not in funcs[f]:
            raise _refuse(xml, "unknown-test", f"{nid}: {f} defines no test {func}", line)

    by_file: dict[str, list[str]] = {}  # test file -> its cases: the matching below stays linear
    for n in cases:
        by_file.setdefault(L.test_file(n), []).append(n)

    def cases_of(t: str) -> list[str]:
        return [n for n in by_file.get(L.test_file(t), []) if L.item_of(n, t)]

    covered = [v for _vid, v in sorted(reg.variants.items()) if any(cases_of(t) for t in L.declared_tests(v))]
    if not covered:
        raise _refuse(xml, "unknown-test", "covers no declared gate test of the registry")

    # Every file the covered gates depend on: as tested.
    deps: dict[str, tuple[dict[str, str], list[str]]] = {}
    for v in covered:
        files, missing = L.file_hashes(reg, v)
        for rel, h in files.items():
            if there.get(rel) != h:
                raise _refuse(xml, "foreign-tree", f"gate {v.id}: {rel} {_differs(there, rel, h)}")
        deps[v.id] = ({rel: there[rel] for rel in files}, missing)

    # Every test case is an item collected here; every collected item of a covered test is accounted for.
    wanted = list(dict.fromkeys(t for v in covered for t in L.declared_tests(v) if cases_of(t)))
    if collected is None:
        try:
            collected = collect(root, wanted)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            raise _refuse(xml, "unverified", f"cannot check the test ids: {exc}") from None
    known = {i for t in wanted for i in collected.get(t, [])}
    for t in wanted:
        for nid in cases_of(t):
            if nid not in known:
                raise _refuse(xml, "unknown-test", f"{nid}: pytest collects no such item here", cases[nid][1])

    def result_of(vals: set[str], passed: bool) -> str:
        return "fail" if vals & L.FAILING else "pass" if passed else "partial" if L.PASSED in vals else "skipped"

    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    records = []
    for v in covered:
        mine: dict[str, str] = {}
        all_passed = True
        for t in L.declared_tests(v):
            items = collected.get(t, []) if t in wanted else []
            if not items:
                all_passed = False
                continue
            for i in items:
                mine[i] = cases[i][0] if i in cases else L.NOT_RUN
            all_passed &= all(mine[i] == L.PASSED for i in items)
        result = result_of(set(mine.values()), all_passed)
        files, missing = deps[v.id]
        ran_on = {n: props.get(f"{P.STAMP_RAN_ON}:{n}") for n in mine}
        tc = {k: prov["toolchain"].get(k) for k in P.TOOLCHAIN_KEYS}
        for where, part, where_tc in L.split_by_where_it_ran(mine, ran_on, prov["platform"], tc):
            vals = set(part.values())
            res = result if where == prov["platform"] and part == mine else result_of(vals, vals == {L.PASSED})
            records.append(L.GateRecord(
                variant=v.id, tests=L.declared_tests(v), result=res, outcomes=part, platform=where,
                date=date, source_hash=L.hash_of(files, missing), files=len(files), commit=prov.get("commit"),
                note=f"imported from {xml.name} (provenance of {prov.get('created')})", deps=files,
                toolchain=where_tc, imported={"file": xml.name, "created": prov.get("created"), "checks": checks}))
    return records


def _check_stamp(xml: Path, prov: dict, props: dict[str, str]) -> str:
    """The JUnit stamp (registry/provenance.py as a pytest plugin) must have the provenance's tree hash,
    toolchain and platform, else the import is refused; returns what was checked (a file without a stamp is
    accepted and says so)."""
    if P.STAMP_TREE not in props:
        return "no stamp in the JUnit file: nothing ties it to the provenance"
    want = P.tree_hash(prov["files"])
    if props[P.STAMP_TREE] != want:
        raise _refuse(xml, "provenance-mismatch", f"the JUnit file's tree hash {props[P.STAMP_TREE][:12]} is not the "
                      f"provenance's ({want[:12]}): they are not of one run")
    try:
        tc = json.loads(props.get(P.STAMP_TOOLCHAIN) or "null")
    except json.JSONDecodeError:
        tc = None
    if not isinstance(tc, dict) or any(tc.get(k) != prov["toolchain"].get(k) for k in P.TOOLCHAIN_KEYS):
        raise _refuse(xml, "provenance-mismatch", f"the JUnit file's toolchain {tc} is not the provenance's "
                      f"({prov['toolchain']})")
    if props.get(P.STAMP_PLATFORM) != prov["platform"]:
        raise _refuse(xml, "provenance-mismatch", f"the JUnit file says {props.get(P.STAMP_PLATFORM)}, the "
                      f"provenance {prov['platform']}")
    return "stamp: tree hash, toolchain and platform equal the provenance's"
