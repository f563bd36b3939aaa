"""Hand-written raw HTTP/1.1 requests with the outcome each must have.

The server under test runs with LIMIT_ARGS, so the boundary cases below are
exact. Every malformed request is otherwise well-formed (it has a Host, a valid
line, ...) so that its one defect is what the status answers.

MALFORMED: the server answers `status` (an int; a tuple only where RFC 9112
allows either), with "Connection: close", and then closes the connection
cleanly (FIN, not RST) without answering anything else, in particular not a
request smuggled in the bytes that follow.
  head=True   the defect is in the request head: the parser rejects it before
              any application runs (so --native hello answers the same).
  head=False  the defect is in the chunked body: it shows when the body is
              read; the echo app reads it before answering.

VALID: the server answers 200 and the echo app (tests/apps/proto_app.py) saw
what `expect` says: keys method, path, query, body as in the app's report,
"headers" a dict of lower-case header name -> value (None: must be absent),
"env" a dict of environ key -> value. Unless `close` is set the connection
stays open: a second request pipelined right behind the case is answered too,
which proves the server framed the case's body exactly.
"""
from dataclasses import dataclass, field

LINE_LIMIT = 1000  # --limit-request-line: bytes of the request line without CRLF
FIELDS_LIMIT = 20  # --limit-request-fields: header fields, Host included
FIELD_SIZE_LIMIT = 1000  # --limit-request-field-size: bytes of one field line
BODY_LIMIT = 10000  # --limit-request-body

LIMIT_ARGS = (
    "--limit-request-line", str(LINE_LIMIT),
    "--limit-request-fields", str(FIELDS_LIMIT),
    "--limit-request-field-size", str(FIELD_SIZE_LIMIT),
    "--limit-request-body", str(BODY_LIMIT),
)  # fmt: skip

# A request a lenient or confused server would answer as a second request.
SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: example.com\r\n\r\n"


@dataclass
class Malformed:
    name: str
    raw: bytes
    status: object  # int, or a tuple of the statuses RFC 9112 allows
    why: str
    head: bool = True

    @property
    def statuses(self):
        return self.status if isinstance(self.status, tuple) else (self.status,)


@dataclass
class Valid:
    name: str
    raw: bytes
    expect: dict = field(default_factory=dict)
    close: bool = False  # the server closes after answering (HTTP/1.0 without keep-alive)
    version: bytes = b"HTTP/1.1"  # the response's HTTP-version
    asgi: bool = True  # False: the case means something else to an ASGI server (a WebSocket handshake)


def _line(n):
    """A GET request line of exactly n bytes (CRLF excluded)."""
    target = b"/" + b"a" * (n - len(b"GET  HTTP/1.1") - 1)
    line = b"GET " + target + b" HTTP/1.1"
    assert len(line) == n
    return line


def _fields(n):
    """n header field lines, Host first."""
    return b"Host: example.com\r\n" + b"".join(b"X-F%02d: v\r\n" % i for i in range(n - 1))


def _chunked(body, size=7):
    out = b""
    for i in range(0, len(body), size):
        piece = body[i : i + size]
        out += b"%x\r\n%s\r\n" % (len(piece), piece)
    return out + b"0\r\n\r\n"


# "X-Long: " + value is the field line; 8 bytes of overhead.
FIELD_AT_LIMIT = b"X-Long: " + b"v" * (FIELD_SIZE_LIMIT - 8)
# Over the limit both as a line and counting name + value only.
FIELD_OVER_LIMIT = b"X-Long: " + b"v" * (FIELD_SIZE_LIMIT - 5)

H = b"Host: example.com\r\n"

