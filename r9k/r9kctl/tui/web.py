"""``r9kctl tui --serve``: the control panel in a web browser, through textual-serve (the extra ``web``); each
tab runs its own ``r9kctl tui``, which can do all the panel does. So every request is checked, loopback too:

- a token printed once in the URL (``?token=``, then an HttpOnly SameSite=Strict cookie), else 403;
- ``Host`` an address literal, ``localhost``, this machine's name or ``--host`` (no DNS rebinding), and an
  ``Origin``, where sent, this server itself;
- at most ``max_panels`` panels at once (one more websocket answers 503);
- a panel whose tab closes, and all at the server's stop, is asked to quit, then SIGTERM, then SIGKILL.

An access check, not encryption: across an untrusted network, tunnel it.
"""
from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import secrets
import shlex
import signal
import socket
import sys
from typing import Optional
from urllib.parse import urlsplit

COOKIE = "r9k_token"
MAX_PANELS = 4
STOP_GRACE_S = 3.0


def allowed_hosts(bind: str) -> set[str]:
    """The names (lower case, no port) a ``Host`` header may carry besides address literals."""
    names = {"localhost", bind.lower().strip("[]")}
    with contextlib.suppress(OSError):
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    return names


def host_ok(host_header: str, names: set[str]) -> bool:
    """``Host`` is an IP literal or one of ``names`` (any port): never a name someone else's DNS controls."""
    if not host_header:
        return False
    try:
        parts = urlsplit("//" + host_header)
        name = (parts.hostname or "").lower()
        parts.port  # noqa: B018  (a malformed port raises ValueError)
    except ValueError:
        return False
    if not name:
        return False
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return name in names


def origin_ok(origin: Optional[str], host_header: str) -> bool:
    """No ``Origin`` (not a cross-site browser request), or one naming this very server (scheme://Host)."""
    if origin is None:
        return True
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host_header.lower()


def make_server(argv: list[str], host: str, port: int, token: str, max_panels: int = MAX_PANELS):
    """A textual-serve ``Server`` running ``argv`` for each browser, answering only requests that carry
    ``token`` (query or cookie), with an acceptable Host and Origin, ``max_panels`` panels at most."""
    from aiohttp import web
    from textual_serve.server import Server

    names = allowed_hosts(host)

    def refuse(status: int, why: str):
        return web.Response(status=status, text=f"r9kctl tui --serve: {why}\n")

    @web.middleware
    async def check(request, handler):
        host_header = request.headers.get("Host", "")
        if not host_ok(host_header, names):
            return refuse(403, "this Host is not this server's (open the URL printed at start)")
        if not origin_ok(request.headers.get("Origin"), host_header):
            return refuse(403, "a request from another site's page is refused")
        given = request.query.get("token") or request.cookies.get(COOKIE) or ""
        if not hmac.compare_digest(given.encode(), token.encode()):
            return refuse(403, "a token is required (the URL printed at start)")
        response = await handler(request)
        if request.query.get("token") and isinstance(response, web.Response):
            response.set_cookie(COOKIE, token, httponly=True, samesite="Strict")
        return response

    class PanelServer(Server):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.max_panels = max_panels
            self.panels: dict = {}  # app service -> its websocket, while a panel runs
            self.starting = 0

        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            app.middlewares.append(check)
            return app

        async def handle_websocket(self, request):
            if self.starting + len(self.panels) >= self.max_panels:
                return refuse(503, f"{self.max_panels} panels are open already (the most at once); "
                                   "close a tab or start with --max-panels N")
            self.starting += 1
            try:
                return await super().handle_websocket(request)
            finally:
                self.starting -= 1

        async def _process_messages(self, websocket, app_service) -> None:
            self.starting -= 1
            self.panels[app_service] = websocket
            try:
                await super()._process_messages(websocket, app_service)
            finally:  # the tab is closed: this panel goes now, whether or not it heeds the quit packet
                await stop_panel(app_service, websocket)
                self.panels.pop(app_service, None)
                self.starting += 1

        async def on_shutdown(self, app) -> None:
            await asyncio.gather(*(stop_panel(s, ws) for s, ws in list(self.panels.items())))

    command = "exec " + " ".join(shlex.quote(a) for a in argv)  # the shell becomes the panel: one pid to stop
    return PanelServer(command, host=host, port=port, title="r9kctl tui")


async def stop_panel(app_service, websocket) -> None:
    """Ask the panel to quit, then SIGTERM, then SIGKILL, a few seconds each; then close its websocket."""
    proc = getattr(app_service, "_process", None)
    with contextlib.suppress(Exception):  # a broken pipe: the panel is going anyway
        await asyncio.wait_for(app_service.send_meta({"type": "quit"}), STOP_GRACE_S)
    if proc is not None:
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None and proc.returncode is None:
                try:
                    proc.send_signal(sig)
                except ProcessLookupError:
                    break
            try:
                await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
                break
            except asyncio.TimeoutError:
                continue
    with contextlib.suppress(Exception):
        await websocket.close()


def serve(argv: list[str], host: str = "127.0.0.1", port: int = 8080, max_panels: int = MAX_PANELS) -> int:
    """Serve until interrupted. Prints the URL to open, with the token, once."""
    try:
        import textual_serve  # noqa: F401
    except ImportError:
        sys.stderr.write("r9kctl tui: error[usage]: --serve needs textual-serve: pip install 'r9k-stack[web]' "
                         "(or pip install textual-serve)\n")
        return 2
    if not 0 < port < 65536:
        sys.stderr.write(f"r9kctl tui: error[usage]: --port {port}: must be 1 to 65535\n")
        return 2
    if max_panels < 1:
        sys.stderr.write(f"r9kctl tui: error[usage]: --max-panels {max_panels}: must be 1 or more\n")
        return 2
    token = secrets.token_urlsafe(24)
    srv = make_server(argv, host, port, token, max_panels)
    print(f"r9kctl tui: serving the control panel on {srv.public_url}/?token={token}", flush=True)
    print(f"r9kctl tui: the token is required from every address, loopback too; keep the URL private "
          f"(at most {max_panels} panels at once)", flush=True)
    srv.serve()
    return 0
