"""A paired comparison as a release quality record (``r9kctl eval compare A B --into RELEASE_TOML``): A the
baseline, B the candidate; validated as a ``QualityRecord`` before the file is edited (tomlkit keeps its layout).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import tomlkit

from .mcnemar import Comparison
from ...registry import fileio


def quality_record(cmp: Comparison, *, config: str, eval_name: str | None = None,
                   baseline_label: str | None = None, baseline_release: str | None = None,
                   source: str | None = None, note: str | None = None) -> dict[str, Any]:
    """The QualityRecord fields for ``cmp`` (A = baseline, B = candidate), as a plain dict."""
    server = cmp.a_server or {}
    label = baseline_label or (f"{server['profile']} ({server['hash']})" if server.get("profile") else cmp.a_name)
    rec: dict[str, Any] = {
        "config": config,
        "eval": eval_name or cmp.dataset or "eval",
        "accuracy_pct": round(100 * cmp.b_accuracy, 2),
        "correct": cmp.b_correct,
        "total": cmp.n,
        "baseline_label": label,
        "baseline_accuracy_pct": round(100 * cmp.a_accuracy, 2),
        "baseline_correct": cmp.a_correct,
        "mcnemar": {"b": cmp.b, "c": cmp.c, "p": round(cmp.p_value, 4), "vs": label},
    }
    if baseline_release:
        rec["baseline_release"] = baseline_release
    if cmp.identical_share is not None:
        rec["identical_outputs_pct"] = round(100 * cmp.identical_share, 1)
    if abs(cmp.confidence - 0.95) < 1e-9:
        # The interval of the accuracy difference B - A, in points (Newcombe's paired score interval).
        rec["ci95_pct"] = [round(100 * cmp.diff_ci[0], 2), round(100 * cmp.diff_ci[1], 2)]
    rec["text"] = (f"{rec['eval']}: {rec['accuracy_pct']:.2f}% ({cmp.b_correct}) vs {rec['baseline_accuracy_pct']:.2f}% "
                   f"({cmp.a_correct}) of {cmp.n}; {cmp.b} / {cmp.c} discordant, p = {cmp.p_value:.2f}"
                   + (f"; {rec['identical_outputs_pct']}% identical outputs" if "identical_outputs_pct" in rec else "")
                   + (f"; 95% CI of the difference [{rec['ci95_pct'][0]:+.2f}, {rec['ci95_pct'][1]:+.2f}] points"
                      if "ci95_pct" in rec else ""))
    if source:
        rec["source"] = source
    if note:
        rec["note"] = note
    return rec


def append_quality_record(manifest: str | Path, rec: dict[str, Any]) -> None:
    """Append ``rec`` as a ``[[quality]]`` table to a release file, keeping its comments and layout, once it
    fits the schema's QualityRecord (else ValueError). The read-modify-write holds the writer's lock:
    concurrent ``--into`` runs keep every record."""
    from pydantic import ValidationError

    from ...registry.schema import QualityRecord

    try:
        QualityRecord.model_validate(rec)
    except ValidationError as exc:
        raise ValueError(f"quality record does not fit registry/schema.py QualityRecord: {exc}") from None
    path = Path(manifest)
    with fileio.locked(manifest):
        text = fileio.read_text(path, "release file")
        fileio.parse_toml(text, path, "release file")  # a located syntax error before tomlkit sees it
        doc = tomlkit.parse(text)
        if "version" not in doc:
            raise ValueError(f"{path}: not a release file (no 'version')")
        table = tomlkit.table()
        for key, value in rec.items():
            if isinstance(value, dict):
                inline = tomlkit.inline_table()
                inline.update(value)
                table.add(key, inline)
            else:
                table.add(key, value)
        if "quality" in doc:
            aot = doc["quality"]
            if not isinstance(aot, tomlkit.items.AoT):
                raise ValueError(f"{path}: 'quality' is not an array of tables")
            aot.append(table)
        else:
            aot = tomlkit.aot()
            aot.append(table)
            doc.append("quality", aot)
        fileio.atomic_write(path, tomlkit.dumps(doc), "release file")  # the old file stays intact on failure
