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
    # the original's releases are exactly the reference's; this project's own (Release.project) are apart
    order = [r for r in reg.release_order() if not reg.releases[r].project]
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
    # issue 24: the variable is new in v0.3.2 (the reference catalog's since); before it the cap was fixed
    assert var["R9K_HC_FP8_DECODE_MAXM"].since == "v0.3.2"
    assert value_at_release(reg, var["R9K_HC_FP8_DECODE_MAXM"], "v0.3.1", FN, 4) is None
    assert value_at_release(reg, var["R9K_HC_FP8_DECODE_MAXM"], "v0.3.2", FN, 4) == "255"
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


def test_the_issue_24_values(reg):
    """The data errors issue 24 lists, one by one."""
    from r9k.registry.diff import diff

    d = diff(reg, "v0.3.0", "v0.3.1")
    assert "hc_fp8_decode_maxm" not in d.added and "R9K_HC_FP8_DECODE_MAXM" not in {c.knob for c in d.changed}
    assert "hc_fp8_decode_maxm" in diff(reg, "v0.3.1", "v0.3.2").added
    # 133,306 (Flash-Next TP2, v0.3.0): the reference's note calls it warm "per v0.3.1 notes", but those notes
    # compare it with 103,517, a cold-compile launch, as the fp8 down copy's cost: it is the cold figure (issue 38;
    # tests/evidence/test_memory_evidence.py checks that diff no longer sets it against the warm 166,818)
    ref = next(b for r in RELEASES["release"] if r["version"] == "v0.3.0" for b in r["bench"]
               if b["config"] == "fn_tp2" and b.get("kv_cache_tokens") == 133306)
    assert "warm" in ref["note"]
    recs = [b for r in reg.releases.values() for b in r.bench if 133306.0 in (b.value, b.before)]
    assert recs and all(b.launch != "warm" for b in recs), [(b.config, b.launch) for b in recs]
    assert any(b.launch == "cold" and b.value == 133306.0 for b in reg.releases["v0.3.0"].bench)
    # the v0.3.1 notes: the bf16 hc decode kernels were the step's largest stream, 1.29 GB a step
    assert any(b.value == 1.29 and "GB" in (b.unit or "") for b in reg.releases["v0.3.1"].bench)
    assert "1.29" in diff_markdown(reg, "v0.3.0", "v0.3.1")
    # round2-numerics: the v0.2.0 notes' recipe on v0.2.0 (round-2 numerics), not the trio on the latest release
    from r9k.registry.resolve import resolve

    rs = resolve(reg, "round2-numerics", env={})
    assert rs.release == "v0.2.0"
    for knob, want in (("R9K_ROUTER", "stock"), ("R9K_QSA_GLUE", "stock"), ("R9K_HC_MIX", "stock"),
                       ("R9K_HC_FP8_DECODE", "0"), ("R9K_HC_FP8_DOWN", "0"), ("R9K_HC_COMBINE_NORM", "stock")):
        assert rs.value(knob) == want, knob


def diff_markdown(reg, a, b):
    from r9k.r9kctl.cmd_diff import render_markdown
    from r9k.registry.diff import diff

    return render_markdown(reg, diff(reg, a, b), a, b)


