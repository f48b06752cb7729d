"""The one read path and the one writer for every file the project reads or writes.

Readers (:func:`read_bytes`, :func:`read_text`, :func:`read_toml`, :func:`read_json`, :func:`read_jsonl`,
:func:`read_xml`) check existence, links, file type, size, UTF-8, syntax and nesting (:data:`MAX_DEPTH`); each
failure raises :class:`FileError` with one located diagnostic. Writers (:func:`atomic_write`,
:func:`atomic_append`, :func:`update`, :func:`open_for_writing`) replace only regular files (``/dev/stdout``
and ``/dev/fd/N`` are written to), through a temporary file, fsync and rename, under :func:`locked` for
appends and read-modify-writes. Standard library only (plus :mod:`.errors`): the plugin imports it at startup.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import sys
import threading
import tomllib
from pathlib import Path
from typing import Any, Callable, Optional, Union

try:
    import fcntl
except ImportError:  # not POSIX: writes go without the advisory lock
    fcntl = None  # type: ignore[assignment]

from .errors import Diagnostic, RegistryError

#: Files larger than this are refused (registry files are a few kB; the largest result files a few MB).
MAX_BYTES = 32 * 1024 * 1024
#: Tables, arrays and objects nested deeper than this are refused (the registry needs 5).
MAX_DEPTH = 32

PathLike = Union[str, os.PathLike]


class FileError(RegistryError):
    """A file that cannot be used; one located diagnostic (``.diagnostic``)."""

    def __init__(self, diagnostic: Diagnostic):
        self.diagnostic = diagnostic
        super().__init__([diagnostic])

    @property
    def kind(self) -> str:
        return self.diagnostic.code


class WriteError(FileError, OSError):
    """A file that could not be written (the old content is intact); also an OSError."""


def display_path(p: PathLike) -> str:
    """A path as a person reads it: relative to the working directory when below it; control characters
    (a newline or an escape sequence in a file name) shown escaped, so a name cannot forge a line."""
    p = Path(p)
    try:
        absolute = Path(os.path.abspath(p))
        shown = str(absolute.relative_to(Path.cwd()))
    except (ValueError, OSError):
        shown = str(p)
    if _CONTROL.search(shown):
        shown = _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), shown)
    return shown


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def error(path: Optional[PathLike], kind: str, message: str, line: Optional[int] = None,
          col: Optional[int] = None, hint: Optional[str] = None, items=()) -> FileError:
    """A FileError for ``path`` (not raised: ``raise error(...)``)."""
    shown = display_path(path) if path is not None else None
    return FileError(Diagnostic("error", kind, message, shown, line, col, list(items), hint))


# --------------------------------------------------------------------------------------------- reading


def _open_error(p: Path, exc: OSError, what: str) -> FileError:
    if exc.errno == errno.ENOENT:
        if os.path.islink(p):
            return error(p, "not-found", f"{what} is a symlink to {os.readlink(p)!r}, which does not exist")
        parent = p.parent
        if not parent.exists():
            return error(p, "not-found", f"{what} does not exist (nor does its folder {display_path(parent)})")
        return error(p, "not-found", f"{what} does not exist")
    if exc.errno == errno.ELOOP:
        return error(p, "symlink-loop", f"{what} is a symlink loop (it points back to itself)")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return error(p, "permission", f"{what} is not readable (permission denied)")
    if exc.errno == errno.ENOTDIR:
        return error(p, "not-found", f"{what} does not exist (a part of its path is a file, not a folder)")
    if exc.errno == errno.EISDIR:
        return error(p, "is-directory", f"{what} is a folder, not a file")
    if exc.errno == errno.ENAMETOOLONG:
        return error(p, "io", f"the path of this {what} is too long")
    return error(p, "io", f"cannot read this {what}: {exc.strerror or exc}")


def _fmt_size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def read_bytes(path: PathLike, what: str = "file", max_bytes: Optional[int] = None) -> bytes:
    """The bytes of a regular file, or a located FileError (missing, loop, folder, permission, size)."""
    p = Path(path)
    if max_bytes is None:
        max_bytes = MAX_BYTES
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _open_error(p, exc, what) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(p, "is-directory", f"{what} is a folder, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise error(p, "not-a-file", f"{what} is not a regular file (a FIFO, socket or device)")
        if st.st_size > max_bytes:
            raise error(p, "too-large", f"{what} is {_fmt_size(st.st_size)}; the limit is {_fmt_size(max_bytes)}")
        chunks, total = [], 0
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except OSError as exc:
                raise _open_error(p, exc, what) from None
            if not chunk:
                break
            total += len(chunk)
            if total > max_bytes:
                raise error(p, "too-large", f"{what} is larger than the limit of {_fmt_size(max_bytes)}")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


_BOMS = (
    (b"\x00\x00\xfe\xff", "UTF-32 (big-endian)"),
    (b"\xff\xfe\x00\x00", "UTF-32 (little-endian)"),
    (b"\xfe\xff", "UTF-16 (big-endian)"),
    (b"\xff\xfe", "UTF-16 (little-endian)"),
)


def _line_col(data: bytes, pos: int) -> tuple[int, int]:
    """1-based line and character column of byte offset ``pos``."""
    line = data.count(b"\n", 0, pos) + 1
    start = data.rfind(b"\n", 0, pos) + 1
    col = len(data[start:pos].decode("utf-8", errors="replace")) + 1
    return line, col


def decode(data: bytes, path: Optional[PathLike] = None, what: str = "file") -> str:
    """UTF-8 text of ``data`` (a UTF-8 BOM dropped), or a located FileError naming the encoding problem."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    else:
        for bom, name in _BOMS:
            if data.startswith(bom):
                raise error(path, "encoding", f"{what} is {name} text; only UTF-8 is read", 1, 1,
                            hint="save it as UTF-8")
    nul = data.find(b"\x00")
    if nul >= 0:
        line, col = _line_col(data, nul)
        guess = "UTF-16 text without a BOM" if nul <= 1 or data[1::2].count(0) > len(data) // 4 else "binary data"
        raise error(path, "encoding", f"{what} holds a NUL byte ({guess}?); only UTF-8 text is read", line, col,
                    hint="save it as UTF-8")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = _line_col(data, exc.start)
        b = data[exc.start]
        guess = ""
        if b >= 0xA0:
            guess = f" (Latin-1 {bytes([b]).decode('latin-1')!r}?)"
        elif 0x80 <= b < 0xA0:
            guess = " (Windows-1252?)"
        raise error(path, "encoding", f"{what} is not UTF-8: byte 0x{b:02x}{guess}", line, col,
                    hint="save it as UTF-8") from None


