"""Reading HTTP/1.x from a client socket: one response (read_response, with what it read past the
response kept for the next call), a header's value, everything until the peer closes."""
import socket
import time
import weakref

class PeerReset(AssertionError):
    """The peer reset the connection where a clean close (FIN) was expected."""


def recv_all(sock, timeout=5):
    """Read until the peer closes; returns the bytes (a reset ends the read too).

    Bytes a previous read_response() buffered past its response come first."""
    sock.settimeout(timeout)
    chunks = [_take_leftover(sock)]
    while True:
        try:
            b = sock.recv(65536)
        except ConnectionResetError:
            break
        if not b:
            break
        chunks.append(b)
    return b"".join(chunks)


def recv_until_eof(sock, timeout=5):
    """Read until a clean EOF; raise PeerReset if the connection is reset and
    socket.timeout if the peer keeps it open past `timeout` seconds."""
    sock.settimeout(timeout)
    chunks = [_take_leftover(sock)]
    deadline = time.monotonic() + timeout
    while True:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            b = sock.recv(65536)
        except ConnectionResetError as e:
            raise PeerReset(f"connection reset after {b''.join(chunks)!r}") from e
        if not b:
            return b"".join(chunks)
        chunks.append(b)


# Bytes read past the end of a response (the start of the next pipelined
# response), per socket. socket.socket has __slots__, hence the side table.
_LEFTOVER = weakref.WeakKeyDictionary()


def _take_leftover(sock):
    return _LEFTOVER.pop(sock, b"")


class _Reader:
    """Buffered reads from a socket for read_response."""

    def __init__(self, sock, timeout):
        self.sock = sock
        self.buf = _take_leftover(sock)
        self.deadline = time.monotonic() + timeout

    def recv(self, what):
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout(f"timed out waiting for {what}; have {self.buf[:300]!r}")
        self.sock.settimeout(remaining)
        b = self.sock.recv(65536)
        if not b:
            raise ConnectionError(f"closed before {what}: {self.buf[:300]!r}")
        return b

    def more(self, what):
        self.buf += self.recv(what)

    def line(self, what):
        while b"\r\n" not in self.buf:
            self.more(what)
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def exactly(self, n, what):
        # Chunks are joined once: appending each to the buffer would copy a large body
        # once per recv (quadratic; minutes for 30 MB read in 4 KiB pieces).
        if len(self.buf) < n:
            parts, have = [self.buf], len(self.buf)
            while have < n:
                b = self.recv(what)
                parts.append(b)
                have += len(b)
            self.buf = b"".join(parts)
        data, self.buf = self.buf[:n], self.buf[n:]
        return data


def parse_head(head):
    """(version, status, headers as list of (lower-name, value)) of a response head."""
    lines = head.decode("latin-1").split("\r\n")
    version, status = lines[0].split(" ")[:2]
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(":")
        headers.append((name.strip().lower(), value.strip()))
    return version, int(status), headers


def read_response(sock, timeout=5, method="GET", skip_informational=False):
    """Read exactly one HTTP/1.x response (Content-Length, chunked or close-delimited).

    Returns (status, headers as list of (lower-name, value), body bytes, head bytes).
    A 1xx response is returned on its own (body b"") unless skip_informational.
    method="HEAD": the response has no body whatever its headers say.
    Bytes past the response stay buffered for the next read_response() on sock.
    """
    r = _Reader(sock, timeout)
    while True:
        while b"\r\n\r\n" not in r.buf:
            r.more("a full head")
        head, _, r.buf = r.buf.partition(b"\r\n\r\n")
        _, status, headers = parse_head(head)
        if 100 <= status < 200 and status != 101 and skip_informational:
            continue
        break
    hdict = {}
    for name, value in headers:
        hdict.setdefault(name, value)
    body = b""
    if 100 <= status < 200 or status in (204, 304) or method == "HEAD":
        pass
    elif hdict.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size_line = r.line("a chunk size")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                while r.line("the trailer section"):
                    pass
                break
            parts.append(r.exactly(size, "chunk data"))
            if r.exactly(2, "the CRLF after chunk data") != b"\r\n":
                raise AssertionError(f"chunk data not followed by CRLF: {r.buf[:100]!r}")
        body = b"".join(parts)
    elif "content-length" in hdict:
        body = r.exactly(int(hdict["content-length"]), "the body")
    else:
        body = r.buf + recv_all(sock, max(0.01, r.deadline - time.monotonic()))
        r.buf = b""
    if r.buf:
        _LEFTOVER[sock] = r.buf
    return status, headers, body, head


def header(headers, name):
    """The value of the first header `name` (lower-case) in a read_response list, or None."""
    for n, v in headers:
        if n == name:
            return v
    return None
