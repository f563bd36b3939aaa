"""Real frameworks (Django and Flask from PyPI) served by the WSGI bridge."""
import hashlib
import os

import httpx
import pytest


@pytest.fixture
def payload_file(tmp_path):
    p = tmp_path / "payload.bin"
    data = os.urandom(3 * 1024 * 1024 + 5)
    p.write_bytes(data)
    return p, data


def test_django(serve, payload_file):
    path, data = payload_file
    srv = serve("django_app.wsgi:application", env={"WSGI_TEST_FILE": str(path)})
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        r = c.get("/")
        assert (r.status_code, r.text) == (200, "hello from django")
        r = c.get("/json", params={"q": "caf\xe9"}, headers={"User-Agent": "ua/1", "Cookie": "c=v1"})
        assert r.json() == {"path": "/json", "q": "caf\xe9", "script_name": "", "ua": "ua/1", "cookie": "v1"}
        r = c.post("/form", data={"a": "1", "b": ["x", "y"]})
        assert r.json() == {"a": ["1"], "b": ["x", "y"]}
        r = c.post("/json-echo", json={"k": [1, 2, "\u2603"]})
        assert r.json()["echo"] == {"k": [1, 2, "\u2603"]}
        r = c.post("/upload", files={"file": ("p.bin", data)}, data={"field": "f"})
        assert r.json() == {"name": "p.bin", "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "field": "f"}
        r = c.get("/stream")
        assert r.text == "".join(f"part{i}\n" for i in range(5))
        r = c.get("/download")
        assert r.status_code == 200 and r.content == data
        assert r.headers["content-length"] == str(len(data))
        r = c.get("/missing")
        assert r.status_code == 404
        r = c.get("/")
        assert r.status_code == 200
    assert "Traceback" not in srv.log


def test_django_root_path(serve):
    srv = serve("django_app.wsgi:application", "--root-path", "/app")
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        r = c.get("/app/json", params={"q": "1"})
        assert r.json()["script_name"] == "/app"
        assert r.json()["path"] == "/app/json"


def test_flask(serve, payload_file):
    path, data = payload_file
    srv = serve("flask_app:app", env={"WSGI_TEST_FILE": str(path)})
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        r = c.get("/")
        assert (r.status_code, r.text) == (200, "hello from flask")
        r = c.get("/json", params={"q": "\u2603"})
        assert r.json()["q"] == "\u2603"
        assert r.json()["url"].startswith(srv.url + "/json?q=")
        r = c.post("/form", data={"a": "1", "b": ["x", "y"]})
        assert r.json() == {"a": ["1"], "b": ["x", "y"]}
        r = c.post("/json", json={"k": "v"})
        assert r.json() == {"echo": {"k": "v"}, "len": len(r.request.content)}
        # a chunked request body (the length is unknown to the app)
        r = c.post("/raw", content=iter([data[:1000], data[1000:]]))
        assert r.json() == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        r = c.get("/stream")
        assert r.text == "".join(f"part{i}\n" for i in range(5))
        r = c.get("/download")
        assert r.status_code == 200 and r.content == data
        r = c.get("/missing")
        assert r.status_code == 404
        r = c.head("/")
        assert r.status_code == 200 and r.content == b""
        assert r.headers["content-length"] == str(len("hello from flask"))
    assert "Traceback" not in srv.log