def read_text(path: PathLike, what: str = "file", max_bytes: Optional[int] = None) -> str:
    """The UTF-8 text of a file (all checks of :func:`read_bytes` and :func:`decode`)."""
    return decode(read_bytes(path, what, max_bytes), path, what)


def _too_deep(path, text: str, what: str, comments: bool = True) -> FileError:
    """A too-deep error at the first bracket nesting deeper than MAX_DEPTH (best effort; else 1:1)."""
    depth, at = 0, (1, 1)
    for n, ln in enumerate(text.split("\n"), 1):
        quote: Optional[str] = None
        i = 0
        while i < len(ln):
            ch = ln[i]
            if quote:
                if ch == "\\" and quote == '"':
                    i += 1
                elif ch == quote:
                    quote = None
            elif ch in "\"'":
                quote = ch
            elif ch == "#" and comments:
                break  # a TOML comment
            elif ch in "[{":
                depth += 1
                if depth > MAX_DEPTH:
                    return error(path, "too-deep", f"{what} nests deeper than {MAX_DEPTH} levels", n, i + 1)
            elif ch in "]}":
                depth = max(0, depth - 1)
            i += 1
    return error(path, "too-deep", f"{what} nests deeper than {MAX_DEPTH} levels", *at)


def _depth(obj: Any, limit: int = MAX_DEPTH, text: Optional[str] = None) -> bool:
    """True when ``obj`` nests deeper than ``limit`` (iterative: no recursion on hostile input). ``text``: its
    JSON, when known: with at most ``limit`` brackets in all it cannot nest deeper, and is not walked."""
    if text is not None and text.count("[") + text.count("{") <= limit:
        return False
    stack = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict):
            if d > limit:
                return True
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            if d > limit:
                return True
            stack.extend((v, d + 1) for v in o)
    return False


