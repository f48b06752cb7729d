"""``r9kctl eval record``: run a question set against a running OpenAI-compatible server.

One request at a time and greedy decoding: under dynamic batching answers are not reproducible, and a paired
comparison would mostly measure that noise. Results are written as they arrive (``resume=True`` continues a
file, refusing one of another question set); HTTP goes through the bounded :mod:`r9k.r9kctl.netclient`.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TextIO

from .. import netclient
from .dataset import Dataset, Question, grade
from .results import FORMAT_VERSION, ResultFileError, parse_lines, sha256_text
from ...registry import fileio


class ServerError(RuntimeError):
    pass


def api_base(url: str) -> str:
    """Normalise ``http://host:port``, ``.../v1`` or ``.../v1/`` to the ``.../v1`` base."""
    base = url.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


@dataclass
class Client:
    base: str
    api_key: str | None = None
    timeout_s: float = 600.0
    retries: int = 3
    max_bytes: int = netclient.MAX_BODY

    def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        headers = {}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                return netclient.get_json(self.base + path, method, body, headers, self.timeout_s, self.max_bytes)
            except netclient.ClientError as exc:
                # a wrong request (4xx), a redirect, an oversized or malformed answer: retrying will not help
                if exc.kind in ("redirect", "too-large", "json") or (exc.kind == "http" and exc.status < 500):
                    raise ServerError(str(exc)) from None
                last = exc
            if attempt < self.retries:
                time.sleep(min(2.0 ** attempt, 10.0))
        raise ServerError(f"{method} {self.base + path}: failed after {self.retries + 1} attempts: {last}")

    def models(self) -> list[str]:
        try:
            data = netclient.dig(self._request("GET", "/models"), "data", what=f"{self.base}/models")
            if not isinstance(data, list):
                raise netclient.ClientError("json", f"{self.base}/models: 'data' is not a list")
            return [str(netclient.dig(m, "id", what=f"{self.base}/models")) for m in data]
        except netclient.ClientError as exc:
            raise ServerError(str(exc)) from None

    def generate(self, model: str, prompt: str, max_tokens: int, api: str = "chat") -> tuple[str, dict]:
        """Greedy generation; returns (text, usage)."""
        common = {"model": model, "max_tokens": max_tokens, "temperature": 0.0, "top_p": 1.0, "n": 1,
                  "stream": False}
        if api == "chat":
            path, body, keys = "/chat/completions", {"messages": [{"role": "user", "content": prompt}]}, ("message",)
            shape, field = "choices[0].message is not an object (a server answering in another shape?)", "content"
        elif api == "completions":
            path, body, keys = "/completions", {"prompt": prompt}, ()
            shape, field = "choices[0] is not an object", "text"
        else:
            raise ValueError(f"unknown api {api!r} (chat, completions)")
        try:
            resp = self._request("POST", path, {**common, **body})
            choice = netclient.dig(resp, "choices", 0, *keys, what=self.base + path)
            if not isinstance(choice, dict):
                raise netclient.ClientError("json", f"{self.base}{path}: {shape}")
            text = choice.get(field)
        except netclient.ClientError as exc:
            raise ServerError(str(exc)) from None
        if text is not None and not isinstance(text, str):
            raise ServerError(f"{self.base}: the answer's text is {type(text).__name__}, not a string")
        usage = resp.get("usage")
        return text or "", usage if isinstance(usage, dict) else {}


def server_status(base: str, timeout_s: float = 5.0) -> dict | None:
    """The active set a server with this project's plugin reports (``GET /r9k/status``; for the result's
    header), or None (a server without the route)."""
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    try:
        data = netclient.get_json(root + "/r9k/status", timeout_s=timeout_s)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or "hash" not in data:
        return None
    return {k: data.get(k) for k in ("profile", "hash", "tp", "model", "platform", "agree")}


