"""A fault proxy in front of an S3 endpoint: it forwards every request as it came and, while a
fault is on, answers a share of them with S3's own error instead (docs/design.md, "Object
storage": store errors).

>>> proxy = StoreFaultProxy("http://127.0.0.1:9000")
>>> proxy.start()  # doctest: +SKIP
'http://127.0.0.1:...'
>>> proxy.fail(seconds=10, share=0.5)  # doctest: +SKIP
>>> proxy.stop()  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import io
import logging
import math
import socket
import socketserver
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from spark_ext.storage import StorageSettings

__all__ = ["S3_ERRORS", "FaultWindow", "StoreFaultProxy"]

log = logging.getLogger(__name__)

#: The errors the proxy answers, by status: S3's code and message for each (412: a conditional
#: create of an object that exists).
S3_ERRORS = {
    503: ("SlowDown", "Please reduce your request rate."),
    500: ("InternalError", "We encountered an internal error. Please try again."),
    412: ("PreconditionFailed", "At least one of the pre-conditions you specified did not hold"),
}
#: Bytes copied at a time between client and store.
CHUNK = 64 * 1024


@dataclass(frozen=True)
class FaultWindow:
    """A fault: until ``until`` (monotonic clock), a ``share`` of the requests is answered with
    the statuses of ``codes`` in turn. Which requests: the n-th since the fault began fails when
    ``floor(n * share)`` grows at n (every second one for 0.5), so a run is reproducible.
    ``applied``: a failed request reaches the store first (it took effect, its answer is lost)."""

    until: float
    share: float
    codes: tuple[int, ...] = (503, 500)
    applied: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.share <= 1:
            raise ValueError(f"share must be in (0, 1], not {self.share}")
        unknown = set(self.codes) - {503, 500}
        if not self.codes or unknown:
            raise ValueError(f"codes must be some of 503 and 500, not {self.codes}")

    def failed(self, n: int) -> bool:
        """Whether the ``n``-th request (from 1) since the fault began fails."""
        return math.floor(n * self.share) > math.floor((n - 1) * self.share)


class _Sink(io.BufferedIOBase):
    """Where the store's answer to a request failed after it was applied goes."""

    def writable(self) -> bool:
        return True

    def write(self, block: Any) -> int:
        return len(block)


