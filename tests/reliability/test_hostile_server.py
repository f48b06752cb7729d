"""Class "hostile server": ``eval record`` and ``status`` against local servers that misbehave (threads on
127.0.0.1 in this process). Stated bounds (r9kctl/netclient.py): a request takes at most its ``--timeout``
in total (a 1-byte-a-second drip is cut off), an answer body at most 8 MiB (``eval record``; the memory of
this process grows by well under 100 MiB on an endless body), no redirect is followed and no credential
reaches another origin, JSON of the wrong shape or depth is one line and exit 2, never exit 3."""
from __future__ import annotations

import http.server
import resource
import threading
import time
import types

import pytest

from r9k.r9kctl import netclient

from servers import send_json as _json

from .harness import run_main

SECRET = "sk-test-not-for-other-origins"


class _Server:
    """A ThreadingHTTPServer whose handler runs ``behaviour(handler)``; records every request seen."""

    def __init__(self, behaviour):
        seen = self.seen = []

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _any(self):
                seen.append((self.command, self.path, dict(self.headers)))
                try:
                    behaviour(self)
                except OSError:
                    pass

            do_GET = do_POST = _any

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # shutdown() waits up to one poll interval (0.5 s by default: 6 s over this file's teardowns)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    servers = []

    def start(behaviour):
        s = _Server(behaviour)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


def drip(h):
    h.send_response(200)
    h.send_header("Content-Length", "100000")
    h.end_headers()
    for _ in range(100000):
        h.wfile.write(b" ")
        h.wfile.flush()
        time.sleep(1.0)


def drip_headers(h):
    h.wfile.write(b"HTTP/1.1 200 OK\r\n")
    for _ in range(100000):
        h.wfile.write(b"X: y\r\n")
        h.wfile.flush()
        time.sleep(1.0)


def endless(h):
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.end_headers()  # no length: read until closed
    chunk = b'{"a": "' + b"x" * (1 << 20)
    while True:
        h.wfile.write(chunk)


def _record(url, tmp_path, *extra, timeout="2"):
    return run_main(["eval", "record", "--url", url, "--dataset", "arith-smoke", "--out",
                     str(tmp_path / "out.jsonl"), "--limit", "2", "--timeout", timeout, "--quiet", *extra],
                    {"OPENAI_API_KEY": SECRET})


def _one_error(code, out, err, *words):
    assert code == 2, (code, out, err)
    lines = [ln for ln in err.splitlines() if "error[" in ln]
    assert len(lines) == 1, err
    assert "Traceback" not in err + out
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def test_drip_body_is_cut_at_the_total_deadline(serve):
    s = serve(drip)
    t0 = time.monotonic()
    with pytest.raises(netclient.ClientError) as ei:
        netclient.request(s.url + "/v1/models", timeout_s=2)
    elapsed = time.monotonic() - t0
    assert ei.value.kind == "timeout"
    assert elapsed < 60, elapsed  # the drip would last 100000 s; per-read timeouts never fire on it


def test_drip_headers_are_cut_at_the_total_deadline(serve):
    s = serve(drip_headers)
    t0 = time.monotonic()
    with pytest.raises(netclient.ClientError) as ei:
        netclient.request(s.url + "/", timeout_s=2)
    assert ei.value.kind == "timeout" and time.monotonic() - t0 < 60


def test_eval_record_against_a_drip_ends_with_one_line(serve, tmp_path, monkeypatch):
    from r9k.r9kctl.evidence import record

    backoff = []  # the back-off between attempts is asked for, not slept (7 s of nothing in the corpus)
    fake = {n: getattr(time, n) for n in dir(time) if not n.startswith("_")}
    monkeypatch.setattr(record, "time", types.SimpleNamespace(**dict(fake, sleep=backoff.append)))
    s = serve(drip)
    t0 = time.monotonic()
    line = _one_error(*_record(s.url, tmp_path, timeout="1"))
    assert "within 1 s" in line
    assert backoff == [1.0, 2.0, 4.0], backoff  # 4 attempts
    assert time.monotonic() - t0 < 120  # 4 attempts x 1 s, against a 100000 s drip


def test_endless_body_stays_bounded_in_memory(serve, tmp_path):
    s = serve(endless)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    line = _one_error(*_record(s.url, tmp_path), "larger than the limit")
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 100, grown_mib
    assert not (tmp_path / "out.jsonl").exists()


def test_huge_content_length_is_refused_before_reading(serve):
    def liar(h):
        h.send_response(200)
        h.send_header("Content-Length", str(1 << 40))
        h.end_headers()
        h.wfile.write(b"{}")

    s = serve(liar)
    with pytest.raises(netclient.ClientError) as ei:
        netclient.request(s.url + "/", timeout_s=5)
    assert ei.value.kind == "too-large"


def test_redirect_is_not_followed_and_the_key_stays_home(serve, tmp_path):
    other = serve(lambda h: _json(h, {"data": [{"id": "stolen"}]}))

    def redirect(h):
        h.send_response(307)
        h.send_header("Location", other.url + h.path)
        h.send_header("Content-Length", "0")
        h.end_headers()

    s = serve(redirect)
    line = _one_error(*_record(s.url, tmp_path), "redirect", "not followed")
    assert other.seen == []  # nothing, let alone the Authorization header, reached the other port
    assert any(hd.get("Authorization") == f"Bearer {SECRET}" for _, _, hd in s.seen)
    assert SECRET not in line


@pytest.mark.parametrize("answer,words", [
    ([1, 2, 3], ["must hold an object"]),
    ({"data": "nope"}, ["'data' is not a list"]),
    ({"data": [{"name": "m"}]}, ["no 'id'"]),
    ({"choices": []}, ["no 0"]),
    ({"choices": [{"message": "text"}]}, ["not an object"]),
    ({"choices": [{"message": {"content": 42}}]}, ["not a string"]),
])
def test_json_of_the_wrong_shape_is_one_line(serve, tmp_path, answer, words):
    def server(h):
        if h.path.endswith("/models") and "data" not in answer and isinstance(answer, dict):
            _json(h, {"data": [{"id": "m"}]})
        else:
            _json(h, answer)

    s = serve(server)
    _one_error(*_record(s.url, tmp_path), *words)


def test_deep_and_non_utf8_json(serve, tmp_path):
    def deep(h):
        body = b"[" * 100000 + b"]" * 100000
        h.send_response(200)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    _one_error(*_record(serve(deep).url, tmp_path), "nests deeper")

    def latin1(h):
        body = '{"data": [{"id": "caf\u00e9"}]}'.encode("latin-1")
        h.send_response(200)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    _one_error(*_record(serve(latin1).url, tmp_path), "not UTF-8")


@pytest.mark.parametrize("answer", [[1], {"processes": "x"}, {"in_use": {}, "non_stock": [1]},
                                    {"in_use": {}, "ops": {"x": 1}}])
def test_status_of_the_wrong_shape(serve, answer):
    s = serve(lambda h: _json(h, answer))
    code, out, err = run_main(["status", "--url", s.url, "--timeout", "5"])
    _one_error(code, out, err)


def test_status_drip_and_redirect(serve):
    for behaviour, word in ((drip, "no answer within 1 s"), (lambda h: (h.send_response(302), h.send_header(
            "Location", "http://127.0.0.1:9/"), h.send_header("Content-Length", "0"), h.end_headers()),
            "redirect")):
        s = serve(behaviour)
        code, out, err = run_main(["status", "--url", s.url, "--timeout", "1"])
        _one_error(code, out, err, word)
