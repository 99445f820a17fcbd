"""Faults a command meets outside its own logic, turned into one line before anything is written:
an output location that cannot be written, a service that cannot be reached, SIGTERM. (Whether
a Ray address is a Ray cluster is asked by ``ray_cluster.check_ray_address``.)

Light (the standard library and engine.storage.runs): the command line imports it on every start.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from charactereval_lib.engine.storage import runs

# Bounded waits of the pre-flight checks: a wrong address fails within seconds, never hangs.
CONNECT_TIMEOUT_S = 5.0
# OS errors that mean the path given cannot be used (bad input, exit 2); any other one (a full
# disk, an I/O error) is a failure of the run (exit 1).
_BAD_PATH_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.ENOENT,
                    errno.EEXIST, errno.ENAMETOOLONG, errno.ELOOP}


class Unreachable(Exception):
    """A service (an endpoint, a Ray cluster) that does not answer at its address: the run
    fails (exit 1), as one whose endpoint stops answering does."""


def os_error_line(exc: OSError) -> str:
    """``PATH: reason`` of an OS error, the path the one the OS named."""
    reason = exc.strerror or str(exc)
    if exc.filename is None:
        return reason
    return f"{exc.filename}: {reason}" + (f" (-> {exc.filename2})" if exc.filename2 else "")


def os_error_status(exc: OSError) -> int:
    return 2 if exc.errno in _BAD_PATH_ERRNOS else 1


def check_writable(path: str | os.PathLike[str], what: str = "output directory") -> Path:
    """``path`` (a directory, existing or to be made) can be written: its nearest existing
    ancestor is a writable directory. Creates nothing, so a refused command leaves nothing."""
    path = Path(path)
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise runs.RunError(f"{path}: cannot write the {what}: {existing} is not a directory")
    if not os.access(existing, os.W_OK):
        reason = "read-only file system" if _read_only(existing) else "permission denied"
        inside = "" if existing == path else f" ({existing} is not writable)"
        raise runs.RunError(f"{path}: cannot write the {what}: {reason}{inside}")
    return path


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def connect_problem(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why nothing can be reached at ``host:port`` (a name that does not resolve, a refused or
    timed-out TCP connection), or None. Only connects; sends nothing."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except (socket.gaierror, UnicodeError):
        return f"the host name {host!r} does not resolve"
    except ConnectionRefusedError:
        return f"connection refused (is the server running on port {port}?)"
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except OSError as exc:
        return f"unreachable ({exc.strerror or exc})"


def endpoint_problem(base_url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why the HTTP(S) endpoint ``base_url`` cannot be reached, or None (the API itself is tried
    by the run)."""
    parsed = urlsplit(base_url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return f"{base_url}: not an http:// or https:// URL with a host"
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        return f"{base_url}: the port is not a number from 0 to 65535"
    problem = connect_problem(parsed.hostname, port, timeout_s)
    return f"{base_url}: {problem}" if problem else None


def check_endpoints(base_urls: Iterable[str | None], what: str) -> None:
    """Every distinct endpoint answers, else one line naming the first that does not."""
    for base_url in dict.fromkeys(u for u in base_urls if u):
        problem = endpoint_problem(base_url)
        if problem:
            raise Unreachable(f"{what}: {problem}")


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM stops the work like Ctrl-C (schedulers and ``docker stop`` send SIGTERM): it
    raises KeyboardInterrupt in the main thread, so every SIGINT path (records saved, the
    interrupted line, exit 130) serves both. A no-op outside the main thread."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