def test_project_defaults_enter_through_a_project_release(reg):
    """A knob the original never had, or a default it never shipped, is credited to a release of this project
    (Release.project), never to one of the original's: in the records, in `resolve` and in `diff`."""
    from r9k.registry.diff import diff
    from r9k.registry.resolve import resolve

    catalog = {k["knob"] for k in CATALOG["variant"]}
    original = {r["version"] for r in RELEASES["release"]}
    project = {v for v, r in reg.releases.items() if r.project}
    assert set(reg.releases) - project == original and project
    new = {v.knob: v for v in reg.variants.values() if v.knob not in catalog}
    assert {"R9K_HC_COMBINE_NORM", "R9K_PDL"} <= set(new)
    for knob, v in new.items():
        assert v.since in project, (knob, v.since)
    for ver in original:  # the original's records name only the original's knobs
        assert all(ch.knob in catalog for ch in reg.releases[ver].default_changes), ver
    for prof in ("tp4-default", "tp2-default"):
        rs = resolve(reg, prof, env={})
        for knob in new:
            src = rs.items[new[knob].id].source
            if rs.items[new[knob].id].layer == "release":
                assert not any(f"release {o}" in src and f"release {o}-" not in src for o in original), (knob, src)
                assert "r9k-stack" in src, (knob, src)
        # a default the original shipped keeps the original's name
        assert rs.items[reg.find_variant("R9K_ROUTER").id].source.startswith("release v0.3.2 ")
    d = diff(reg, "v0.3.2", "v0.3.2-r9k.1")
    assert set(d.added) == {v.id for v in new.values()} and d.projects == {"v0.3.2-r9k.1": "r9k-stack"}
    # extending the original's v0.3.2 gives the original's set: no project knob on
    rs = resolve(reg, "tp4-default", env={}, sets={})
    assert rs.value("R9K_HC_COMBINE_NORM") == "r9k"
    from r9k.registry.resolve import value_at_release as at

    assert at(reg, new["R9K_HC_COMBINE_NORM"], "v0.3.2", FN, 4) == "stock"
    assert at(reg, new["R9K_PDL"], "v0.3.2", FN, 4) == "0"


@pytest.mark.parametrize("a, b", [("v0.3.0", "v0.3.1"), ("v0.1.0", "v0.2.0"), ("v0.3.2", "v0.3.2-r9k.1")])
def test_every_diff_format_carries_the_same_facts(reg, a, b, capsys, monkeypatch):
    """Table, markdown and JSON of one diff: every fact of the Diff (each changed / added / left-off knob,
    each figure with the other source's, the headline, the notes, the quality figures) is in all three."""
    import json

    from r9k.r9kctl import cli
    from r9k.r9kctl.cmd_diff import cell, quality_rows, quality_text
    from r9k.registry.diff import diff

    d = diff(reg, a, b)
    facts = {reg.variants[v].knob for v in d.added + d.left_off + d.removed} | {c.knob for c in d.changed}
    facts |= {reg.variants[v].summary.rstrip(".") for v in d.left_off}
    facts |= {cell(r.a, r.a_alt) for r in d.bench if r.stack == "ours"}
    facts |= {cell(r.b, r.b_alt) for r in d.bench if r.stack == "ours"}
    facts |= {t for _, t in d.notes} | ({d.headline} if d.headline else set())
    facts |= {c for q in d.quality for row in quality_rows(q) for c in row[1:]} | {quality_text(q) for q in d.quality}
    facts.discard("-")
    assert d.notes or a == "v0.1.0"
    outs = {}
    monkeypatch.setenv("COLUMNS", "1000")
    for fmt in ("table", "markdown", "json"):
        assert cli.main(["--plain", "diff", a, b] + ([] if fmt == "table" else ["--format", fmt])) == 0
        outs[fmt] = capsys.readouterr().out
    js = json.loads(outs["json"])
    # JSON: the same facts as data (figures as the text the other formats show, the alt figures beside them)
    flat = json.dumps(js, ensure_ascii=False)
    for r in js["bench"]:
        if r["stack"] == "ours":
            for side in ("a", "b"):
                alts = r[f"{side}_alt_text"]
                shown = r[f"{side}_text"]
                if alts and shown != "-":
                    other = "reference" if (r[side] or {}).get("origin", "reference") == "seed" else "seed"
                    flat += "\n" + shown + " [" + other + ": " + ", ".join(alts) + "]"
    missing = {fmt: sorted(f for f in facts if f not in (flat if fmt == "json" else out))
               for fmt, out in outs.items()}
    if "json" in missing:  # quality rows are numbers there: the row texts are rendered, the numbers held
        q = [str(x) for q in js["quality"] for x in (q["a_correct"], q["b_correct"], q["a_pct"], q["b_pct"],
                                                     q["a_humaneval"], q["b_humaneval"]) if x]
        missing["json"] = [f for f in missing["json"] if not any(n in f for n in q)
                           and f not in {quality_text(x) for x in d.quality}
                           and not any(t in f for t in (js["quality"][0].get("a_sanity") or "-",
                                                        js["quality"][0].get("b_sanity") or "-")
                                       if js["quality"])]
    assert missing == {"table": [], "markdown": [], "json": []}


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