def _deep_key_line(text: str) -> tuple[int, int]:
    """Line of the first TOML header or key with more than MAX_DEPTH dotted parts (1, 1 if none)."""
    for n, ln in enumerate(text.splitlines(), 1):
        s = ln.strip()
        head = re.match(r"^\[\[?([^\]]*)\]", s)
        key = head.group(1) if head else s.split("=", 1)[0] if "=" in s else ""
        if key.count(".") + 1 > MAX_DEPTH - 1:
            return n, len(ln) - len(ln.lstrip()) + 1
    return 1, 1


def toml_syntax_error(path: Optional[PathLike], text: str, exc: Exception) -> FileError:
    """A located toml-syntax FileError from tomllib's exception."""
    msg = str(exc)
    line = col = None
    m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
    if m:
        line, col = int(m.group(1)), int(m.group(2))
        msg = msg[: m.start()].strip()
        src = text.splitlines()[line - 1] if 0 < line <= len(text.splitlines()) else ""
        if msg.startswith(("Cannot overwrite", "Cannot declare")) and src.strip():
            # tomllib points after the value; the fault is the key (or the table header) given a second time
            col = len(src) - len(src.lstrip()) + 1
            key = src.strip().split("=", 1)[0].strip() if "=" in src else src.strip().split("#", 1)[0].strip()
            msg = f"{key} is given twice in this file ({msg})"
    elif "(at end of document)" in msg:
        line = len(text.splitlines()) or 1
        msg = msg.replace("(at end of document)", "").strip()
    return error(path, "toml-syntax", f"TOML syntax error: {msg}", line, col)


def parse_toml(text: str, path: Optional[PathLike] = None, what: str = "TOML file") -> dict:
    """Parsed TOML, or a located FileError (syntax, nesting depth)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise toml_syntax_error(path, text, exc) from None
    except RecursionError:
        raise _too_deep(path, text, what) from None
    if _depth(data, MAX_DEPTH):
        bracket = _too_deep(path, text, what)
        if (bracket.diagnostic.line, bracket.diagnostic.col) != (1, 1):
            raise bracket
        raise error(path, "too-deep", f"{what} nests deeper than {MAX_DEPTH} levels", *_deep_key_line(text))
    return data


def read_toml(path: PathLike, what: str = "TOML file", max_bytes: Optional[int] = None) -> dict:
    return parse_toml(read_text(path, what, max_bytes), path, what)


_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
               bool: "true/false", type(None): "null"}


def json_type(o: Any) -> str:
    """What a parsed JSON value is, in words (``an object``, ``true/false``, ...)."""
    return _JSON_TYPES.get(type(o), type(o).__name__)


def _first_char(text: str) -> tuple[int, int]:
    for n, ln in enumerate(text.splitlines(), 1):
        s = ln.lstrip()
        if s:
            return n, len(ln) - len(s) + 1
    return 1, 1


def parse_json(text: str, path: Optional[PathLike] = None, what: str = "JSON file", expect: Any = None,
               line_offset: int = 0) -> Any:
    """Parsed JSON (``expect``: the type(s) the top-level value must have), or a FileError; ``line_offset``:
    the line ``text`` starts at minus one (one line of a JSON Lines file)."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        msg = exc.msg
        if not text.strip():
            msg = "empty; expected a JSON value"
        raise error(path, "json-syntax", f"JSON syntax error: {msg}", exc.lineno + line_offset, exc.colno) from None
    except RecursionError:
        raise _too_deep(path, text, what, comments=False) from None
    except ValueError as exc:  # e.g. an integer with too many digits
        raise error(path, "json-syntax", f"JSON error: {exc}", 1 + line_offset, 1) from None
    if _depth(obj, MAX_DEPTH, text):
        raise _too_deep(path, text, what, comments=False)
    if expect is not None:
        types = expect if isinstance(expect, tuple) else (expect,)
        if not isinstance(obj, types) or (isinstance(obj, bool) and bool not in types):
            want = " or ".join(dict.fromkeys(_JSON_TYPES.get(t, t.__name__) for t in types))
            line, col = _first_char(text)
            raise error(path, "wrong-type", f"{what} must hold {want}, not {json_type(obj)}", line + line_offset,
                        col)
    return obj