class _Server(socketserver.ThreadingMixIn, HTTPServer):
    """A thread per client connection, at most ``limit`` at once (the next waits in the
    backlog); the threads are joined on close."""

    daemon_threads = True
    block_on_close = True
    allow_reuse_address = True

    def __init__(self, proxy: StoreFaultProxy, limit: int) -> None:
        self.proxy = proxy
        self.slots = threading.BoundedSemaphore(limit)
        self.open: set[socket.socket] = set()
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(timeout=_Handler.timeout):
            self.shutdown_request(request)  # every slot busy that long: refused
            return
        self.open.add(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.open.discard(request)
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.open.discard(request)
            self.slots.release()

    def close_connections(self) -> None:
        """End every client connection still open (their threads then return)."""
        for request in list(self.open):
            try:
                request.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    """One client connection: each request forwarded verbatim (the request line, every header
    as sent, the Host a SigV4 signature covers included, the body streamed), or failed."""

    protocol_version = "HTTP/1.1"
    server: _Server
    #: An idle client connection is closed after this many seconds (frees its slot).
    timeout = 20
    upstream: http.client.HTTPConnection | None = None

    def handle_expect_100(self) -> bool:
        """Decided per request in :meth:`_serve`: a failed request gets no ``100 Continue``."""
        return True

    def _serve(self) -> None:
        proxy = self.server.proxy
        code, applied = proxy._decide(self.command, self.path)
        if code is not None and not applied:
            self._fail(code, read=False)
            return
        create = self.command == "PUT" and self.headers.get("If-None-Match", "").strip() == "*"
        with proxy._create_lock(self.path) if create else contextlib.nullcontext():
            if create and proxy._exists(self.path):
                self._fail(412, read=False)
                return
            self._pass(proxy, code)

    def _pass(self, proxy: StoreFaultProxy, code: int | None) -> None:
        """Forward the request; answer ``code`` instead of the store's answer if given."""
        if self.headers.get("Expect", "").lower() == "100-continue":
            self.send_response_only(100)
            self.end_headers()
        client = self.wfile
        try:
            if code is not None:  # applied by the store, its answer replaced by the error
                self.wfile = _Sink()
            self._forward(proxy)
        except (OSError, http.client.HTTPException) as exc:  # either side closed, or the store
            log.info("store fault proxy: %s %s broke off: %s", self.command, self.path, exc)
            self.close_connection = True
            self._close_upstream()
            return
        finally:
            self.wfile = client
        if code is not None:
            self._fail(code, read=True)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _serve

    def _forward(self, proxy: StoreFaultProxy) -> None:
        if self.upstream is None:
            self.upstream = http.client.HTTPConnection(proxy.host, proxy.port, timeout=120)
        up = self.upstream
        up.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for name, value in self.headers.items():
            up.putheader(name, value)
        up.endheaders()
        self._copy_body(up.send)
        answer = up.getresponse()
        self.send_response_only(answer.status, answer.reason)
        chunked = answer.getheader("Transfer-Encoding", "").lower() == "chunked"
        for name, value in answer.getheaders():
            self.send_header(name, value)
        self.end_headers()
        while block := answer.read(CHUNK):  # none after HEAD: http.client knows the method
            self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block) if chunked else block)
        answer.close()
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        if answer.will_close:
            self.close_connection = True
            self._close_upstream()

    def _copy_body(self, send: Callable[[bytes], object] | None) -> None:
        """Stream the request's body (``Content-Length`` or chunked, framing kept) to ``send``
        (``None``: read and drop it)."""
        out = send or (lambda _block: None)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size_line = self.rfile.readline(1024)
                out(size_line)
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (line := self.rfile.readline(8192)) not in (b"\r\n", b"\n", b""):
                        out(line)  # trailers
                    out(b"\r\n")
                    return
                self._copy(size + 2, out)  # the chunk and its CRLF
        self._copy(int(self.headers.get("Content-Length") or 0), out)

    def _copy(self, length: int, out: Callable[[bytes], object]) -> None:
        while length > 0:
            block = self.rfile.read(min(CHUNK, length))
            if not block:
                raise ConnectionError("client closed the connection mid-body")
            out(block)
            length -= len(block)

    def _fail(self, code: int, read: bool) -> None:
        """Answer S3's XML error ``code``; unless the request's body was ``read``, a body the
        client sends anyway is read and dropped, one it waits to send (``Expect:
        100-continue``) is refused by closing."""
        name, message = S3_ERRORS[code]
        request_id = uuid.uuid4().hex[:16].upper()
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{name}</Code><Message>{message}</Message>"
            f"<RequestId>{request_id}</RequestId><HostId>spark-ext-fault-proxy</HostId></Error>"
        ).encode()
        expects = not read and self.headers.get("Expect", "").lower() == "100-continue"
        if not expects and not read:
            try:
                self._copy_body(None)
            except (OSError, ValueError):
                expects = True
        self.send_response_only(code, name)
        self.send_header("Content-Type", "application/xml")
        self.send_header("x-amz-request-id", request_id)
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(body)))
        if expects:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def _close_upstream(self) -> None:
        if self.upstream is not None:
            self.upstream.close()
            self.upstream = None

    def finish(self) -> None:
        self._close_upstream()
        super().finish()

    def log_message(self, format: str, *args: object) -> None:
        log.debug("store fault proxy: " + format, *args)


