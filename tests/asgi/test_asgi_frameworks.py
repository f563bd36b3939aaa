"""Real frameworks served over the ASGI bridge: Starlette, FastAPI, Django."""
import os
import time

import httpx

from servers import TEST_H2, http1_only, plaintext_only


def test_starlette(serve):
    srv = serve("starlette_app:app", "--interface", "asgi")
    with httpx.Client(base_url=srv.url, timeout=5) as c:
        assert c.get("/").json() == {"framework": "starlette", "greeting": "hello from lifespan"}
        assert c.get("/items/42?q=x").json() == {"id": 42, "q": "x"}
        assert c.get("/items/nope").status_code == 404
        r = c.post("/echo", content=b"a" * 100000)
        assert r.content == b"a" * 100000 and r.headers["x-length"] == "100000"
        r = c.get("/stream")
        assert r.text == "".join(f"line {i}\n" for i in range(5))
        if TEST_H2:  # no transfer coding in HTTP/2: a streamed body has no content-length
            assert "content-length" not in r.headers
        else:
            assert r.headers.get("transfer-encoding") == "chunked"
        r = c.get("/file")
        with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "apps", "starlette_app.py"), "rb") as f:
            assert r.content == f.read()


def test_fastapi(serve):
    srv = serve("fastapi_app:app", "--interface", "asgi")
    with httpx.Client(base_url=srv.url, timeout=5) as c:
        assert c.get("/").json() == {"framework": "fastapi"}
        assert c.get("/items/5", params={"q": "z"}).json() == {"item_id": 5, "q": "z"}
        assert c.get("/items/abc").status_code == 422
        r = c.get("/items/404")
        assert r.status_code == 404 and r.json() == {"detail": "no such item"}
        assert c.post("/items", json={"name": "pen", "price": 1.5}).json() == {"name": "pen", "total": 3.0}
        assert c.post("/items", json={"name": "pen"}).status_code == 422
        assert c.post("/background").json() == {"queued": True}
        # the task runs after the response, in the threadpool: poll for it
        deadline = time.monotonic() + 3
        while c.get("/background").json() != {"done": ["ran"]} and time.monotonic() < deadline:
            time.sleep(0.02)
        assert c.get("/background").json() == {"done": ["ran"]}
        assert c.get("/sync").json() == {"threadpool": True}
        assert c.get("/openapi.json").json()["info"]["title"] == "FastAPI"


def test_django(serve):
    srv = serve("django_asgi.asgi:application", "--interface", "asgi")
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        r = c.get("/")
        assert r.status_code == 200 and r.text == "hello from django"
        assert c.get("/async/?q=1").json() == {"async": True, "path": "/async/", "q": "1"}
        r = c.post("/echo/", content=b"x=1", headers={"content-type": "application/x-www-form-urlencoded"})
        assert r.json() == {"method": "POST", "body": "x=1", "ct": "application/x-www-form-urlencoded"}
        assert c.get("/stream/").text == "chunk 0\nchunk 1\nchunk 2\n"
        assert c.get("/missing/").status_code == 404


def test_django_root_path(serve):
    srv = serve("django_asgi.asgi:application", "--interface", "asgi", "--root-path", "/app")
    r = httpx.get(srv.url + "/async/", timeout=10)
    assert r.status_code == 200
    assert r.json()["path"] == "/app/async/"


def test_request_task_seen_by_asyncio_and_anyio(serve):
    """Each request runs in a Task of its own (asyncio.current_task(), anyio's task info and the
    cancel scopes of Starlette and FastAPI depend on it), also before Python 3.12, where the bridge
    creates it without loop.create_task."""
    srv = serve("task_app:app", "--interface", "asgi")
    with httpx.Client(base_url=srv.url, timeout=5) as c:
        first, second = c.get("/task").json(), c.get("/task").json()
        for seen in (first, second):
            assert seen["is_task"] is True and seen["done"] is False and seen["same"] is True
            assert seen["coro"] == "AsgiRequestRunner"
        assert first["task_id"] != second["task_id"]
        assert c.get("/task-after-wait").json() == {"same": True}
        assert c.get("/background").json() == {"queued": True}
        srv.wait_log(r"EVENT BACKGROUND-RAN")
        assert c.get("/dependency").json() == {"resource": "resource"}
        srv.wait_log(r"EVENT DEPENDENCY-OPEN\n(.*\n)*EVENT DEPENDENCY-CLOSED")


# Over TLS the client's close is a reset (it never read the session tickets the server sent), and
# the response the route still returns after the cancelled scope then fails at send(); over HTTP/2
# likewise (the stream is known closed: send() raises ClientDisconnected).
@plaintext_only
@http1_only
def test_anyio_cancel_scope_cancels_the_request_task_when_the_client_leaves(serve):
    srv = serve("task_app:app", "--interface", "asgi")
    sock = srv.connect()
    sock.sendall(b"GET /wait-for-disconnect HTTP/1.1\r\nHost: t\r\n\r\n")
    srv.wait_log(r"EVENT WAITING")
    sock.close()
    srv.wait_log(r"EVENT DISCONNECT-SEEN\n(.*\n)*EVENT CANCELLED-ON-DISCONNECT True")
    assert "Traceback" not in srv.log


def test_streaming_generator_closed_when_the_client_leaves(serve):
    """Starlette (ASGI spec 2.4) streams until send() raises an OSError, then closes the generator."""
    srv = serve("task_app:app", "--interface", "asgi")
    with srv.connect() as sock:
        sock.sendall(b"GET /stream-forever HTTP/1.1\r\nHost: t\r\n\r\n")
        data = b""
        while b"chunk 1\n" not in data:
            data += sock.recv(65536)
    srv.wait_log(r"EVENT STREAM-ENDED (GeneratorExit|CancelledError)")