def read_json(path: PathLike, what: str = "JSON file", expect: Any = None, max_bytes: Optional[int] = None) -> Any:
    return parse_json(read_text(path, what, max_bytes), path, what, expect)


def read_jsonl(path: PathLike, what: str = "JSON Lines file", expect: Any = dict, max_bytes: Optional[int] = None,
               problems: Optional[list] = None) -> list[tuple[int, Any]]:
    """(line number, value) per non-blank line; a bad line raises, or with ``problems`` is skipped there."""
    text = read_text(path, what, max_bytes)
    out = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            out.append((lineno, parse_json(line, path, f"line {lineno} of this {what}", expect, lineno - 1)))
        except FileError as exc:
            if problems is None:
                raise
            problems.append(exc.diagnostic)
    return out


def read_xml(path: PathLike, what: str = "XML file", max_bytes: Optional[int] = None):
    """The root element of an XML file, or a located FileError; document types (and entities) are refused."""
    return parse_xml(read_text(path, what, max_bytes), path, what)


def parse_xml(text: str, path: Optional[PathLike] = None, what: str = "XML file"):
    """The root element of an XML text, or a located FileError (see :func:`read_xml`)."""
    import xml.etree.ElementTree as ET

    m = re.search(r"<!DOCTYPE|<!ENTITY", text)
    if m:
        line, col = _line_col(text.encode("utf-8"), len(text[: m.start()].encode("utf-8")))
        raise error(path, "xml-syntax", f"{what} declares a document type or entities; they are not accepted",
                    line, col)
    parser = ET.XMLParser(encoding="utf-8")
    try:
        parser.feed(text.encode("utf-8"))
        return parser.close()
    except ET.ParseError as exc:
        line, col = getattr(exc, "position", (1, 0))
        msg = str(exc).split(": line")[0]
        raise error(path, "xml-syntax", f"XML syntax error: {msg}", line, col + 1) from None
    except RecursionError:
        raise error(path, "too-deep", f"{what} nests too deeply", 1, 1) from None


# --------------------------------------------------------------------------------------------- writing

#: Paths that name an open stream of this process, not a file: writing to them writes to the stream (what
#: ``--out /dev/stdout`` means), it never replaces the file or pipe the stream is redirected to.
_STREAM = re.compile(r"^/(?:dev/(?:std(?P<std>out|err)|fd/(?P<fd>\d+))|proc/(?:self|\d+)/fd/(?P<pfd>\d+))$")


def _stream_fd(p: Path) -> Optional[int]:
    """The file descriptor a path such as ``/dev/stdout`` or ``/dev/fd/3`` names, or None."""
    m = _STREAM.match(os.path.abspath(p))
    if not m:
        return None
    if m.group("std"):
        return 1 if m.group("std") == "out" else 2
    if m.group(0).startswith("/proc/") and not m.group(0).startswith(("/proc/self/", f"/proc/{os.getpid()}/")):
        return None  # another process's descriptor: an ordinary (refused) path
    return int(m.group("fd") or m.group("pfd"))


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def _not_regular(mode: int) -> Optional[str]:
    return next((name for test, name in _KINDS if test(mode)), None)


