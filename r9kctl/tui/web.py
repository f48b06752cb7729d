"""``r9kctl tui --serve``: the control panel in a web browser, through textual-serve (the extra ``web``).

Every browser tab gets its own ``r9kctl tui`` process (textual-serve runs the command with its web
driver). Loopback (127.0.0.1, ::1, localhost) by default. Any other address makes the server require a
token, printed once at start (in the URL to open): the page, its websocket and its files answer 403
without it. The token travels as ``?token=`` on the first request; the page's own requests then carry a
cookie (HttpOnly, SameSite=Strict). This is an access check, not encryption: across an untrusted network,
put it behind TLS (an SSH tunnel to the loopback port is the simplest).
"""
from __future__ import annotations

import hmac
import secrets
import shlex
import sys
from typing import Optional

LOOPBACK = ("127.0.0.1", "::1", "localhost")
COOKIE = "r9k_token"


def needs_token(host: str) -> bool:
    return host not in LOOPBACK and not host.startswith("127.")


def make_server(argv: list[str], host: str, port: int, token: Optional[str]):
    """A textual-serve ``Server`` running ``argv`` for each browser; with ``token``, only requests that
    carry it (query or cookie) get an answer."""
    from aiohttp import web
    from textual_serve.server import Server

    class TokenServer(Server):
        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            if token is not None:
                app.middlewares.append(_check_token)
            return app

    @web.middleware
    async def _check_token(request, handler):
        given = request.query.get("token") or request.cookies.get(COOKIE) or ""
        if not hmac.compare_digest(given.encode(), token.encode()):
            return web.Response(status=403, text="r9kctl tui --serve: a token is required (the URL printed at start)\n")
        response = await handler(request)
        if request.query.get("token") and isinstance(response, web.Response):
            response.set_cookie(COOKIE, token, httponly=True, samesite="Strict")
        return response

    command = " ".join(shlex.quote(a) for a in argv)
    return TokenServer(command, host=host, port=port, title="r9kctl tui")


def serve(argv: list[str], host: str = "127.0.0.1", port: int = 8080) -> int:
    """Serve until interrupted. Prints the URL to open (with the token when one is required)."""
    try:
        import textual_serve  # noqa: F401
    except ImportError:
        sys.stderr.write("r9kctl tui: error[usage]: --serve needs textual-serve: pip install 'r9k-stack[web]' "
                         "(or pip install textual-serve)\n")
        return 2
    if not 0 < port < 65536:
        sys.stderr.write(f"r9kctl tui: error[usage]: --port {port}: must be 1 to 65535\n")
        return 2
    token = secrets.token_urlsafe(24) if needs_token(host) else None
    srv = make_server(argv, host, port, token)
    url = srv.public_url + (f"/?token={token}" if token else "/")
    print(f"r9kctl tui: serving the control panel on {url}" + ("" if token else " (loopback only)"), flush=True)
    if token:
        print("r9kctl tui: the token is required from any address; keep the URL private", flush=True)
    srv.serve()
    return 0
