"""The release records against the record: every release's resolved defaults against the reference catalog,
every number of the two seed documents against the release records, and the markdown diffs against the
seeds' tables.

The reference (knob catalog, releases) and the seeds are shipped as test data under tests/data/, so these
tests run in every checkout. The expected defaults are derived here from the reference alone (its v0.3.2
defaults with its own per-release changes undone), independently of registry/resolve.py.
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from r9k.registry import load_registry
from r9k.registry.resolve import value_at_release

DATA = Path(__file__).resolve().parents[1] / "data"
CATALOG = tomllib.loads((DATA / "reference" / "knob-catalog.toml").read_text())
RELEASES = tomllib.loads((DATA / "reference" / "releases.toml").read_text())
SEEDS = sorted((DATA / "seeds").glob("*.txt"))
FN = "qwen3.8-flash-next"


@pytest.fixture(scope="module")
def reg():
    return load_registry()


def _scope(scope: str, tp: int) -> bool:
    return scope in ("all", "fn") or scope == f"tp{tp}"


def _changes(knob: dict) -> list[dict]:
    """A knob's default changes: its own catalog entry where it lists them, else the releases' lists (a change
    written for two knobs at once, 'R9K_X / _X1' from 'a / b', is split into one change a knob)."""
    if knob.get("default_changes"):
        return list(knob["default_changes"])
    out = []
    for rel in RELEASES["release"]:
        for ch in rel.get("knob_default_changes", []):
            names = [n.strip() for n in ch["knob"].split("/")]
            names = [names[0]] + [names[0].rsplit("_", 1)[0] + n if n.startswith("_") else n for n in names[1:]]
            if knob["knob"] not in names:
                continue
            i = names.index(knob["knob"])
            froms = [s.strip() for s in str(ch["from"]).split(" / ")]
            tos = [s.strip() for s in str(ch["to"]).split(" / ")]
            out.append(dict(ch, release=rel["version"], knob=knob["knob"],
                            **{"from": froms[i] if len(froms) == len(names) else ch["from"],
                               "to": tos[i] if len(tos) == len(names) else ch["to"]}))
    return out


def _same(v, got, want) -> bool:
    """Equal as the knob's values; '1,...,N' (the reference's shorthand for a capture list) by its largest size."""
    if want is not None:
        want = re.sub(r"^(\S+) \(.*\)$", r"\1", want)  # '4 (launcher)': the value, then a comment
    if want is None or want.startswith("("):
        return got == v.stock
    m = re.fullmatch(r"1,\.\.\.,(\d+)", want)
    if m:
        return bool(got) and got.split(",")[0] == "1" and got.split(",")[-1] == m.group(1)
    try:
        return got == v.normalize(want)
    except ValueError:
        return False


def _expected(knob: dict, release: str, tp: int, order: list[str]):
    """The reference's default of a knob at a release: its v0.3.2 default with every later change undone."""
    cur = knob.get(f"default_tp{tp}", knob.get("stock_value"))
    cur = None if cur is None else str(cur)
    for ch in sorted(_changes(knob), key=lambda c: order.index(c["release"]), reverse=True):
        if order.index(ch["release"]) > order.index(release) and _scope(ch["tp"], tp):
            cur = str(ch["from"])
    return cur


def test_every_release_default_matches_the_reference_catalog(reg):
    order = reg.release_order()
    assert order == [r["version"] for r in RELEASES["release"]]
    bad = []
    for knob in CATALOG["variant"]:
        v = reg.variants[knob["id"]]
        if f"default_tp4" not in knob and not _changes(knob):
            continue
        for release in order:
            for tp in (4, 2):
                got = value_at_release(reg, v, release, FN, tp)
                want = _expected(knob, release, tp, order)
                if v.since in order and order.index(v.since) > order.index(release):
                    ok = got == v.stock  # not in that release yet: its stock path ran
                else:
                    ok = _same(v, got, want)
                if not ok:
                    bad.append(f"{knob['knob']} at {release} tp{tp}: registry {got!r}, reference {want!r}")
    assert bad == [], "\n".join(bad)


def test_the_issue_12_values(reg):
    """The value errors issue 12 lists, one by one."""
    var = {v.knob: v for v in reg.variants.values()}
    cg = value_at_release(reg, var["CGSIZES"], "v0.2.3", FN, 4)
    assert cg.split(",")[-1] == "2048"
    assert value_at_release(reg, var["CGSIZES"], "v0.3.0", FN, 4).split(",")[-1] == "256"
    assert value_at_release(reg, var["R9K_MOE_PREFILL_CFG"], "v0.1.0", FN, 4) == "11"
    assert value_at_release(reg, var["R9K_MOE_PREFILL_CFG1"], "v0.1.0", FN, 2) == "15"
    assert value_at_release(reg, var["R9K_HC_FP8_DECODE_MAXM"], "v0.3.1", FN, 4) == "16"
    kv = [b for b in reg.releases["v0.2.1"].bench if b.config == "fn_tp2" and b.metric == "kv_cache_tokens"]
    assert kv and all((b.value or b.low) >= 90_000 for b in kv), kv


# ----------------------------------------------------------------------------------------- the seeds