def _refused(p: Path, kind: str, message: str, hint: Optional[str] = None) -> "WriteError":
    """A writer's refusal: one located line (a WriteError: an OSError too)."""
    return WriteError(Diagnostic("error", kind, message, display_path(p), None, None, [], hint))


def _write_target(p: Path, what: str = "file", within: Optional[PathLike] = None) -> Path:
    """The file a write to ``p`` must replace: the end of its symlink chain. Refuses a link loop, a link
    outside ``within`` (by default ``p``'s folder) and a target that is not a regular file."""
    target = p
    if os.path.islink(p):
        try:
            os.stat(p)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _refused(p, "symlink-loop", "cannot write: the path is a symlink loop; it was left alone") \
                    from None
            # a dangling link: create the file it names (inside the folder, checked below)
        target = Path(os.path.realpath(p))
        root = os.path.realpath(within if within is not None else os.path.dirname(os.path.abspath(p)))
        if os.path.commonpath([root, str(target)]) != root:
            raise _refused(p, "not-a-file", f"cannot write: this {what} is a symlink to {display_path(target)}, "
                                            f"outside {display_path(root)}; it was left alone",
                           hint="write to the file itself, or remove the link")
    try:
        st = os.stat(target)
    except OSError:
        return target
    if stat.S_ISDIR(st.st_mode):
        raise _refused(p, "is-directory", f"cannot write: this {what} is a folder; it was left alone")
    kind = _not_regular(st.st_mode)
    if kind:
        raise _refused(p, "not-a-file", f"cannot write: this {what} is {kind}, not a regular file; it was left "
                                        "alone", hint="name a regular file, or /dev/stdout to print it")
    return target


# ---- the advisory lock: one per folder (no lock file is left behind; it survives the rename of the file).
_locks_guard = threading.Lock()
_held: dict[str, list] = {}  # folder -> [RLock, depth, fd or None]


@contextlib.contextmanager
def locked(path: PathLike):
    """An exclusive, re-entrant advisory lock (``fcntl.flock`` on the folder of ``path``'s target) for a
    read-modify-write or an append; a folder that cannot be opened is written without one."""
    folder = os.path.realpath(_write_target(Path(path)).parent)
    with _locks_guard:
        entry = _held.setdefault(folder, [threading.RLock(), 0, None])
    entry[0].acquire()
    try:
        if entry[1] == 0:
            entry[2] = None
            if fcntl is not None:
                try:
                    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
                except OSError:
                    fd = None
                if fd is not None:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX)
                        entry[2] = fd
                    except OSError:
                        os.close(fd)
        entry[1] += 1
        try:
            yield
        finally:
            entry[1] -= 1
            if entry[1] == 0 and entry[2] is not None:
                try:
                    fcntl.flock(entry[2], fcntl.LOCK_UN)
                finally:
                    os.close(entry[2])
                    entry[2] = None
    finally:
        entry[0].release()


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (``kill(pid, 0)``); a negative ``pid`` asks for the process group ``-pid``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, and belongs to someone else
        pass
    return True


def _remove_stale_temps(target: Path) -> None:
    """Temporary files of earlier writes to ``target`` whose writer died (killed during a save)."""
    prefix = f".{target.name}."
    try:
        names = os.listdir(target.parent)
    except OSError:
        return
    for n in names:
        if not (n.startswith(prefix) and n.endswith(".tmp")):
            continue
        m = re.match(r"^(\d+)\.", n[len(prefix):])
        if not m or int(m.group(1)) == os.getpid() or pid_alive(int(m.group(1))):
            continue
        try:
            os.unlink(target.parent / n)
        except OSError:
            pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _write_error(p: Path, what: str, exc: OSError) -> WriteError:
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        reason = "permission denied" if exc.errno != errno.EROFS else "read-only file system"
    return WriteError(Diagnostic("error", "write", f"cannot write this {what}: {reason}; the file is unchanged",
                                 display_path(p)))