def _resume_state(out: Path, ds_hash: str) -> set[str]:
    if not out.exists() or out.stat().st_size == 0:
        return set()

    lines = fileio.read_text(out, "result file").splitlines()
    # A run killed mid-write can leave a torn last line; drop it (the question is asked again).
    if lines and not lines[-1].rstrip().endswith("}"):
        lines = lines[:-1]
    rf = parse_lines(lines, str(out), out)
    have = rf.header.get("dataset_sha256")
    if have != ds_hash:
        raise ResultFileError(f"{out}: cannot resume, it was recorded from another question set "
                              f"(dataset_sha256 {str(have)[:12]} vs {ds_hash[:12]})")
    fileio.atomic_write(out, "".join(l + "\n" for l in lines), "result file")
    return set(rf.results)


def _write_line(fh, out: Path, line: str, answers: int) -> None:
    """One whole line of the result file, or none: a failed write (a full disk) is cut back to the last whole
    line and is one located error naming the file and what it keeps (the answers before; --resume goes on)."""
    try:
        pos = fh.tell()
    except OSError:  # a stream (/dev/stdout): nothing to cut back
        pos = None
    try:
        fh.write(line + "\n")
        fh.flush()
    except OSError as exc:
        if pos is not None:
            with contextlib.suppress(OSError):
                fh.truncate(pos)
        raise fileio.WriteError(fileio.Diagnostic(
            "error", "write", f"cannot write this result file: {exc.strerror or exc}; it keeps the {answers} "
            "answer(s) recorded before, whole (--resume asks the rest)", fileio.display_path(out))) from None


def record(dataset: Dataset, url: str, out: str | Path, *, model: str | None = None, max_tokens: int = 512,
           api: str = "chat", label: str | None = None, limit: int | None = None, resume: bool = False,
           execute_code: bool = False, api_key: str | None = None, timeout_s: float = 600.0,
           keep_output: bool = True, progress: TextIO | None = sys.stderr,
           extra_header: dict | None = None, on_result: Callable[[str, bool], None] | None = None) -> Path:
    """Ask every question (up to ``limit``) in order, one request at a time, and write the result file."""
    client = Client(api_base(url), api_key=api_key, timeout_s=timeout_s)
    if model is None:
        models = client.models()
        if not models:
            raise ServerError(f"{client.base}/models lists no model; pass --model")
        model = models[0]
    out = Path(out)
    ds_hash = dataset.sha256()
    questions: list[Question] = dataset.questions[:limit] if limit else list(dataset.questions)
    if not resume and out.exists() and out.stat().st_size > 0:
        raise ResultFileError(f"{out}: exists already (a recorded run); pass --resume to continue it, or choose "
                              "another --out (nothing was overwritten)")
    done = _resume_state(out, ds_hash) if resume else set()
    header = {
        "r9k_eval": FORMAT_VERSION, "dataset": dataset.name, "dataset_sha256": ds_hash,
        "questions": len(questions), "model": model, "url": client.base, "label": label or out.stem,
        "started": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "params": {"max_tokens": max_tokens, "temperature": 0.0, "concurrency": 1, "api": api,
                   "limit": limit},
        **(extra_header or {}),
    }
    status = server_status(client.base)
    if status is not None:
        header["server_r9k"] = status
    t0 = time.monotonic()
    correct = 0
    with fileio.open_for_writing(out, append=bool(done), what="result file") as fh:
        if not done:
            _write_line(fh, out, json.dumps(header), len(done))
        todo = [q for q in questions if q.id not in done]
        for i, q in enumerate(todo, 1):
            text, usage = client.generate(model, q.prompt, max_tokens, api)
            ok, extracted = grade(q, text, execute_code=execute_code)
            correct += ok
            rec = {"id": q.id, "correct": ok, "output_sha256": sha256_text(text), "expected": q.answer
                   if q.grader != "humaneval" else None, "extracted": extracted,
                   "completion_tokens": usage.get("completion_tokens")}
            if keep_output:
                rec["output"] = text
            _write_line(fh, out, json.dumps(rec, ensure_ascii=False), len(done) + i - 1)
            if on_result:
                on_result(q.id, ok)
            if progress is not None:
                el = time.monotonic() - t0
                print(f"[{len(done) + i}/{len(questions)}] {q.id}: {'right' if ok else 'wrong'}  "
                      f"({correct}/{i} right this run, {el:.1f} s)", file=progress, flush=True)
    return out
