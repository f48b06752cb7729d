"""The one HTTP client of the command line (``eval record``, ``status``, ``bench serve``): bounded, because a
broken, hung or hostile server must cost at most a stated time and memory, and never the user's credentials.

* a total deadline per request (a watchdog shuts the socket down when it passes, whatever call blocks);
* a maximum body size (:data:`MAX_BODY`, or ``max_bytes``), checked against ``Content-Length`` and while reading;
* no redirects: a 3xx is an error naming where it pointed, so nothing (no ``Authorization``) is sent again;
* JSON checked (UTF-8, syntax, depth, top-level type) through the project's one JSON reader.

Every failure is a :class:`ClientError` (an ``OSError``) with a ``kind`` (``connection``, ``timeout``,
``too-large``, ``redirect``, ``http``, ``json``) and one line of text. Standard library only.
"""
from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.parse
from typing import Any, Optional
from ..registry import fileio

#: Default limit of an answer's body (a chat completion of a few thousand tokens is a few tens of kB).
MAX_BODY = 8 * 1024 * 1024
_CHUNK = 64 * 1024


class ClientError(OSError):
    """A request that failed; ``kind`` names the class, ``status`` the HTTP status when there was one."""

    def __init__(self, kind: str, message: str, status: Optional[int] = None, body: str = ""):
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.body = body

    def __str__(self) -> str:
        return self.args[0]


def _split(url: str) -> tuple[str, str, int, str]:
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"{url!r}: not an http:// or https:// URL")
    try:
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        raise ValueError(f"{url!r}: the port is not a number from 1 to 65535") from None
    path = (u.path or "/") + (f"?{u.query}" if u.query else "")
    return u.scheme, u.hostname, port, path


def request(url: str, method: str = "GET", body: Any = None, headers: Optional[dict] = None,
            timeout_s: float = 10.0, max_bytes: int = MAX_BODY) -> tuple[int, bytes]:
    """(status, body bytes) of one request, within ``timeout_s`` in total and ``max_bytes`` of body.
    ``body``: an object sent as JSON. A status >= 300 raises :class:`ClientError` (kind ``redirect`` for
    3xx, ``http`` otherwise, with the start of the answer's text)."""
    scheme, host, port, path = _split(url)
    deadline = time.monotonic() + timeout_s
    hdrs = {"Accept": "application/json", "Connection": "close", **(headers or {})}
    data = None
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        hdrs["Content-Type"] = "application/json"
    cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    conn = cls(host, port, timeout=max(timeout_s, 0.001))
    expired = threading.Event()

    def cut() -> None:  # the deadline: unblock whatever read or write is waiting on the socket
        expired.set()
        if conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)

    watchdog = threading.Timer(timeout_s, cut)
    watchdog.daemon = True
    watchdog.start()

    def timed_out() -> ClientError:
        return ClientError("timeout", f"{method} {url}: no complete answer within {timeout_s:g} s")

    try:
        try:
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            status = resp.status
            if 300 <= status < 400:
                where = resp.getheader("Location") or "nowhere"
                raise ClientError("redirect", f"{method} {url}: HTTP {status} redirect to {where!r} not followed "
                                              "(point --url at the server itself)", status)
            length = resp.getheader("Content-Length")
            if length and length.strip().isdigit() and int(length) > max_bytes:
                raise ClientError("too-large", f"{method} {url}: the answer is {int(length)} bytes; the limit is "
                                               f"{max_bytes}", status)
            parts, total = [], 0
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or expired.is_set():
                    raise timed_out()
                if conn.sock is not None:
                    conn.sock.settimeout(left)
                chunk = resp.read1(_CHUNK)
                if not chunk:
                    if expired.is_set():
                        raise timed_out()
                    break
                total += len(chunk)
                if total > max_bytes:
                    raise ClientError("too-large", f"{method} {url}: the answer is larger than the limit of "
                                                   f"{max_bytes} bytes", status)
                parts.append(chunk)
            payload = b"".join(parts)
        except ClientError:
            raise
        except (socket.timeout, TimeoutError):
            raise timed_out() from None
        except (http.client.HTTPException, OSError) as exc:
            if expired.is_set():
                raise timed_out() from None
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise ClientError("connection", f"{method} {url}: {reason}") from None
    finally:
        watchdog.cancel()
        conn.close()
    if status >= 300:
        text = payload[:300].decode("utf-8", "replace")
        raise ClientError("http", f"{method} {url}: HTTP {status}: {' '.join(text.split())}", status, text)
    return status, payload


def get_json(url: str, method: str = "GET", body: Any = None, headers: Optional[dict] = None,
             timeout_s: float = 10.0, max_bytes: int = MAX_BODY, expect: Any = dict) -> Any:
    """The JSON value of one bounded request (see :func:`request`), checked by the project's JSON reader
    (UTF-8, syntax, depth) and of type ``expect``; a problem is a :class:`ClientError` of kind ``json``."""
    _, payload = request(url, method, body, headers, timeout_s, max_bytes)
    try:
        return fileio.parse_json(fileio.decode(payload, None, "answer"), None, "the answer", expect)
    except fileio.FileError as exc:
        d = exc.diagnostic
        where = f" (line {d.line}, column {d.col})" if d.line else ""
        raise ClientError("json", f"{method} {url}: {d.message}{where}") from None


def dig(obj: Any, *path, what: str = "the answer") -> Any:
    """``obj[path[0]][path[1]]...`` of a server's JSON, or a :class:`ClientError` (kind ``json``) naming
    the first step that is missing or of the wrong type (a server answering in another shape)."""
    cur, walked = obj, ""
    for step in path:
        ok = (isinstance(step, int) and isinstance(cur, list) and -len(cur) <= step < len(cur)) or \
             (isinstance(step, str) and isinstance(cur, dict) and step in cur)
        if not ok:
            shown = walked or "the top level"
            raise ClientError("json", f"{what} has no {step!r} at {shown} (a server answering in another shape?)")
        cur = cur[step]
        walked += f"[{step!r}]"
    return cur
