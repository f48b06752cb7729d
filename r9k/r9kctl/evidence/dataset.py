"""Question sets and their graders (``r9kctl eval record --dataset FILE``), JSON Lines of three shapes,
recognised per record (notes/evidence.md):

* native (``r9k/r9kctl/evidence/data/``): ``id``, ``prompt``, ``answer``, ``grader`` (``number``, the default:
  the number after a final ``#### ``, else the last number; ``exact``; ``contains``);
* GSM8K (``question``, ``answer`` ending ``#### N``): graded ``number``, ids ``gsm8k-<line index>``;
* HumanEval: the completion run against the task's ``check`` in a separate process with a timeout, only when
  the caller allows executing model-written code (``--execute-code``).

:meth:`Dataset.sha256` fingerprints the questions, independent of file formatting.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from fractions import Fraction
from importlib import resources
from pathlib import Path
from typing import Any
from ...registry import fileio

from .results import json_lines

GRADERS = ("number", "exact", "contains", "humaneval")

# Instruction appended to number-graded prompts, so the answer can be found without guessing.
NUMBER_INSTRUCTION = "\nGive the final answer as a number on the last line, in the form: #### <number>"
HUMANEVAL_INSTRUCTION = ("Complete the following Python function. Reply with the complete function in one "
                         "```python code block.\n\n")


class DatasetError(ValueError):
    pass


@dataclass(frozen=True)
class Question:
    id: str
    prompt: str  # the text sent to the model
    answer: str  # reference answer (for humaneval: the test code)
    grader: str = "number"
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass
class Dataset:
    name: str
    questions: list[Question]
    source: str

    def sha256(self) -> str:
        h = hashlib.sha256()
        for q in self.questions:
            h.update(json.dumps([q.id, q.prompt, q.answer, q.grader], ensure_ascii=False).encode("utf-8"))
            h.update(b"\n")
        return h.hexdigest()

    def __len__(self) -> int:
        return len(self.questions)


def shipped_datasets() -> dict[str, Path]:
    """Question sets shipped as package data, by name (file stem)."""
    root = resources.files("r9k.r9kctl.evidence") / "data"
    return {Path(p.name).stem: Path(str(p)) for p in root.iterdir() if p.name.endswith(".jsonl")}


def _question(obj: Any, index: int, where: str) -> Question:
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: expected a JSON object")
    if "task_id" in obj and "test" in obj and "entry_point" in obj:  # HumanEval
        return Question(str(obj["task_id"]), HUMANEVAL_INSTRUCTION + obj["prompt"], obj["test"], "humaneval",
                        {"entry_point": obj["entry_point"], "raw_prompt": obj["prompt"]})
    if "question" in obj and "answer" in obj and "prompt" not in obj:  # GSM8K
        ans = str(obj["answer"])
        if "####" not in ans:
            raise DatasetError(f"{where}: GSM8K-style answer without a '####' final answer")
        final = ans.rsplit("####", 1)[1].strip()
        qid = str(obj.get("id", f"gsm8k-{index:04d}"))
        return Question(qid, obj["question"] + NUMBER_INSTRUCTION, final, "number")
    if "prompt" in obj and "answer" in obj:  # native
        if "id" not in obj:
            raise DatasetError(f"{where}: native record needs an 'id'")
        grader = obj.get("grader", "number")
        if grader not in GRADERS or grader == "humaneval":
            raise DatasetError(f"{where}: unknown grader {grader!r} (number, exact, contains)")
        prompt = obj["prompt"] + (NUMBER_INSTRUCTION if grader == "number" else "")
        return Question(str(obj["id"]), prompt, str(obj["answer"]), grader)
    raise DatasetError(f"{where}: not a native, GSM8K or HumanEval record (keys: {', '.join(sorted(obj))})")


def load_dataset(spec: str | Path) -> Dataset:
    """Load a question set from a file path, or by the name of a shipped set (e.g. ``arith-smoke``)."""
    path = Path(spec)
    if not path.exists():
        shipped = shipped_datasets()
        if str(spec) in shipped:
            path = shipped[str(spec)]
        else:
            raise DatasetError(f"{spec}: no such file, and not a shipped question set "
                               f"({', '.join(sorted(shipped)) or 'none'})")
    questions: list[Question] = []
    seen: set[str] = set()
    lines = fileio.read_text(path, "question set").splitlines()
    for index, (where, obj) in enumerate(json_lines(lines, str(path), DatasetError)):
        q = _question(obj, index, where)
        if q.id in seen:
            raise DatasetError(f"{where}: duplicate question id {q.id!r}")
        seen.add(q.id)
        questions.append(q)
    if not questions:
        raise DatasetError(f"{path}: no questions")
    return Dataset(path.stem, questions, str(path))


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


def _to_fraction(text: str) -> Fraction | None:
    t = text.replace(",", "").replace("$", "").strip().rstrip(".")
    try:
        return Fraction(t)
    except (ValueError, ZeroDivisionError):
        return None


def extract_number(output: str) -> str | None:
    """The model's final numeric answer: the first number after the last '####', else the last number."""
    if "####" in output:
        m = _NUMBER.search(output.rsplit("####", 1)[1])
        if m:
            return m.group(0).replace(",", "")
    found = _NUMBER.findall(output)
    return found[-1].replace(",", "") if found else None


def _extract_code(output: str) -> str:
    blocks = re.findall(r"```(?:python|py)?\s*\n(.*?)```", output, flags=re.S)
    return max(blocks, key=len) if blocks else output


def run_humaneval(q: Question, output: str, timeout_s: float = 15.0) -> tuple[bool, str]:
    code = _extract_code(output)
    entry = q.meta["entry_point"]
    # A reply that restates the whole function stands alone; a bare body continues the prompt.
    program = code if re.search(rf"def\s+{re.escape(entry)}\s*\(", code) else q.meta["raw_prompt"] + code
    program += "\n\n" + q.answer + f"\n\ncheck({entry})\n"
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "candidate.py"
        f.write_text(program, encoding="utf-8")
        try:
            proc = subprocess.run([sys.executable, "-I", str(f)], cwd=tmp, capture_output=True, text=True,
                                  timeout=timeout_s, env={"PATH": os.environ.get("PATH", "")})
        except subprocess.TimeoutExpired:
            return False, "timeout"
    return proc.returncode == 0, "passed" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["failed"])[-1][:200]


def grade(q: Question, output: str, execute_code: bool = False) -> tuple[bool, str | None]:
    """(correct, extracted answer or grading note)."""
    if q.grader == "number":
        got = extract_number(output)
        want = _to_fraction(q.answer)
        if got is None or want is None:
            return False, got
        val = _to_fraction(got)
        return val is not None and val == want, got
    if q.grader == "exact":
        return output.strip() == q.answer.strip(), output.strip()[:200]
    if q.grader == "contains":
        return q.answer in output, None
    if q.grader == "humaneval":
        if not execute_code:
            raise DatasetError("HumanEval grading runs model-written code; pass --execute-code to allow it")
        return run_humaneval(q, output)
    raise DatasetError(f"unknown grader {q.grader!r}")
