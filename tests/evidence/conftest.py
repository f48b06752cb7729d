"""Fixtures of the evidence tests: a small OpenAI-compatible server (stdlib http.server on 127.0.0.1).

The server knows the shipped question set's answers and replies with them, except for the question ids
it is told to get wrong; it records every request body and the highest number of requests it had in
flight at once, so a test can check that ``eval record`` asks one question at a time.
"""
from __future__ import annotations

import json
import random
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from servers import send_json

from r9k.r9kctl.evidence import results
from r9k.r9kctl.evidence.results import QuestionResult


class FakeModelServer:
    def __init__(self, answers: dict[str, str], model: str = "fake-model"):
        self.answers = answers  # prompt -> correct final answer
        self.model = model
        self.wrong_prompts: set[str] = set()
        self.fail_next = 0  # answer this many requests with HTTP 503 first
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.delay_s = 0.0
        self.r9k_status: dict | None = None  # what GET /r9k/status answers (None: 404, no plugin)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep test output clean
                pass

            def _send(self, code: int, body: dict):
                send_json(self, body, code)

            def do_GET(self):
                if self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
                elif self.path == "/r9k/status" and server.r9k_status is not None:
                    self._send(200, server.r9k_status)
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    server.requests.append(body)
                    fail = server.fail_next > 0
                    server.fail_next -= fail
                # The request counts as in flight until its response is ready; it stops counting before
                # the response is written, because the client may send its next request the moment it
                # has read this one (counting until after the write would see a sequential client as 2).
                try:
                    time.sleep(server.delay_s)
                    if fail:
                        status, payload = 503, {"error": "warming up"}
                    elif self.path in ("/v1/chat/completions", "/v1/completions"):
                        chat = self.path.endswith("chat/completions")
                        prompt = body["messages"][-1]["content"] if chat else body["prompt"]
                        text = server.reply(prompt)
                        choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                                   "finish_reason": "stop"} if chat else {"index": 0, "text": text})
                        status, payload = 200, {"id": "x", "model": body["model"], "choices": [choice],
                                                "usage": {"completion_tokens": len(text.split())}}
                    else:
                        status, payload = 404, {"error": "not found"}
                finally:
                    with server._lock:
                        server.in_flight -= 1
                self._send(status, payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def reply(self, prompt: str) -> str:
        key = next((p for p in self.answers if prompt.startswith(p)), None)
        if key is None:
            return "I do not know."
        ans = int(self.answers[key])
        if key in self.wrong_prompts:
            ans += 1
        # Some working first, with other numbers in it, so the grader has to find the marked answer.
        nums = re.findall(r"\d+", key)
        return f"Using {', '.join(nums) or 'the numbers'} step by step.\n#### {ans}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def eval_cli():
    """``r9kctl eval ...`` on its own parser (no global options): ``eval_cli(["eval", "compare", a, b])``
    returns the command's exit code."""
    import argparse

    from r9k.r9kctl import cmd_eval

    def run(argv: list[str]) -> int:
        parser = argparse.ArgumentParser(prog="r9kctl")
        cmd_eval.add_parser(parser.add_subparsers(dest="cmd"))
        args = parser.parse_args(argv)
        return args.func(args)

    return run


@pytest.fixture
def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fake_server():
    from r9k.r9kctl.evidence.dataset import load_dataset

    ds = load_dataset("arith-smoke")
    # Prompts carry an appended answer-format instruction; the server keys on the question text.
    raw = {q.prompt.split("\nGive the final answer")[0]: q.answer for q in ds.questions}
    with FakeModelServer(raw) as srv:
        srv.dataset = ds
        srv.prompt_of = {q.id: q.prompt.split("\nGive the final answer")[0] for q in ds.questions}
        yield srv


def _build_pair(tmp_path, *, both, b, c, neither, identical=None, seed=None, dataset_sha="d" * 64):
    """Two result files over the same shuffled question ids with the given 2x2 cell counts.

    identical: how many questions get the same output text in both files (drawn at random).
    """
    rng = random.Random(seed)
    n = both + b + c + neither
    ids = [f"q{rng.randrange(10**9):09d}-{i}" for i in range(n)]
    cells = [(True, True)] * both + [(True, False)] * b + [(False, True)] * c + [(False, False)] * neither
    rng.shuffle(cells)
    same = set(rng.sample(range(n), identical)) if identical is not None else set()
    ra, rb = [], []
    for i, (qid, (ca, cb)) in enumerate(zip(ids, cells)):
        out_a = f"answer {rng.random()}"
        out_b = out_a if i in same else out_a + " (B)"
        ra.append(QuestionResult(qid, ca, output=out_a))
        rb.append(QuestionResult(qid, cb, output=out_b))
    rng.shuffle(rb)  # order in the file must not matter
    pa, pb = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    results.dump(pa, {"dataset": "constructed", "dataset_sha256": dataset_sha, "label": "A"}, ra)
    results.dump(pb, {"dataset": "constructed", "dataset_sha256": dataset_sha, "label": "B"}, rb)
    return pa, pb


@pytest.fixture
def build_pair():
    """Constructs two result files with given 2x2 cell counts (see _build_pair)."""
    return _build_pair
