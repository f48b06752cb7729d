"""The control panel's real command line on a pseudo-terminal (``r9kctl tui``), for the tests of what only a
terminal can do to it: closed (SIGHUP), killed (SIGKILL)."""
from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import sys
import time


class Terminal:
    """The panel started in a child process on a pseudo-terminal of 100x30; ``fd`` its side of the terminal."""

    def __init__(self, pid: int, fd: int):
        self.pid, self.fd = pid, fd

    def read_until(self, needle: bytes, timeout: float) -> bytes:
        """What the panel writes until ``needle`` is among it, or ``timeout`` seconds pass, or it ends."""
        buf = b""
        end = time.monotonic() + timeout
        while time.monotonic() < end and needle not in buf:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    buf += os.read(self.fd, 65536)
                except OSError:
                    break
        return buf

    def write(self, data: bytes) -> None:
        os.write(self.fd, data)

    def wait_drained(self, timeout: float) -> bool:
        """Wait for the panel to end, reading the terminal meanwhile (a full terminal would block its last
        writes); whether it ended."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if os.waitpid(self.pid, os.WNOHANG) != (0, 0):
                return True
            self.read_until(b"\0never", 0.2)
        return False


@contextlib.contextmanager
def panel_on_a_terminal(profile: str):
    """``r9kctl tui --profile PROFILE`` on a pseudo-terminal; the child is killed and reaped on the way out,
    whatever happened (a hung test must not leave it behind)."""
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="100", LINES="30")
    pid, fd = pty.fork()
    if pid == 0:  # the child: the panel on the pty
        os.execve(sys.executable, [sys.executable, "-m", "r9k.r9kctl.cli", "tui", "--profile", profile], env)
    try:
        yield Terminal(pid, fd)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)
