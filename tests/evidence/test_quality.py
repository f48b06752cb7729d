"""eval compare --into: the comparison lands in a release file as a quality record that the registry
loads and ``r9kctl diff`` shows; the manifest's comments survive."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from r9k.r9kctl import cli
from r9k.r9kctl.evidence import mcnemar, quality, results
from r9k.registry import ledger as L
from r9k.registry import envvars, load_registry



@pytest.fixture
def tmp_registry(tmp_path, monkeypatch):
    root = tmp_path / "registry"
    shutil.copytree(Path(L.__file__).resolve().parent, root,
                    ignore=shutil.ignore_patterns("__pycache__", "*.py", "gates"))
    monkeypatch.setenv(envvars.REGISTRY.name, str(root))
    return root


def test_compare_into_release_manifest_and_diff(tmp_registry, tmp_path, capsys, build_pair):
    reg = load_registry()
    latest = reg.latest_release()
    prev = reg.release_order()[-2]
    manifest = tmp_registry / "releases" / f"{latest}.toml"
    before = manifest.read_text()
    comments = [l for l in before.splitlines() if l.lstrip().startswith("#")]
    assert comments, "the shipped manifest has comments to keep"
    pa, pb = build_pair(tmp_path, both=775, b=5, c=1, neither=19, identical=204)
    rc = cli.main(["eval", "compare", str(pa), str(pb), "--into", str(manifest), "--config", "fn_tp4",
                   "--eval-name", "gsm8k-cot-800", "--baseline-release", prev, "--baseline-label", "round-2 build"])
    assert rc == 0
    assert "quality record appended" in capsys.readouterr().out
    after = manifest.read_text()
    assert after.startswith(before.rstrip("\n").split("\n[[quality]]")[0][:200])
    assert [l for l in after.splitlines() if l.lstrip().startswith("#")] == comments

    rel = load_registry().releases[latest]
    q = rel.quality[-1]
    assert (q.config, q.eval, q.total, q.correct, q.baseline_correct) == ("fn_tp4", "gsm8k-cot-800", 800, 776, 780)
    assert (q.mcnemar.b, q.mcnemar.c, q.mcnemar.p) == (5, 1, 0.2188)
    assert q.baseline_release == prev and q.identical_outputs_pct == 25.5
    assert q.ci95_pct[0] < (776 - 780) / 8 < q.ci95_pct[1]

    assert cli.main(["diff", prev, latest, "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "5 vs 1 discordant, McNemar p = 0.22" in out and "outputs identical on 25.5% of questions" in out


def test_quality_record_is_checked_against_the_schema(tmp_path, tmp_registry, build_pair):
    pa, pb = build_pair(tmp_path, both=50, b=2, c=3, neither=5)
    cmp = mcnemar.compare(results.load(pa), results.load(pb))
    rec = quality.quality_record(cmp, config="fn_tp4")
    rec["unknown_field"] = 1
    manifest = next((tmp_registry / "releases").glob("*.toml"))
    text = manifest.read_text()
    with pytest.raises(ValueError, match="QualityRecord"):
        quality.append_quality_record(manifest, rec)
    assert manifest.read_text() == text  # untouched
    not_a_release = tmp_path / "x.toml"
    not_a_release.write_text("# just a comment\nname = 'x'\n")
    with pytest.raises(ValueError, match="not a release file"):
        quality.append_quality_record(not_a_release, quality.quality_record(cmp, config="fn_tp4"))
