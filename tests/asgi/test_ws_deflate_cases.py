"""The Autobahn|Testsuite's permessage-deflate sections (12 and 13) as pytest cases, run by the
`websockets` client (which negotiates and compresses itself) against a real m0serve echo server.

The suite itself (wstest, Python 2.7 and Twisted) runs with `make autobahn` (tests/autobahn/);
these cases keep its shape so that CI checks the same ground on every run:

- section 12: the client's default offer; five kinds of payload (JSON text, a bitmap, German prose
  sent as binary, HTML text, a PDF-like mix of text and deflated streams), each cut into messages
  of 18 sizes/fragmentations, every message a window of the payload that moves on from the last
  (as Autobahn's `sendOne` does), each echoed message compared with what was sent;
- section 13: the JSON payload under the seven offers of 13.1-13.7 (client/server
  no_context_takeover, server_max_window_bits 9 and 15, and three offers at once), the
  negotiated parameters checked against what RFC 7692 §7.1 lets a server answer to that offer.

Autobahn sends 1000 messages per case; these send MESSAGES (the context takeover across messages
and the 32 KiB window are crossed many times either way); `make autobahn` runs the full counts.
Each case closes cleanly with 1000, as Autobahn requires.
"""
import asyncio
import json
import random
import zlib

import pytest
from websockets.asyncio.client import connect
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory

APP = "ws_app:app"
MESSAGES = 20

# Autobahn's MSG_SIZES: (payload length, fragment size; 0 = one frame)
MSG_SIZES = [(16, 0), (64, 0), (256, 0), (1024, 0), (4096, 0), (8192, 0), (16384, 0), (32768, 0),
             (65536, 0), (131072, 0), (8192, 256), (16384, 256), (32768, 256), (65536, 256),
             (131072, 256), (131072, 1024), (131072, 4096), (131072, 32768)]


def _json_data():
    rng = random.Random(1)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "Grüße", "naïve"]
    items = [{"id": i, "guid": "%032x" % rng.getrandbits(128), "name": " ".join(rng.choices(words, k=3)),
              "balance": round(rng.uniform(0, 5000), 2), "active": rng.random() < 0.5,
              "tags": rng.sample(words, 4), "latitude": rng.uniform(-90, 90), "longitude": rng.uniform(-180, 180)}
             for i in range(650)]
    return json.dumps(items, ensure_ascii=False, indent=2)