class StoreFaultProxy:
    """An HTTP proxy on 127.0.0.1 (a free port) in front of the S3 endpoint ``upstream``.

    Clients address the proxy as their endpoint; it forwards each request verbatim (what the
    client signed is what the store checks) and streams both bodies. :meth:`fail` turns a fault
    on for some seconds (:class:`FaultWindow`); :attr:`forwarded` counts the requests forwarded
    and :attr:`failed` the statuses answered instead (:attr:`failures`: ``<status> <method>
    <target>`` of each). ``connections``: client connections served at once.
    ``conditional_writes``: the store's settings, to make its conditional creates (``PUT`` with
    ``If-None-Match: *``) atomic as AWS S3's are: one per object at a time, refused with 412
    if the object exists (the local store ignores the header).
    """

    def __init__(
        self,
        upstream: str,
        connections: int = 64,
        conditional_writes: StorageSettings | None = None,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the proxy forwards to an http:// endpoint, not {upstream!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        self.connections = connections
        self.forwarded = 0
        self.failed: dict[int, int] = {}
        self.failures: list[str] = []
        self.conditional_writes = conditional_writes
        self._keys: dict[str, threading.Lock] = {}  # a lock per object created conditionally
        self._window: FaultWindow | None = None
        self._seen = 0  # requests since the window began
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``: the endpoint clients are given."""
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> str:
        """Listen and serve in a thread of its own; returns :attr:`endpoint`."""
        self._server = _Server(self, self.connections)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._thread.start()
        log.info("store fault proxy %s -> %s:%s", self.endpoint, self.host, self.port)
        return self.endpoint

    def stop(self) -> None:
        """Stop listening, end every client connection and join their threads."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.close_connections()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> StoreFaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def fail(
        self,
        seconds: float,
        share: float,
        codes: Sequence[int] = (503, 500),
        applied: bool = False,
    ) -> None:
        """From now on, for ``seconds``, answer ``share`` of the requests with the errors of
        ``codes`` in turn, after the store applied them if ``applied`` (:class:`FaultWindow`)."""
        window = FaultWindow(time.monotonic() + seconds, share, tuple(codes), applied)
        with self._lock:
            self._window, self._seen = window, 0
        log.info("store fault proxy: %s of the requests fail for %gs", share, seconds)

    def heal(self) -> None:
        """End the fault now."""
        with self._lock:
            self._window = None

    def _create_lock(self, target: str) -> AbstractContextManager[object]:
        """With ``conditional_writes``, the lock of the object a conditional create
        (``If-None-Match: *``) names, held while it is checked and written: AWS S3's conditional
        writes are atomic, the local store ignores the header (docs/design.md, "Object
        storage"); without, none (the store's own behaviour)."""
        if self.conditional_writes is None:
            return contextlib.nullcontext()
        with self._lock:
            return self._keys.setdefault(urlsplit(target).path, threading.Lock())

    def _exists(self, target: str) -> bool:
        """Whether the store holds the object ``target`` names: a HEAD signed (SigV4) with
        ``conditional_writes``' credentials (``False`` without them)."""
        settings = self.conditional_writes
        if settings is None:
            return False
        key, secret, token = settings.credentials()
        path = urlsplit(target).path
        now = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        empty = hashlib.sha256(b"").hexdigest()
        headers = {"host": f"{self.host}:{self.port}", "x-amz-content-sha256": empty}
        headers["x-amz-date"] = now
        if token:
            headers["x-amz-security-token"] = token
        names = ";".join(sorted(headers))
        lines = [f"{k}:{headers[k]}" for k in sorted(headers)]
        canonical = "\n".join(["HEAD", path, "", *lines, "", names, empty])
        scope = f"{now[:8]}/{settings.region}/s3/aws4_request"
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        signing = ("AWS4" + secret).encode()
        for part in (now[:8], settings.region, "s3", "aws4_request"):
            signing = hmac.new(signing, part.encode(), hashlib.sha256).digest()
        text = f"AWS4-HMAC-SHA256\n{now}\n{scope}\n{digest}"
        signature = hmac.new(signing, text.encode(), hashlib.sha256).hexdigest()
        headers["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={key}/{scope}, SignedHeaders={names}, "
            f"Signature={signature}"
        )
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.request("HEAD", path, headers=headers)
            status = conn.getresponse().status
        finally:
            conn.close()
        if status not in (200, 404):
            raise ConnectionError(f"HEAD {path} for a conditional create: the store said {status}")
        return status == 200

    def _decide(self, method: str, target: str) -> tuple[int | None, bool]:
        """The status to answer this request with (``None``: the store's answer), counted, and
        whether the store gets the request first."""
        with self._lock:
            window = self._window
            if window is None or time.monotonic() >= window.until:
                self._window = None
                self.forwarded += 1
                return None, False
            self._seen += 1
            if not window.failed(self._seen):
                self.forwarded += 1
                return None, False
            nth = math.floor(self._seen * window.share) - 1  # failures before this one
            code = window.codes[nth % len(window.codes)]
            self.failed[code] = self.failed.get(code, 0) + 1
            self.failures.append(f"{code} {method} {target}")
            return code, window.applied