NUM = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w])|(?<![\w.,])\d+(?:\.\d+)?(?![\w.]\d)")
RANGE = re.compile(r"(?<![\w.,])(\d[\d,]*(?:\.\d+)?)-(\d[\d,]*(?:\.\d+)?)")


def numbers(text: str) -> set[float]:
    out = set()
    for m in NUM.finditer(text):
        out.add(float(m.group(0).replace(",", "")))
    return out


def table_lines(seed: Path) -> list[str]:
    """The rows of a seed's tables (tab-separated lines), with the table's title line above them."""
    lines = seed.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        if "\t" in line:
            if i and "\t" not in lines[i - 1] and lines[i - 1].strip() and lines[i - 1].strip() not in out:
                out.append(lines[i - 1].strip())
            out.append(line)
    return out


def test_seed_tables_are_found():
    assert len(SEEDS) == 2
    for seed in SEEDS:
        assert len(table_lines(seed)) >= 7, seed.name


@pytest.fixture(scope="module")
def markdown(reg):
    from r9k.r9kctl.cmd_diff import render_markdown
    from r9k.registry.diff import diff

    return {(a, b): render_markdown(reg, diff(reg, a, b), a, b)
            for a, b in (("v0.1.0", "v0.2.0"), ("v0.3.0", "v0.3.1"))}


SEED_DIFF = {"003_7edb50714f6328b8.txt": ("v0.1.0", "v0.2.0"), "000_540e7845399a67c5.txt": ("v0.3.0", "v0.3.1")}


@pytest.mark.parametrize("seed", SEEDS, ids=lambda p: p.name)
def test_markdown_diff_carries_every_number_of_the_seed_tables(seed, markdown):
    md = markdown[SEED_DIFF[seed.name]]
    have = numbers(md)
    rows = table_lines(seed)
    missing = [(row.strip(), n) for row in rows for n in sorted(numbers(row)) if n not in have]
    assert missing == [], md
    # ranges stay ranges, written as the notes write them
    ranges = [m.group(0) for row in rows for m in RANGE.finditer(row)]
    assert ranges and [r for r in ranges if r not in md] == [], md


@pytest.mark.parametrize("seed", SEEDS, ids=lambda p: p.name)
def test_every_seed_table_number_is_in_the_release_records(seed, reg):
    """Each number of a seed's tables is held by a release record (bench, quality or the records' texts)."""
    a, b = SEED_DIFF[seed.name]
    held = set()
    for r in (a, b):
        rel = reg.releases[r]
        held |= numbers(rel.model_dump_json())
        for rec in rel.bench:
            for x in (rec.value, rec.low, rec.high, rec.before):
                if x is not None:
                    held.add(float(x))
                    held.add(float(x) / 1000)  # '442-475k'
    labels = {1, 2, 4, 8, 16, 32, 512, 1319}  # row labels (concurrency, depth, essay length, set size)
    # the ratio column ('+19%', '+18-29%', '1.5x faster') is computed by the diff, not held: the markdown test
    # checks it is reproduced
    cells = [c for row in table_lines(seed) for c in row.split("\t") if not re.match(r"^\s*[+-]\d|.*\u00d7", c)]
    missing = [(c.strip(), n) for c in cells for n in sorted(numbers(c)) if n not in held and n not in labels]
    assert missing == []


def test_diff_formats_agree(reg):
    """Text, markdown and JSON come from one Diff: a figure in the markdown is in the JSON too."""
    import json

    from r9k.registry.diff import diff

    d = diff(reg, "v0.3.0", "v0.3.1")
    js = json.dumps(d.to_dict())
    for n in (567, 898, 6743, 103517, 133306, 161, 1040, 25.5):
        assert n in numbers(js), n


# ----------------------------------------------------------------------------------------- bad records

@pytest.mark.parametrize("old, new, says", [
    ("value = 121000.0\napprox = true\ntext = \"121k", "value = 121.0\napprox = true\ntext = \"121k", "'121k'"),
    ("low = 68.0\nhigh = 82.0", "low = 82.0\nhigh = 68.0", "range reversed"),
    ("value = 159.2\nunit = \"tok/s\"", "value = 159.2", "has no unit"),
])
def test_an_implausible_figure_is_a_located_error(r9kctl, registry_copy, old, new, says):
    for f in sorted((registry_copy / "releases").glob("*.toml")):
        text = f.read_text()
        if old in text:
            break
    else:
        raise AssertionError(f"no release record holds {old!r}")
    line = text[:text.index(old)].count("\n") + 1
    f.write_text(text.replace(old, new, 1))
    code, out, err = r9kctl("--registry", str(registry_copy), "validate", "--all")
    assert code == 2 and "Traceback" not in err, err
    errs = [ln for ln in err.splitlines() if "error[" in ln]
    assert len(errs) == 1 and says in errs[0], err
    m = re.match(r"(.+):(\d+):(\d+): error\[schema\]", errs[0])
    assert m and m.group(1).endswith(f.name)
    bench_start = text[:text.index(old)].rfind("[[bench]]")
    assert int(m.group(2)) in (line, text[:bench_start].count("\n") + 1), errs[0]
