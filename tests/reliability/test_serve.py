"""``r9kctl tui --serve`` under attack (issue 37): the token always (loopback too), Host and Origin checked on
every request and websocket, a cap on panels, and every panel stopped with the server.

The server is the real one (``web.make_server``: textual-serve's app with r9kctl's checks) on an aiohttp test
server; the "panel" each websocket starts is a small Python process standing in for ``r9kctl tui`` (the checks
run before any panel starts, so what it is does not matter, and it keeps a test to ~0.1 s a panel)."""
from __future__ import annotations

import asyncio
import os
import sys

import pytest

pytest.importorskip("textual_serve")
from aiohttp import WSServerHandshakeError  # noqa: E402
from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

from r9k.r9kctl.tui import web  # noqa: E402

TOKEN = "t0ken-for-tests"
# quits on textual-serve's quit packet (as the panel does), or stays deaf to it and to SIGTERM ("stubborn")
POLITE = "import sys\nwhile (b := sys.stdin.buffer.read1(4096)) and b'quit' not in b: pass\n"
STUBBORN = ("import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print(__import__('os').getpid(), file=sys.stderr, flush=True)\ntime.sleep(600)\n")


def run(coro, timeout=120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def client(child: str = POLITE, max_panels: int = 4) -> tuple[TestClient, object]:
    srv = web.make_server([sys.executable, "-c", child], "127.0.0.1", 0, TOKEN, max_panels)
    c = TestClient(TestServer(await srv._make_app(), host="127.0.0.1"))
    await c.start_server()
    return c, srv


def served(body, child: str = POLITE, max_panels: int = 4):
    """``await body(client, server)`` against a fresh panel server, the client closed after it."""
    async def go():
        c, srv = await client(child, max_panels)
        try:
            await body(c, srv)
        finally:
            await c.close()

    run(go())


def test_host_and_origin_checks_are_pure():
    names = web.allowed_hosts("127.0.0.1")
    assert web.host_ok("127.0.0.1:8080", names) and web.host_ok("[::1]:8080", names)
    assert web.host_ok("localhost:8080", names)
    assert not web.host_ok("evil.example:8080", names) and not web.host_ok("", names)
    assert not web.host_ok("127.0.0.1:80x", names)
    assert web.origin_ok(None, "127.0.0.1:8080") and web.origin_ok("http://127.0.0.1:8080", "127.0.0.1:8080")
    assert not web.origin_ok("http://evil.example", "127.0.0.1:8080")
    assert not web.origin_ok("http://127.0.0.1:9999", "127.0.0.1:8080")
    assert not web.origin_ok("null", "127.0.0.1:8080")


def test_the_token_is_required_on_loopback_too():
    async def body(c, _):
        for path in ("/", "/ws", "/static/js/textual.js", "/?token=wrong"):
            r = await c.get(path)
            assert r.status == 403, path
        r = await c.get(f"/?token={TOKEN}")
        assert r.status == 200 and "HttpOnly" in r.headers["Set-Cookie"]
        r = await c.get("/static/js/textual.js")  # the cookie the first answer set
        assert r.status == 200

    served(body)


def test_a_foreign_host_is_refused_dns_rebinding():
    async def body(c, _):
        r = await c.get(f"/?token={TOKEN}", headers={"Host": "evil.example:8080"})
        assert r.status == 403 and "Host" in await r.text()
        r = await c.get(f"/?token={TOKEN}", headers={"Host": f"127.0.0.1:{c.port}"})
        assert r.status == 200

    served(body)


def test_a_foreign_origin_websocket_is_refused_and_starts_no_panel():
    async def body(c, srv):
        with pytest.raises(WSServerHandshakeError) as exc:
            await c.ws_connect(f"/ws?token={TOKEN}", origin="http://evil.example")
        assert exc.value.status == 403
        assert not srv.panels and not srv.starting
        ws = await c.ws_connect(f"/ws?token={TOKEN}", origin=f"http://127.0.0.1:{c.port}")
        await _wait(lambda: len(srv.panels) == 1)
        await ws.close()

    served(body)


async def _wait(cond, timeout=60.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not met"
        await asyncio.sleep(0.05)


def test_panels_are_capped():
    async def body(c, srv):
        a = await c.ws_connect(f"/ws?token={TOKEN}")
        b = await c.ws_connect(f"/ws?token={TOKEN}")
        await _wait(lambda: len(srv.panels) == 2)
        with pytest.raises(WSServerHandshakeError) as exc:
            await c.ws_connect(f"/ws?token={TOKEN}")
        assert exc.value.status == 503
        await a.close()  # one closed: room for one again
        await _wait(lambda: len(srv.panels) + srv.starting < 2)
        d = await c.ws_connect(f"/ws?token={TOKEN}")
        await _wait(lambda: len(srv.panels) == 2)
        await b.close()
        await d.close()

    served(body, max_panels=2)


@pytest.mark.parametrize("how", ["the server stops", "the tab closes"])
def test_a_stubborn_panel_is_stopped_when(how):
    """A panel deaf to the quit packet and to SIGTERM is gone once its tab closes or the server stops
    (on main textual-serve waits for it forever: the test's timeout)."""
    pids = []

    async def go():
        c, srv = await client(child=STUBBORN)
        ws = await c.ws_connect(f"/ws?token={TOKEN}")
        await _wait(lambda: len(srv.panels) == 1)
        pids.append(next(iter(srv.panels))._process.pid)
        if how == "the tab closes":
            await ws.close()
            await _wait(lambda: not srv.panels and not srv.starting)
        await c.server.close()  # on_shutdown stops the panels still open
        await c.close()

    run(go(), timeout=60)
    assert pids
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)
