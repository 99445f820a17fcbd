"""Faults a command meets outside its own logic, turned into one line before anything is written:
an output location that cannot be written, a service that cannot be reached, SIGTERM.

Light (the standard library and engine.runs): the command line imports it on every start.
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

from charactereval_lib.engine import runs

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


def check_ray_address(address: str) -> None:
    """A Ray address answers before it is handed to Ray (which can wait for minutes on a wrong
    one): ``HOST:PORT`` (the GCS) and ``ray://HOST:PORT`` (the client server) are connected to
    with a bounded wait; ``auto`` needs a cluster started on this machine."""
    what = f"--address {address}"
    if address == "auto":
        found = os.environ.get("RAY_ADDRESS") or _ray_current_cluster()
        if not found or found == "auto":
            raise Unreachable(f"{what}: no Ray cluster was started on this machine (`ray start --head`), "
                              "and RAY_ADDRESS is not set")
        what, address = f"{what} ({found})", found
    target = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c in host for c in "/ @!?#"):
        raise runs.RunError(f"{what}: expected auto, HOST:PORT or ray://HOST:PORT (e.g. 10.0.0.5:6379)")
    host = host.strip("[]")
    problem = connect_problem(host, int(port))
    if problem is None and not address.startswith("ray://"):
        problem = _gcs_problem(host, int(port))
    if problem:
        raise Unreachable(f"{what}: {problem}")


# Ray's GCS (a HOST:PORT address) is a gRPC server. A TCP connection alone proves little (a proxy
# or firewall may accept any), and an HTTP/2 greeting neither (a proxy may speak HTTP/2): the GCS
# is asked for its cluster id, the call `ray.init` makes first, in the plainest HTTP/2 (literal
# header fields, an empty request message). A gRPC server answers HTTP status 200 whatever the
# call's outcome (a cluster with token authentication refuses it, in a 200 response); a proxy
# answers another status.
_GCS_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _GOAWAY = 0, 1, 3, 4, 7
_END_STREAM, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x4, 0x8, 0x20
# ":status: 200", entry 8 of HPACK's static table: the first field of a gRPC server's answer.
_STATUS_200 = 0x88


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def _literal(name: str, value: str) -> bytes:
    """An HPACK literal header field without indexing, new name, no Huffman coding."""
    encoded = b"\x00"
    for text in (name, value):
        data = text.encode()
        if len(data) > 126:
            raise ValueError(f"header field too long for this encoder: {text!r}")
        encoded += bytes([len(data)]) + data
    return encoded


def _gcs_problem(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why the server at ``host:port`` is not a Ray cluster's GCS, or None when it answered a
    cluster-id call as a gRPC server does within ``timeout_s``."""
    headers = b"".join(_literal(name, value) for name, value in (
        (":method", "POST"), (":scheme", "http"), (":path", _GCS_METHOD), (":authority", f"{host}:{port}"),
        ("content-type", "application/grpc"), ("te", "trailers")))
    request = (_HTTP2_PREFACE + _frame(_SETTINGS, 0, 0) + _frame(_HEADERS, _END_HEADERS, 1, headers)
               + _frame(_DATA, _END_STREAM, 1, bytes(5)))  # an empty, uncompressed message
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            conn.sendall(request)
            buffer = b""
            while chunk := conn.recv(65536):
                buffer += chunk
                while len(buffer) >= 9 and len(buffer) >= 9 + int.from_bytes(buffer[:3], "big"):
                    length, kind, flags = int.from_bytes(buffer[:3], "big"), buffer[3], buffer[4]
                    stream = int.from_bytes(buffer[5:9], "big") & 0x7FFFFFFF
                    payload, buffer = buffer[9:9 + length], buffer[9 + length:]
                    if kind == _HEADERS and stream == 1:
                        block = payload[1:] if flags & _PADDED else payload
                        block = block[5:] if flags & _PRIORITY else block
                        if block[:1] == bytes([_STATUS_200]):
                            return None
                    if kind in (_HEADERS, _RST_STREAM, _GOAWAY):
                        return "something accepts connections there, but it is not a Ray cluster (no gRPC " \
                               "answer to a cluster-id call)"
    except OSError as exc:
        return f"no answer from a Ray cluster within {timeout_s:g} s ({exc.strerror or exc})"
    return "the connection was closed without an answer to a cluster-id call (not a Ray cluster)"


def _ray_current_cluster() -> str | None:
    """The address a cluster started on this machine left where ``ray.init(address="auto")``
    looks for it, if any."""
    import tempfile

    try:
        return (Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster").read_text().strip() or None
    except OSError:
        return None


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
