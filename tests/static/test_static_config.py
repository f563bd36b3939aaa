"""The static-file settings: Granian's flag names, each with its M0_* variable and config-file key,
one line naming the flag for a bad value; and the portable open (the walk a kernel without openat2
gets), over HTTP/1.1, h2c and TLS against the engine alone."""
import json
import os
import socket
import ssl

import pytest

import h2bridge
from helpers import run_cli
from http1 import read_response
from servers import TEST_H2, TEST_TLS, pki_files

pytestmark = pytest.mark.skipif(bool(TEST_TLS or TEST_H2), reason="parametrized over the transports itself")


@pytest.fixture
def www(tmp_path):
    d = tmp_path / "www"
    d.mkdir()
    (d / "hello.txt").write_bytes(b"Hello, world!")
    (d / "sub").mkdir()
    (d / "sub" / "index.html").write_bytes(b"<p>index</p>")
    (d / "sub" / "deep").mkdir()
    (d / "sub" / "deep" / "x.txt").write_bytes(b"deep")
    (tmp_path / "secret.txt").write_bytes(b"SECRET")
    os.symlink("hello.txt", d / "link_in")
    os.symlink(tmp_path / "secret.txt", d / "link_out")
    os.symlink("sub", d / "sublink")  # relative: an absolute link is refused even to within (RESOLVE_BENEATH)
    return d


def fetch(host, port, path, transport="h1", headers=()):
    if transport == "h2c":
        sock = h2bridge.connect(host, port, "http", timeout=10)
    else:
        sock = socket.create_connection((host, port), timeout=10)
        if transport == "tls":
            sock = ssl.create_default_context(cafile=pki_files()[2]).wrap_socket(sock, server_hostname="127.0.0.1")
    with sock:
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode())
        status, hs, body, _ = read_response(sock, timeout=10)
        return status, dict(hs), body


# --- bad values: one line naming the flag ----------------------------------------------------------


@pytest.mark.parametrize("args,env,flag", [
    (["--static-path-mount", "/nonexistent/dir"], {}, "--static-path-mount"),
    (["--static-path-mount", "cli_hello.py"], {}, "--static-path-mount"),
    (["--static-path-mount", "."] + ["--static-path-route", "static"], {}, "--static-path-route"),
    (["--static-path-mount", ".", "--static-path-route", "/a/../b"], {}, "--static-path-route"),
    (["--static-path-mount", ".", "--static-path-route", "/a b"], {}, "--static-path-route"),
    (["--static-path-mount", ".", "--static-path-route", "/a%2f"], {}, "--static-path-route"),
    (["--static-path-mount", ".", "--static-path-expires", "-1"], {}, "--static-path-expires"),
    (["--static-path-mount", ".", "--static-path-expires", "soon"], {}, "--static-path-expires"),
    (["--static-path-mount", ".", "--static-path-expires", "1y"], {}, "--static-path-expires"),
    (["--static-path-mount", ".", "--static-path-expires", "99999999999"], {}, "--static-path-expires"),
    (["--static-path-mount", ".", "--static-path-dir-to-file", "a/index.html"], {}, "--static-path-dir-to-file"),
    (["--static-path-mount", ".", "--static-path-dir-to-file", ".."], {}, "--static-path-dir-to-file"),
    (["--static-path-route", "/assets"], {}, "--static-path-route"),  # no mount
    (["--static-path-dir-to-file", "index.html"], {}, "--static-path-dir-to-file"),  # no mount
    (["--static-path-mount", ".", "--static-path-mount", ".."], {}, "--static-path-route"),  # 2 mounts, no route
    (["--static-path-mount", ".", "--static-path-route", "/a", "--static-path-route", "/b"], {},
     "--static-path-route"),
    (["--static-path-mount", ".", "--static-path-mount", "..", "--static-path-route", "/a",
      "--static-path-route", "/a"], {}, "--static-path-route"),
    ([], {"M0_STATIC_PATH_MOUNT": "/nonexistent/dir"}, "M0_STATIC_PATH_MOUNT"),
    ([], {"M0_STATIC_PATH_MOUNT": ".", "M0_STATIC_PATH_EXPIRES": "x"}, "M0_STATIC_PATH_EXPIRES"),
    ([], {"M0_STATIC_PATH_MOUNT": ".", "M0_STATIC_PATH_ROUTE": "nope"}, "M0_STATIC_PATH_ROUTE"),
])
def test_bad_values_are_one_line_naming_the_flag(args, env, flag):
    r = run_cli("cli_hello:app", *args, "--check-config", env=env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0], r.stderr