MALFORMED = [
    # --- framing: Content-Length and Transfer-Encoding (request smuggling) ---
    Malformed("cl-and-te", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 35\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + SMUGGLED, 400,
              "CL with TE is rejected (DESIGN 4; RFC 9112 6.1 allows rejecting)"),
    Malformed("te-and-cl", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n" + SMUGGLED, 400,
              "same, TE first"),
    Malformed("cl-and-te-identity", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 5\r\nTransfer-Encoding: identity\r\n\r\nhello", 400,
              "CL with any TE; chunked not final (RFC 9112 6.3 item 4)"),
    Malformed("cl-duplicate-differing", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 5\r\nContent-Length: 46\r\n\r\nhello" + SMUGGLED, 400,
              "differing Content-Length values (RFC 9112 6.3 item 5)"),
    Malformed("cl-list-differing", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 5, 46\r\n\r\nhello" + SMUGGLED, 400,
              "a list of differing values"),
    Malformed("cl-not-a-number", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: abc\r\n\r\n", 400, "CL = 1*DIGIT"),
    Malformed("cl-negative", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: -1\r\n\r\n", 400, "CL = 1*DIGIT"),
    Malformed("cl-plus-sign", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: +5\r\n\r\nhello", 400, "CL = 1*DIGIT"),
    Malformed("cl-hex", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 0x5\r\n\r\nhello", 400, "CL = 1*DIGIT"),
    Malformed("cl-empty", b"POST / HTTP/1.1\r\n" + H + b"Content-Length:\r\n\r\n", 400, "CL = 1*DIGIT"),
    Malformed("cl-inner-space", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 1 0\r\n\r\n0123456789", 400, "CL = 1*DIGIT"),
    Malformed("cl-overflow", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 99999999999999999999999\r\n\r\n", (400, 413),
              "does not fit 64 bits: malformed (400) or over the body limit (413)"),
    Malformed("te-chunked-identity", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n" + SMUGGLED, 400,
              "chunked is not the final coding: MUST 400 (RFC 9112 6.3 item 4)"),
    Malformed("te-xchunked", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n" + SMUGGLED, 400,
              "not chunked: chunked is not final, MUST 400 (RFC 9112 6.3 item 4)"),
    Malformed("te-identity", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: identity\r\n\r\n", 400, "chunked not final"),
    Malformed("te-chunked-twice", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
              "chunked applied twice (RFC 9112 7: MUST NOT more than once)"),
    Malformed("te-gzip-chunked", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501,
              "chunked final but gzip not supported: 501 (RFC 9112 6.1)"),
    Malformed("te-chunked-comma-junk", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked, \"x\"\r\n\r\n0\r\n\r\n", 400,
              "the final element is not chunked"),
    # --- header field syntax ---
    Malformed("obs-fold", b"GET / HTTP/1.1\r\n" + H + b"X-Folded: a\r\n b\r\n\r\n", 400, "obs-fold rejected (DESIGN 4; RFC 9112 5.2)"),
    Malformed("obs-fold-te", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", 400, "obs-fold hiding TE"),
    Malformed("space-before-colon", b"GET / HTTP/1.1\r\n" + H + b"X-Sp : v\r\n\r\n", 400, "MUST 400 (RFC 9112 5.1)"),
    Malformed("space-before-colon-te", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\nhello", 400,
              "the classic smuggling variant"),
    Malformed("tab-before-colon", b"GET / HTTP/1.1\r\n" + H + b"X-Tab\t: v\r\n\r\n", 400, "whitespace before the colon"),
    Malformed("bare-lf-field", b"GET / HTTP/1.1\r\n" + H + b"X-A: 1\nX-B: 2\r\n\r\n", 400, "bare LF is rejected (DESIGN 4)"),
    Malformed("bare-lf-everywhere", b"GET / HTTP/1.1\nHost: example.com\n\n", 400, "bare LF line endings"),
    Malformed("bare-cr-value", b"GET / HTTP/1.1\r\n" + H + b"X-A: a\rb\r\n\r\n", 400, "bare CR (RFC 9112 2.2)"),
    Malformed("nul-in-value", b"GET / HTTP/1.1\r\n" + H + b"X-A: a\x00b\r\n\r\n", 400, "NUL in a value (RFC 9110 5.5)"),
    Malformed("nul-in-name", b"GET / HTTP/1.1\r\n" + H + b"X-\x00A: a\r\n\r\n", 400, "NUL in a name"),
    Malformed("space-in-name", b"GET / HTTP/1.1\r\n" + H + b"X A: a\r\n\r\n", 400, "field-name = token"),
    Malformed("bad-char-in-name", b"GET / HTTP/1.1\r\n" + H + b"X(A): a\r\n\r\n", 400, "field-name = token"),
    Malformed("empty-name", b"GET / HTTP/1.1\r\n" + H + b": a\r\n\r\n", 400, "field-name = token (1*tchar)"),
    Malformed("no-colon", b"GET / HTTP/1.1\r\n" + H + b"X-NoColon\r\n\r\n", 400, "a field line without a colon"),
    Malformed("leading-space-first-field", b"GET / HTTP/1.1\r\n Host: example.com\r\n\r\n", 400,
              "whitespace between the start line and the first field (RFC 9112 2.2)"),
    # --- request line ---
    Malformed("no-version", b"GET /\r\n\r\n", 400, "HTTP/0.9-style line without a version"),
    Malformed("double-space", b"GET  / HTTP/1.1\r\n" + H + b"\r\n", 400, "exactly one SP between the parts"),
    Malformed("trailing-space", b"GET / HTTP/1.1 \r\n" + H + b"\r\n", 400, "nothing after the version"),
    Malformed("tab-separator", b"GET\t/ HTTP/1.1\r\n" + H + b"\r\n", 400, "SP only"),
    Malformed("leading-space", b" GET / HTTP/1.1\r\n" + H + b"\r\n", 400, "the line starts with the method"),
    Malformed("empty-method", b" / HTTP/1.1\r\n" + H + b"\r\n", 400, "method = token"),
    Malformed("bad-method-char", b"GE(T / HTTP/1.1\r\n" + H + b"\r\n", 400, "method = token"),
    Malformed("target-not-slash", b"GET foo HTTP/1.1\r\n" + H + b"\r\n", 400, "origin-form starts with /"),
    Malformed("ctl-in-target", b"GET /a\x01b HTTP/1.1\r\n" + H + b"\r\n", 400, "CTL in the request-target"),
    Malformed("nul-in-target", b"GET /a\x00b HTTP/1.1\r\n" + H + b"\r\n", 400, "NUL in the request-target"),
    Malformed("fragment-in-target", b"GET /admin#/public HTTP/1.1\r\n" + H + b"\r\n", 400,
              "a fragment is not part of a request-target (RFC 9112 3.2: SHOULD 400)"),
    Malformed("target-raw-utf8", b"GET /get?raw=caf\xc3\xa9 HTTP/1.1\r\n" + H + b"\r\n", 400,
              "the request-target grammar is ASCII: clients percent-encode other octets (RFC 9112 3.2, RFC 3986 2.1)"),
    Malformed("target-raw-latin1", b"GET /caf\xe9 HTTP/1.1\r\n" + H + b"\r\n", 400, "an octet >= 0x80 in the request-target"),
    Malformed("target-dquote", b"GET /?q=\"x\" HTTP/1.1\r\n" + H + b"\r\n", 400,
              "DQUOTE is outside the request-target grammar, and every client percent-encodes it"),
    Malformed("target-angle-brackets", b"GET /<script> HTTP/1.1\r\n" + H + b"\r\n", 400,
              "'<' and '>' are outside the request-target grammar, and every client percent-encodes them"),
    Malformed("asterisk-form-not-options", b"GET * HTTP/1.1\r\n" + H + b"\r\n", 400,
              "asterisk-form is only for OPTIONS (RFC 9112 3.2.4)"),
    Malformed("version-lowercase", b"GET / http/1.1\r\n" + H + b"\r\n", 400, "HTTP-name is case-sensitive (RFC 9112 2.3)"),
    Malformed("version-no-minor", b"GET / HTTP/1\r\n" + H + b"\r\n", 400, "HTTP-version = HTTP-name / DIGIT . DIGIT"),
    Malformed("version-two-digit-minor", b"GET / HTTP/1.10\r\n" + H + b"\r\n", 400, "one DIGIT each"),
    Malformed("version-junk", b"GET / HTTP/1.1x\r\n" + H + b"\r\n", 400, "junk after the version"),
    Malformed("version-2.0", b"GET / HTTP/2.0\r\n" + H + b"\r\n", 505, "major version 2 over HTTP/1 framing"),
    Malformed("version-3.0", b"GET / HTTP/3.0\r\n" + H + b"\r\n", 505, "major version 3"),
    Malformed("version-0.9", b"GET / HTTP/0.9\r\n" + H + b"\r\n", 505, "major version 0"),
    # The HTTP/2 preface (PRI * HTTP/2.0) is not malformed: with --http auto (the default) it starts
    # HTTP/2 (tests/engine/test_http2.py), with --http 1 it gets 505
    # (test_http2.py::test_http_1_answers_the_preface_as_http11).
    # --- Host (RFC 9112 3.2: MUST 400) ---
    Malformed("missing-host", b"GET / HTTP/1.1\r\nX-A: a\r\n\r\n", 400, "HTTP/1.1 without Host"),
    Malformed("two-hosts", b"GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n", 400, "two Host lines"),
    Malformed("two-hosts-same", b"GET / HTTP/1.1\r\nHost: a.example\r\nHost: a.example\r\n\r\n", 400, "two Host lines, even equal"),
    Malformed("host-list", b"GET / HTTP/1.1\r\nHost: a.example, b.example\r\n\r\n", 400, "Host is not a list"),
    Malformed("host-space", b"GET / HTTP/1.1\r\nHost: exa mple.com\r\n\r\n", 400, "invalid Host value"),
    Malformed("host-slash", b"GET / HTTP/1.1\r\nHost: example.com/evil\r\n\r\n", 400, "invalid Host value"),
    Malformed("host-bad-port", b"GET / HTTP/1.1\r\nHost: example.com:abc\r\n\r\n", 400, "port = *DIGIT"),
    # --- chunked body (shows when the body is read) ---
    Malformed("chunk-size-not-hex", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", 400,
              "chunk-size = 1*HEXDIG", head=False),
    Malformed("chunk-size-empty", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n\r\nhello\r\n0\r\n\r\n", 400,
              "chunk-size = 1*HEXDIG", head=False),
    Malformed("chunk-size-negative", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n", 400,
              "chunk-size = 1*HEXDIG", head=False),
    Malformed("chunk-size-0x", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", 400,
              "chunk-size = 1*HEXDIG", head=False),
    Malformed("chunk-size-leading-space", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n", 400,
              "chunk-size = 1*HEXDIG", head=False),
    Malformed("chunk-size-overflow", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n1000000000000000000005\r\nhello\r\n0\r\n\r\n",
              (400, 413), "does not fit 64 bits: bad size (400) or over the body limit (413)", head=False),
    Malformed("chunk-size-wraps-64", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n10000000000000005\r\nhello\r\n0\r\n\r\n" + SMUGGLED,
              (400, 413), "2**64 + 5 must not wrap to 5", head=False),
    Malformed("chunk-data-too-long", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n", 400,
              "chunk data not followed by CRLF", head=False),
    Malformed("chunk-bare-lf", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", 400,
              "size line ended by bare LF", head=False),
    Malformed("chunk-bad-trailer", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nno colon here\r\n\r\n", 400,
              "a trailer line is a field line", head=False),
    Malformed("chunk-ext-no-name", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5;\r\nhello\r\n0\r\n\r\n", 400,
              "a chunk-ext-name must follow ';' (RFC 9112 7.1.1)", head=False),
    Malformed("chunk-ext-no-value", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5;a=\r\nhello\r\n0\r\n\r\n", 400,
              "a chunk-ext-val must follow '=' (RFC 9112 7.1.1)", head=False),
    Malformed("chunk-ext-open-quote", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5;a=\"b\r\nhello\r\n0\r\n\r\n", 400,
              "an unterminated quoted-string (RFC 9110 5.6.4)", head=False),
    Malformed("chunk-extension-1mb", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5;x=" + b"e" * (1 << 20) + b"\r\nhello\r\n0\r\n\r\n",
              (400, 413, 431), "unbounded chunk extensions are refused with a 4xx (RFC 9112 7.1.1)", head=False),
    Malformed("trailers-too-many", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n"
              + b"".join(b"T%d: v\r\n" % i for i in range(5000)) + b"\r\n", (400, 431), "trailer fields are bounded like header fields", head=False),
    Malformed("trailer-field-1mb", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nT: " + b"v" * (1 << 20) + b"\r\n\r\n",
              (400, 431), "a trailer field is bounded like a header field", head=False),
    # --- limits ---
    Malformed("request-line-over-limit", _line(LINE_LIMIT + 1) + b"\r\n" + H + b"\r\n", 414, "one byte over --limit-request-line"),
    Malformed("request-line-far-over-limit", _line(LINE_LIMIT * 8) + b"\r\n" + H + b"\r\n", 414, "far over --limit-request-line"),
    Malformed("too-many-fields", b"GET / HTTP/1.1\r\n" + _fields(FIELDS_LIMIT + 1) + b"\r\n", 431, "one field over --limit-request-fields"),
    Malformed("field-over-limit", b"GET / HTTP/1.1\r\n" + H + FIELD_OVER_LIMIT + b"\r\n\r\n", 431, "over --limit-request-field-size"),
    Malformed("cl-over-body-limit", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: %d\r\n\r\n" % (BODY_LIMIT + 1) + b"x" * (BODY_LIMIT + 1),
              413, "one byte over --limit-request-body, known from the head"),
    Malformed("chunked-over-body-limit", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(b"y" * (BODY_LIMIT + 1), 1000),
              413, "a chunked body one byte over --limit-request-body", head=False),
]

VALID = [
    Valid("simple-get", b"GET / HTTP/1.1\r\n" + H + b"\r\n", {"method": "GET", "path": "/", "query": "", "body": ""}),
    Valid("query", b"GET /q?a=1&b=%20x HTTP/1.1\r\n" + H + b"\r\n", {"path": "/q", "query": "a=1&b=%20x"}),
    Valid("empty-query", b"GET /q? HTTP/1.1\r\n" + H + b"\r\n", {"path": "/q", "query": ""}),
    Valid("percent-decoded-path", b"GET /a%20b/c%2Fd HTTP/1.1\r\n" + H + b"\r\n", {"path": "/a b/c/d"}),
    Valid("utf8-path-latin1-tunnelled", b"GET /caf%C3%A9 HTTP/1.1\r\n" + H + b"\r\n", {"path": "/caf\xc3\xa9"}),
    Valid("target-octets-browsers-send", b"GET /a[1]|b?q={x}|[]^`\\&p=50% HTTP/1.1\r\n" + H + b"\r\n",
          {"path": "/a[1]|b", "query": "q={x}|[]^`\\&p=50%"}),
    Valid("double-slash", b"GET //double//slash HTTP/1.1\r\n" + H + b"\r\n", {"path": "//double//slash"}),
    Valid("post-content-length", b"POST /p HTTP/1.1\r\n" + H + b"Content-Type: text/plain\r\nContent-Length: 11\r\n\r\nhello world",
          {"method": "POST", "body": "hello world", "env": {"CONTENT_LENGTH": "11", "CONTENT_TYPE": "text/plain"}}),
    Valid("content-length-zero", b"POST /p HTTP/1.1\r\n" + H + b"Content-Length: 0\r\n\r\n", {"method": "POST", "body": ""}),
    Valid("content-length-leading-zeros", b"POST /p HTTP/1.1\r\n" + H + b"Content-Length: 005\r\n\r\nhello", {"body": "hello"}),
    Valid("binary-body", b"PUT /bin HTTP/1.1\r\n" + H + b"Content-Length: 6\r\n\r\n\x00\r\n\xff\x80\n", {"method": "PUT", "body": "\x00\r\n\xff\x80\n"}),
    Valid("chunked", b"POST /c HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(b"chunked body across pieces"),
          {"body": "chunked body across pieces"}),
    Valid("chunked-empty", b"POST /c HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", {"body": ""}),
    Valid("chunked-extensions", b"POST /c HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
          b"5;name=value\r\nhello\r\n6;a;b=\"q;d\"\r\n world\r\n0;last\r\n\r\n", {"body": "hello world"}),
    Valid("chunked-trailers", b"POST /c HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
          b"5\r\nhello\r\n0\r\nX-Trailer: t\r\nX-Other: o\r\n\r\n", {"body": "hello"}),
    Valid("chunked-uppercase-hex-leading-zeros", b"POST /c HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
          b"0000A\r\n0123456789\r\n000\r\n\r\n", {"body": "0123456789"}),
    Valid("te-case-insensitive", b"POST /c HTTP/1.1\r\n" + H + b"Transfer-Encoding: ChUnKeD\r\n\r\n3\r\nabc\r\n0\r\n\r\n", {"body": "abc"}),
    Valid("te-trailing-ows", b"POST /c HTTP/1.1\r\n" + H + b"Transfer-Encoding:  chunked \t\r\n\r\n3\r\nabc\r\n0\r\n\r\n", {"body": "abc"}),
    Valid("http10-get", b"GET /ten HTTP/1.0\r\n\r\n", {"path": "/ten", "env": {"SERVER_PROTOCOL": "HTTP/1.0"}}, close=True),
    Valid("http10-post", b"POST /ten HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc", {"body": "abc"}, close=True),
    Valid("http10-keep-alive", b"GET /ten HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", {"path": "/ten"}),
    Valid("http12-as-http11", b"GET / HTTP/1.2\r\n" + H + b"\r\n", {"method": "GET"}),
    Valid("options-asterisk", b"OPTIONS * HTTP/1.1\r\n" + H + b"\r\n", {"method": "OPTIONS", "path": "*"}),
    Valid("absolute-form", b"GET http://example.com/abs/path?x=1 HTTP/1.1\r\n" + H + b"\r\n", {"path": "/abs/path", "query": "x=1"}),
    Valid("absolute-form-other-authority", b"GET http://other.example:8080/p HTTP/1.1\r\n" + H + b"\r\n",
          {"path": "/p", "headers": {"host": "other.example:8080"}, "env": {"SERVER_NAME": "other.example", "SERVER_PORT": "8080"}}),
    Valid("unknown-method", b"PURGE /cache HTTP/1.1\r\n" + H + b"\r\n", {"method": "PURGE", "path": "/cache"}),
    Valid("method-token-chars", b"M-SEARCH!#$%&'*+.^_`|~ / HTTP/1.1\r\n" + H + b"\r\n", {"method": "M-SEARCH!#$%&'*+.^_`|~"}),
    Valid("lowercase-method", b"get / HTTP/1.1\r\n" + H + b"\r\n", {"method": "get"}),
    Valid("value-ows-stripped", b"GET / HTTP/1.1\r\n" + H + b"X-Pad: \t  padded value \t \r\n\r\n", {"headers": {"x-pad": "padded value"}}),
    Valid("value-inner-tab", b"GET / HTTP/1.1\r\n" + H + b"X-Tab: a\tb\r\n\r\n", {"headers": {"x-tab": "a\tb"}}),
    Valid("value-obs-text", b"GET / HTTP/1.1\r\n" + H + b"X-Latin: caf\xe9\xff\r\n\r\n", {"headers": {"x-latin": "caf\xe9\xff"}}),
    Valid("value-empty", b"GET / HTTP/1.1\r\n" + H + b"X-Empty:\r\nX-Blank:   \r\n\r\n", {"headers": {"x-empty": "", "x-blank": ""}}),
    Valid("value-with-colons", b"GET / HTTP/1.1\r\n" + H + b"X-Url: http://a:b@c:1/d\r\n\r\n", {"headers": {"x-url": "http://a:b@c:1/d"}}),
    Valid("repeated-joined", b"GET / HTTP/1.1\r\n" + H + b"X-Multi: a\r\nX-Other: o\r\nX-Multi: b\r\n\r\n", {"headers": {"x-multi": "a, b"}}),
    Valid("cookies-joined", b"GET / HTTP/1.1\r\n" + H + b"Cookie: a=1\r\nCookie: b=2\r\n\r\n", {"headers": {"cookie": "a=1; b=2"}}),
    Valid("underscore-dropped", b"GET / HTTP/1.1\r\n" + H + b"X_Under: evil\r\nX-Under: good\r\n\r\n", {"headers": {"x-under": "good"}}),
    Valid("underscore-only-dropped", b"GET / HTTP/1.1\r\n" + H + b"X_Alone: evil\r\n\r\n", {"headers": {"x-alone": None}}),
    Valid("name-case-insensitive", b"GET / HTTP/1.1\r\nhOsT: example.com\r\ncOnTeNt-TyPe: a/b\r\n\r\n",
          {"headers": {"host": "example.com"}, "env": {"CONTENT_TYPE": "a/b"}}),
    Valid("empty-host", b"GET / HTTP/1.1\r\nHost:\r\n\r\n", {"path": "/"}),
    Valid("host-ipv6-port", b"GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", {"headers": {"host": "[::1]:8080"}}),
    Valid("leading-empty-line", b"\r\nGET /after-crlf HTTP/1.1\r\n" + H + b"\r\n", {"path": "/after-crlf"}),
    Valid("expect-continue-body-sent", b"POST /expect HTTP/1.1\r\n" + H + b"Expect: 100-continue\r\nContent-Length: 4\r\n\r\nbody",
          {"body": "body"}),
    # Upgrade: h2c is served for a request without a body (tests/engine/test_http2.py); one with a
    # body is answered over HTTP/1.1, the Upgrade ignored (RFC 9110 7.8).
    Valid("upgrade-h2c-with-body-ignored", b"POST /u HTTP/1.1\r\n" + H + b"Connection: Upgrade, HTTP2-Settings\r\n"
          b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\nContent-Length: 2\r\n\r\nab",
          {"path": "/u", "body": "ab"}),
    Valid("upgrade-websocket-ignored-by-wsgi", b"GET /u HTTP/1.1\r\n" + H + b"Connection: Upgrade\r\nUpgrade: websocket\r\n"
          b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", {"path": "/u"}, asgi=False),
    Valid("cl-duplicate-identical", b"POST /p HTTP/1.1\r\n" + H + b"Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
          {"body": "abc", "env": {"CONTENT_LENGTH": "3"}}),
    Valid("connection-keep-alive-11", b"GET / HTTP/1.1\r\n" + H + b"Connection: keep-alive\r\n\r\n", {"path": "/"}),
    Valid("request-line-at-limit", _line(LINE_LIMIT) + b"\r\n" + H + b"\r\n", {"method": "GET"}),
    Valid("fields-at-limit", b"GET / HTTP/1.1\r\n" + _fields(FIELDS_LIMIT) + b"\r\n", {"headers": {"x-f00": "v", "x-f%02d" % (FIELDS_LIMIT - 2): "v"}}),
    Valid("field-at-limit", b"GET / HTTP/1.1\r\n" + H + FIELD_AT_LIMIT + b"\r\n\r\n", {"headers": {"x-long": "v" * (FIELD_SIZE_LIMIT - 8)}}),
    Valid("body-at-limit", b"POST / HTTP/1.1\r\n" + H + b"Content-Length: %d\r\n\r\n" % BODY_LIMIT + b"z" * BODY_LIMIT, {"body": "z" * BODY_LIMIT}),
    Valid("chunked-body-at-limit", b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(b"w" * BODY_LIMIT, 999),
          {"body": "w" * BODY_LIMIT}),
]  # fmt: skip

assert len(MALFORMED) >= 40 and len(VALID) >= 30
assert len({c.name for c in MALFORMED + VALID}) == len(MALFORMED) + len(VALID)