def _bitmap():
    # a 512x512 8-bit grey bitmap: smooth gradients with noise, as a photograph compresses
    rng = random.Random(2)
    header = b"BM" + (263222).to_bytes(4, "little") + bytes(4) + (1078).to_bytes(4, "little")
    header += bytes(1078 - len(header))
    pixels = bytearray()
    for y in range(512):
        for x in range(512):
            pixels.append((x // 3 + y // 2 + rng.randrange(24)) & 0xFF)
    return header + bytes(pixels)


def _prose():
    rng = random.Random(3)
    words = ("Habe nun, ach! Philosophie, Juristerei und Medizin, und leider auch Theologie "
             "durchaus studiert, mit heißem Bemühn. Da steh ich nun, ich armer Tor! und bin so "
             "klug als wie zuvor; heiße Magister, heiße Doktor gar, und ziehe schon an die zehen "
             "Jahr herauf, herab und quer und krumm meine Schüler an der Nase herum").split()
    lines = []
    size = 0
    while size < 222000:
        line = " ".join(rng.choices(words, k=rng.randrange(4, 12)))
        lines.append(line)
        size += len(line.encode()) + 1
    return "\n".join(lines).encode()


def _html():
    rng = random.Random(4)
    rows = []
    for i in range(1700):
        rows.append(f'<tr class="row-{i % 2}"><td><a href="/item/{i}">Item {i}</a></td>'
                    f'<td>{rng.uniform(0, 100):.2f} €</td><td>{"ja" if rng.random() < 0.5 else "nein"}</td></tr>')
    return "<!DOCTYPE html><html><head><title>Daten</title></head><body><table>\n" + \
        "\n".join(rows) + "\n</table></body></html>\n"


def _pdf_like():
    # text objects between deflated streams: long stretches that do not compress
    rng = random.Random(5)
    parts = [b"%PDF-1.4\n"]
    n = 1
    while sum(map(len, parts)) < 1_000_000:
        text = " ".join(rng.choice(["BT", "ET", "Tf", "Td", "Tj", "/F1", "12", "0", "obj"]) for _ in range(300))
        stream = zlib.compress(bytes(rng.getrandbits(8) for _ in range(6000)))
        parts.append(b"%d 0 obj\n<< /Length %d /Filter /FlateDecode >>\nstream\n" % (n, len(stream))
                     + stream + b"\nendstream\nendobj\n" + text.encode() + b"\n")
        n += 1
    return b"".join(parts)


# Section 12's five payloads, in Autobahn's order: (name, maker, sent as binary)
DATA = [("json", _json_data, False), ("bitmap", _bitmap, True), ("prose", _prose, True),
        ("html", _html, False), ("pdf", _pdf_like, True)]
_cache = {}


def payload(kind):
    if kind not in _cache:
        _cache[kind] = next(make for name, make, _ in DATA if name == kind)()
    return _cache[kind]


# Section 13's client offers: Autobahn's PerMessageDeflateOffer(requestNoContextTakeover,
# requestMaxWindowBits) always carries client_no_context_takeover and client_max_window_bits.
def _offer(server_no_context_takeover, server_max_window_bits):
    return ClientPerMessageDeflateFactory(server_no_context_takeover=server_no_context_takeover,
                                          client_no_context_takeover=True,
                                          server_max_window_bits=server_max_window_bits or None,
                                          client_max_window_bits=True)


OFFERS_13 = [
    [(False, 0)],
    [(True, 0)],
    [(False, 9)],
    [(False, 15)],
    [(True, 9)],
    [(True, 15)],
    [(True, 9), (True, 0), (False, 0)],
]


def offer_params(offer):
    """The parameters of an offer as the client puts them on the wire."""
    snc, smwb = offer
    params = {"client_no_context_takeover": None, "client_max_window_bits": None}
    if snc:
        params["server_no_context_takeover"] = None
    if smwb:
        params["server_max_window_bits"] = str(smwb)
    return params


def parse_extensions(value):
    """Sec-WebSocket-Extensions -> [(name, {param: value or None})]."""
    out = []
    for ext in value.split(","):
        name, *params = [p.strip() for p in ext.split(";")]
        seen = {}
        for p in params:
            k, _, v = p.partition("=")
            assert k.strip() not in seen, f"parameter {k} twice in {value!r}"
            seen[k.strip()] = v.strip().strip('"') or None
        out.append((name, seen))
    return out


def allowed_response(offer, resp):
    """Whether `resp` (the parameters of the server's permessage-deflate) is an answer that
    RFC 7692 §7.1 allows to the one offer `offer` (its parameters as sent)."""
    known = {"server_no_context_takeover", "client_no_context_takeover",
             "server_max_window_bits", "client_max_window_bits"}
    if not set(resp) <= known:
        return False
    for no_value in ("server_no_context_takeover", "client_no_context_takeover"):
        if no_value in resp and resp[no_value] is not None:
            return False
    # §7.1.1.1: an offered server_no_context_takeover is accepted only by echoing it
    if "server_no_context_takeover" in offer and "server_no_context_takeover" not in resp:
        return False
    for bits in ("server_max_window_bits", "client_max_window_bits"):
        if bits in resp:
            if resp[bits] is None or not resp[bits].isdigit() or not 8 <= int(resp[bits]) <= 15:
                return False
    # §7.1.2.1: an offered server_max_window_bits=N is accepted with a value <= N
    if "server_max_window_bits" in offer:
        if "server_max_window_bits" not in resp or int(resp["server_max_window_bits"]) > int(offer["server_max_window_bits"]):
            return False
    # §7.1.2.2: client_max_window_bits only when offered, and <= the offered value if any
    if "client_max_window_bits" in resp:
        if "client_max_window_bits" not in offer:
            return False
        if offer["client_max_window_bits"] is not None and \
                int(resp["client_max_window_bits"]) > int(offer["client_max_window_bits"]):
            return False
    return True


def test_allowed_response_rejects_what_rfc_7692_forbids():
    # the checker itself: each answer here breaks one rule of §7.1
    o = {"client_no_context_takeover": None, "client_max_window_bits": None,
         "server_no_context_takeover": None, "server_max_window_bits": "9"}
    good = {"server_no_context_takeover": None, "server_max_window_bits": "9"}
    assert allowed_response(o, good)
    assert not allowed_response(o, {"server_max_window_bits": "9"})
    assert not allowed_response(o, {**good, "server_max_window_bits": "10"})
    assert not allowed_response(o, {"server_no_context_takeover": None})
    assert not allowed_response(o, {**good, "client_max_window_bits": "16"})
    assert not allowed_response(o, {**good, "x": None})
    assert not allowed_response({}, {"client_max_window_bits": "12"})
    assert not allowed_response({"client_max_window_bits": "10"}, {"client_max_window_bits": "12"})


async def _echo_case(srv, factories, kind, binary, size, fragment):
    data = payload(kind)
    text = data if isinstance(data, str) else None
    async with connect(f"{srv.ws_scheme}://{srv.host}:{srv.port}/echo", extensions=factories, compression=None,
                       max_size=None) as ws:
        negotiated = ws.response.headers.get("Sec-WebSocket-Extensions")
        ptr = 0
        for _ in range(MESSAGES):
            end = (ptr + size) % len(data)
            msg = data[ptr:end] if end > ptr else data[ptr:] + data[:end]
            ptr = end
            if text is not None and binary:
                msg = msg.encode()
            elif text is None and not binary:
                msg = msg.decode()
            if fragment:
                await ws.send([msg[i:i + fragment] for i in range(0, len(msg), fragment)])
            else:
                await ws.send(msg)
            got = await ws.recv()
            assert type(got) is type(msg) and got == msg, (kind, size, fragment)
        await ws.close(1000)
        assert ws.close_code == 1000  # what the server's close frame said
    return negotiated


@pytest.fixture(scope="module")
def srv(serve_module):
    return serve_module(APP, "--ws-per-message-deflate", "on")


@pytest.mark.parametrize("size,fragment", MSG_SIZES, ids=[f"12.x.{i}" for i in range(1, 19)])
@pytest.mark.parametrize("kind,binary", [(n, b) for n, _, b in DATA], ids=[f"12.{i}" for i in range(1, 6)])
def test_section_12_default_offer(srv, kind, binary, size, fragment):
    negotiated = asyncio.run(_echo_case(srv, [_offer(False, 0)], kind, binary, size, fragment))
    (name, resp), = parse_extensions(negotiated)
    assert name == "permessage-deflate"
    assert allowed_response(offer_params((False, 0)), resp), negotiated


@pytest.mark.parametrize("size,fragment", MSG_SIZES, ids=[f"13.x.{i}" for i in range(1, 19)])
@pytest.mark.parametrize("offers", OFFERS_13, ids=[f"13.{i}" for i in range(1, 8)])
def test_section_13_offers(srv, offers, size, fragment):
    negotiated = asyncio.run(_echo_case(srv, [_offer(*o) for o in offers], "json", False, size, fragment))
    (name, resp), = parse_extensions(negotiated)
    assert name == "permessage-deflate"
    # the answer is to one of the offers (the server takes the first it can: RFC 7692 §5)
    assert any(allowed_response(offer_params(o), resp) for o in offers), (offers, negotiated)
    # the first offer is acceptable, so it is the one taken: its server window (9, or 15 bounded
    # to the server's 12) and its server_no_context_takeover are in the answer
    assert allowed_response(offer_params(offers[0]), resp), (offers, negotiated)
    if offers[0][1]:
        assert resp["server_max_window_bits"] == str(min(offers[0][1], 12)), negotiated
