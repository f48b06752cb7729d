"""The per-question result file: what ``r9kctl eval record`` writes and ``r9kctl eval compare`` reads.

JSON Lines: an optional header first (recognised by ``"r9k_eval": 1``; ``dataset_sha256`` of two files must
agree where both carry it), then one record per question with ``id`` (unique; an integer is read as its
string) and ``correct`` required, ``output`` / ``output_sha256`` optional (the identical-output share needs
one in every record of both files), other keys kept. The format is described in notes/evidence.md.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator
from ...registry import fileio

FORMAT_VERSION = 1


class ResultFileError(ValueError):
    """A result file that cannot be read, or two that cannot be compared. The message says where and why."""


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class QuestionResult:
    id: str
    correct: bool
    output_sha256: str | None = None
    output: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = {"id": self.id, "correct": self.correct, "output": self.output, "output_sha256": self.output_sha256}
        return {**{k: v for k, v in d.items() if v is not None}, **self.extra}


@dataclass
class ResultFile:
    path: Path | None
    header: dict[str, Any]
    results: dict[str, QuestionResult]  # by id, in file order

    @property
    def n(self) -> int:
        return len(self.results)

    @property
    def correct(self) -> int:
        return sum(r.correct for r in self.results.values())

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else float("nan")

    @property
    def name(self) -> str:
        return self.header.get("label") or (self.path.name if self.path else "<memory>")


def _record(obj: Any, where: str) -> QuestionResult:
    if not isinstance(obj, dict):
        raise ResultFileError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if "id" not in obj:
        raise ResultFileError(f"{where}: record has no 'id'")
    qid = obj["id"]
    if isinstance(qid, bool) or not isinstance(qid, (str, int)):
        raise ResultFileError(f"{where}: 'id' must be a string or an integer, got {qid!r}")
    if "correct" not in obj:
        raise ResultFileError(f"{where}: record {qid!r} has no 'correct'")
    correct = obj["correct"]
    if not isinstance(correct, bool):
        raise ResultFileError(f"{where}: 'correct' of {qid!r} must be true or false, got {correct!r}")
    output = obj.get("output")
    if output is not None and not isinstance(output, str):
        raise ResultFileError(f"{where}: 'output' of {qid!r} must be a string")
    digest = obj.get("output_sha256")
    if output is not None:
        computed = sha256_text(output)
        if digest is not None and digest != computed:
            raise ResultFileError(f"{where}: 'output_sha256' of {qid!r} does not match its 'output'")
        digest = computed
    extra = {k: v for k, v in obj.items() if k not in ("id", "correct", "output", "output_sha256")}
    return QuestionResult(str(qid), correct, digest, output, extra)


def json_lines(lines: Iterable[str], source: str, error: type[Exception]) -> Iterator[tuple[str, Any]]:
    """(``source:line``, value) of each non-blank line of a JSON Lines text; a line that is not JSON raises
    ``error`` with its place (the result files here, the question sets in :mod:`.dataset`)."""
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source}:{lineno}"
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{where}: not valid JSON ({exc.msg})") from None


def parse_lines(lines: Iterable[str], source: str = "<input>", path: Path | None = None) -> ResultFile:
    header: dict[str, Any] = {}
    results: dict[str, QuestionResult] = {}
    for where, obj in json_lines(lines, source, ResultFileError):
        if isinstance(obj, dict) and "r9k_eval" in obj:
            if results or header:
                raise ResultFileError(f"{where}: header line must be the first line")
            if obj["r9k_eval"] != FORMAT_VERSION:
                raise ResultFileError(f"{where}: unknown result format version {obj['r9k_eval']!r}")
            header = obj
            continue
        rec = _record(obj, where)
        if rec.id in results:
            raise ResultFileError(f"{where}: duplicate question id {rec.id!r}")
        results[rec.id] = rec
    return ResultFile(path, header, results)


def load(path: str | Path) -> ResultFile:
    p = Path(path)

    text = fileio.read_text(p, "result file")  # a located FileError for a missing, binary or non-UTF-8 file
    rf = parse_lines(text.splitlines(), str(p), p)
    if not rf.results:
        raise ResultFileError(f"{p}: no per-question records")
    return rf


def dump(path: str | Path, header: dict[str, Any] | None, results: Iterable[QuestionResult]) -> None:
    """Write a whole result file (header first when given)."""
    lines = [json.dumps({"r9k_eval": FORMAT_VERSION, **header})] if header is not None else []
    lines += [json.dumps(r.to_json(), ensure_ascii=False) for r in results]
    fileio.atomic_write(path, "".join(ln + "\n" for ln in lines), "result file")