def test_config_file_keys_and_print_config(tmp_path, www):
    conf = tmp_path / "m0.toml"
    conf.write_text(f'static_path_mount = ["{www}", "{www / "sub"}"]\n'
                    'static_path_route = ["/files", "/assets"]\n'
                    'static_path_dir_to_file = "index.html"\n'
                    'static_path_expires = 7\n'
                    'static_path_follow_symlinks = true\n')
    r = run_cli("cli_hello:app", "-c", str(conf), "--print-config", "json")
    assert r.returncode == 0, r.stderr
    printed = json.loads(r.stdout)
    assert printed["static_path_mount"] == [str(www), str(www / "sub")]
    assert printed["static_path_route"] == ["/files", "/assets"]
    assert printed["static_path_dir_to_file"] == "index.html"
    assert printed["static_path_expires"] == 7
    assert printed["static_path_follow_symlinks"] is True


@pytest.mark.parametrize("how", ["flags", "env", "toml", "py"])
def test_each_setting_reaches_the_engine(serve, tmp_path, www, how):
    settings = {"static_path_mount": [str(www)], "static_path_route": ["/assets"],
                "static_path_dir_to_file": "index.html", "static_path_expires": 5,
                "static_path_follow_symlinks": True}
    args, env = [], {}
    if how == "flags":
        args = ["--static-path-mount", str(www), "--static-path-route", "/assets", "--static-path-dir-to-file",
                "index.html", "--static-path-expires", "5", "--static-path-follow-symlinks"]
    elif how == "env":
        env = {"M0_STATIC_PATH_MOUNT": str(www), "M0_STATIC_PATH_ROUTE": "/assets",
               "M0_STATIC_PATH_DIR_TO_FILE": "index.html", "M0_STATIC_PATH_EXPIRES": "5",
               "M0_STATIC_PATH_FOLLOW_SYMLINKS": "1"}
    else:
        conf = tmp_path / f"m0.{how}"
        lines = []
        for k, v in settings.items():
            lines.append(f"{k} = {json.dumps(v) if how == 'toml' else repr(v)}")
        conf.write_text("\n".join(lines).replace("= true", "= true") + "\n")
        args = ["-c", str(conf)]
    s = serve("cli_hello:app", *args, env=env)
    status, h, body = fetch(s.host, s.port, "/assets/sub/")
    assert status == 200 and body == b"<p>index</p>"
    assert h["cache-control"] == "public, max-age=5"
    status, _, body = fetch(s.host, s.port, "/assets/link_out")
    assert status == 200 and body == b"SECRET"  # --static-path-follow-symlinks
    status, _, body = fetch(s.host, s.port, "/static/hello.txt")
    assert status == 200 and body.startswith(b"hello")  # the app: no route there


@pytest.mark.parametrize("text,seconds", [("0", 0), ("60", 60), ("1d", 86400), ("12h", 43200), ("1h30m", 5400),
                                          ("2w", 1209600), ("45s", 45)])
def test_expires_takes_seconds_or_a_duration_as_granian_does(text, seconds):
    r = run_cli("cli_hello:app", "--static-path-mount", ".", "--static-path-expires", text, "--print-config", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["static_path_expires"] == seconds


@pytest.mark.parametrize("workers", ["1", "2"])
def test_one_mount_defaults_to_the_static_route(serve, www, workers):
    s = serve("cli_hello:app", "--static-path-mount", str(www), "--workers", workers)
    s.wait_log(r"Static files: /static/ from " + str(www) + r" \(by the engine")
    status, h, body = fetch(s.host, s.port, "/static/hello.txt")
    assert status == 200 and body == b"Hello, world!"
    assert h["cache-control"] == "public, max-age=86400"


# --- the portable open -------------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["h1", "h2c", "tls"])
@pytest.mark.parametrize("walk", [False, True], ids=["openat2", "walk"])
def test_open_beneath_the_mount(engine, www, transport, walk):
    kwargs = {"static": {"mounts": [["/static", str(www)]], "dir_to_file": "index.html", "walk": walk},
              "http2": {"mode": "auto"}}
    if transport == "tls":
        cert, key, _ = pki_files()
        kwargs["tls"] = {"certfile": cert, "keyfile": key}
    s = engine(**kwargs)
    assert fetch(s.host, s.port, "/static/hello.txt", transport)[2] == b"Hello, world!"
    assert fetch(s.host, s.port, "/static/sub/deep/x.txt", transport)[2] == b"deep"
    assert fetch(s.host, s.port, "/static/sub/", transport)[2] == b"<p>index</p>"
    for path in ("/static/link_out", "/static/../secret.txt", "/static/%2e%2e/secret.txt"):
        status, _, body = fetch(s.host, s.port, path, transport)
        assert status == 404 and b"SECRET" not in body, path
    # Symlinks that stay beneath the mount: openat2 follows them; the walk refuses every symlink.
    for path, want in (("/static/link_in", b"Hello, world!"), ("/static/sublink/deep/x.txt", b"deep")):
        status, _, body = fetch(s.host, s.port, path, transport)
        if walk:
            assert status == 404, path
        else:
            assert status == 200 and body == want, path
    assert fetch(s.host, s.port, "/", transport)[2] == b"Hello, world!"  # the handler (native hello)