def _write_stream(p: Path, fd: int, data: bytes, what: str) -> Path:
    """Write to an open stream of this process (``/dev/stdout``): appended to it, nothing replaced."""
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:  # a closed or replaced stream: nothing to flush
            pass
    try:
        _write_all(fd, data)
    except OSError as exc:
        raise _write_error(p, what, exc) from None
    return p


def atomic_write(path: PathLike, data: Union[str, bytes], what: str = "file", mode: Optional[int] = None,
                 within: Optional[PathLike] = None) -> Path:
    """Replace ``path``'s content with ``data`` atomically; returns the file written (a link's target), or
    raises a located FileError with the old file unchanged. ``within``: a folder the file must be in."""
    p = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd = _stream_fd(p)
    if fd is not None:
        return _write_stream(p, fd, data, what)
    target = _write_target(p, what, within)
    folder = target.parent
    if not folder.is_dir():
        raise error(p, "not-found", f"cannot write: the folder {display_path(folder)} does not exist")
    if mode is None:
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except OSError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
    _remove_stale_temps(target)
    tmp = None
    try:
        import tempfile  # noqa: PLC0415 - with random and shutil under it, only when something is written

        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp")
        try:
            _write_all(fd, data)
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        _write_target(p, what, within)  # still a regular file (or none) at the moment of the rename
        os.replace(tmp, target)
        tmp = None
        try:  # make the rename itself durable
            dfd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass
    except OSError as exc:
        raise _write_error(p, what, exc) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return target


def _read_old(p: Path, what: str) -> Optional[bytes]:
    try:
        return read_bytes(p, what)
    except FileError as exc:
        if exc.kind != "not-found" or os.path.islink(p):
            raise
        return None


def update(path: PathLike, change: Callable[[Optional[bytes]], Union[str, bytes]], what: str = "file",
           within: Optional[PathLike] = None) -> Path:
    """A read-modify-write under :func:`locked`: ``change(old bytes or None)`` returns the new content."""
    p = Path(path)
    if _stream_fd(p) is not None:
        return atomic_write(p, change(None), what)
    with locked(p):
        _write_target(p, what, within)
        return atomic_write(p, change(_read_old(p, what)), what, within=within)


def atomic_append(path: PathLike, data: Union[str, bytes], what: str = "file",
                  within: Optional[PathLike] = None) -> Path:
    """Append ``data`` to ``path`` (created if missing) by an :func:`update`."""
    if isinstance(data, str):
        data = data.encode("utf-8")

    def add(old: Optional[bytes]) -> bytes:
        old = old or b""
        if old and not old.endswith(b"\n"):
            old += b"\n"
        return old + data

    return update(path, add, what, within)


def open_for_writing(path: PathLike, append: bool = False, what: str = "file", within: Optional[PathLike] = None):
    """A text stream for a file written piece by piece (a log), with :func:`atomic_write`'s target checks."""
    p = Path(path)
    fd = _stream_fd(p)
    if fd is not None:
        return os.fdopen(os.dup(fd), "w", encoding="utf-8")
    target = _write_target(p, what, within)
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    flags |= os.O_APPEND if append else os.O_TRUNC
    try:
        fd = os.open(target, flags, 0o666)
    except OSError as exc:
        raise _write_error(p, what, exc) from None
    if _not_regular(os.fstat(fd).st_mode):  # replaced by a FIFO or device between the check and the open
        os.close(fd)
        raise _refused(p, "not-a-file", f"cannot write: this {what} is not a regular file; it was left alone")
    return os.fdopen(fd, "a" if append else "w", encoding="utf-8")


def move_into_place(src: PathLike, path: PathLike, what: str = "file") -> Path:
    """Rename the finished file ``src`` onto ``path`` with :func:`atomic_write`'s checks."""
    p = Path(path)
    target = _write_target(p, what)
    try:
        os.replace(src, target)
    except OSError as exc:
        raise _write_error(p, what, exc) from None
    return target
