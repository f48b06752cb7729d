"""A headless Chromium driven over its DevTools protocol (one websocket, the ``websockets`` package that
vLLM already brings): enough for the browser tests of ``r9kctl tui --serve``. Chromium is Debian's
``chromium`` package (``apt-get install -y chromium``); :func:`find_chromium` says where it is or why not.

What the page shows is read from what it received: a script injected before the page loads records every
websocket message (textual-serve sends the panel's terminal output over one), so a test can wait for a
word of the panel; a screenshot is ``Page.captureScreenshot``.
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Optional

# Every message the page's websockets receive, decoded as text, appended to window.__r9k_rx.
RECORDER = """
(() => {
  const Native = window.WebSocket;
  window.__r9k_rx = [];
  const dec = new TextDecoder("utf-8");
  window.WebSocket = function (...args) {
    const ws = new Native(...args);
    ws.addEventListener("message", async (ev) => {
      let d = ev.data;
      if (d instanceof Blob) d = await d.arrayBuffer();
      window.__r9k_rx.push(typeof d === "string" ? d : dec.decode(new Uint8Array(d)));
    });
    return ws;
  };
  window.WebSocket.prototype = Native.prototype;
  Object.assign(window.WebSocket, Native);
})();
"""

KEYS = {  # key name -> (key, code, windowsVirtualKeyCode, text)
    "enter": ("Enter", "Enter", 13, "\r"),
    "escape": ("Escape", "Escape", 27, ""),
    "tab": ("Tab", "Tab", 9, ""),
}


def find_chromium() -> Optional[str]:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    """``async with Chromium(tmp) as page:`` a headless browser with one page."""

    def __init__(self, tmp: Path, width: int = 1400, height: int = 900) -> None:
        self.tmp = tmp
        self.width, self.height = width, height
        self.proc: Optional[subprocess.Popen] = None
        self.ws = None
        self._id = 0

    async def __aenter__(self) -> "Chromium":
        try:
            return await self._start()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise

    async def _start(self) -> "Chromium":
        import websockets

        profile = self.tmp / "chromium-profile"
        profile.mkdir(parents=True, exist_ok=True)
        (profile / "DevToolsActivePort").unlink(missing_ok=True)  # a previous run's
        self.log = open(self.tmp / "chromium.log", "wb")
        self.proc = subprocess.Popen(
            [find_chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", f"--window-size={self.width},{self.height}", "about:blank"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 120
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start: {(self.tmp / 'chromium.log').read_text()[-2000:]}")
            await asyncio.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        pages = []
        while not pages and time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                pages = [t for t in json.loads(r.read()) if t.get("type") == "page"]
            await asyncio.sleep(0.2)
        self.ws = await websockets.connect(pages[0]["webSocketDebuggerUrl"], max_size=None)
        await self.send("Page.enable")
        await self.send("Runtime.enable")
        await self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                        deviceScaleFactor=1, mobile=False)
        await self.send("Page.addScriptToEvaluateOnNewDocument", source=RECORDER)
        return self

    async def __aexit__(self, *exc) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)
            self.proc = None
        self.log.close()

    async def send(self, method: str, **params) -> dict:
        self._id += 1
        my = self._id
        await self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        while True:
            msg = json.loads(await asyncio.wait_for(self.ws.recv(), timeout=120))
            if msg.get("id") == my:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    async def eval(self, expression: str):
        res = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return res.get("result", {}).get("value")

    async def received(self) -> str:
        """Everything the page's websockets received so far."""
        return await self.eval("(window.__r9k_rx || []).join('')") or ""

    async def wait_for(self, needle: str, timeout: float, since: int = 0) -> int:
        """Wait until the page received ``needle`` (after the first ``since`` characters); returns how much
        it had received then."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = await self.received()
            if needle in got[since:]:
                return len(got)
            await asyncio.sleep(0.3)
        raise AssertionError(f"the page never showed {needle!r} within {timeout:g} s; last received: "
                             f"{(await self.received())[-1500:]!r}")

    async def settle(self, quiet: float = 0.8, timeout: float = 60) -> None:
        """Wait until the page has received nothing new for ``quiet`` seconds (the panel handled the last
        key and painted): the next key then reaches the widget that now has the focus."""
        deadline = time.monotonic() + timeout
        last, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            n = await self.eval("(window.__r9k_rx || []).length")
            if n != last:
                last, since = n, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return
            await asyncio.sleep(0.1)

    async def focus_terminal(self) -> None:
        """Keys go to the terminal's input element (xterm.js's helper textarea)."""
        await self.eval("document.querySelector('.xterm-helper-textarea').focus()")

    async def key(self, name: str) -> None:
        """A named key (enter, escape, tab) as a key press; anything else is typed as text."""
        if name not in KEYS:
            await self.type(name)
            return
        key, code, vk, _text = KEYS[name]
        for kind in ("rawKeyDown", "keyUp"):
            await self.send("Input.dispatchKeyEvent", type=kind, key=key, code=code, windowsVirtualKeyCode=vk,
                            nativeVirtualKeyCode=vk)
        await self.settle()

    async def type(self, text: str) -> None:
        """Text into the terminal (xterm.js reads it as input, as from a keyboard)."""
        await self.send("Input.insertText", text=text)
        await self.settle()

    async def screenshot(self, path: Path) -> None:
        res = await self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(res["data"]))
