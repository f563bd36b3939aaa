"""--uds-permissions: the Unix socket's mode is set, not left to the umask (issue 23, item 9)."""
import os
import re
import socket
import stat
import subprocess
import sys

import shutil
import tempfile

import pytest

from servers import APPS_DIR, server_env
from helpers import exchange, one_line, run_cli


def _with_umask(mask, fn):
    old = os.umask(mask)
    try:
        return fn()
    finally:
        os.umask(old)


def _connect_as_nobody(path):
    """Connect to path from a process running as `nobody` (root would bypass the mode); its exit status:
    0 connected, 13 EACCES."""
    code = (
        "import os, socket, sys\n"
        "os.setgid(65534); os.setgroups([]); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n    s.connect(sys.argv[1])\nexcept PermissionError:\n    sys.exit(13)\n"
    )
    return subprocess.run([sys.executable, "-c", code, path], timeout=10).returncode


@pytest.fixture
def sock_dir():
    """A directory every user may enter (pytest's tmp_path is under a 0700 one)."""
    d = tempfile.mkdtemp(prefix="m0uds-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_uds_permissions_sets_the_mode_whatever_the_umask(serve, sock_dir, workers):
    path = os.path.join(sock_dir, "m0.sock")
    s = _with_umask(0o077, lambda: serve("cli_hello:app", "--uds", path, "--uds-permissions", "666",
                                         "--workers", workers, wait=False))
    s.wait_log(re.escape(f"Listening on unix:{path}"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666
    if os.getuid() == 0:
        assert _connect_as_nobody(path) == 0  # another user (nginx's www-data) may connect
    c = socket.socket(socket.AF_UNIX)
    c.settimeout(5)
    c.connect(path)
    status, _, _ = exchange(c, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    c.close()
    assert status == 200
    assert s.stop() == 0


def test_without_the_flag_the_umask_decides(serve, sock_dir):
    path = os.path.join(sock_dir, "m0.sock")
    s = _with_umask(0o022, lambda: serve("cli_hello:app", "--uds", path, wait=False))
    s.wait_log(re.escape(f"Listening on unix:{path}"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o755
    if os.getuid() == 0:
        assert _connect_as_nobody(path) == 13  # the control: what the flag fixes


@pytest.mark.parametrize("value, mode", [("660", 0o660), ("0o600", 0o600), ("0777", 0o777)])
def test_uds_permissions_from_the_environment(serve, tmp_path, value, mode):
    path = str(tmp_path / "m0.sock")
    s = serve("cli_hello:app", "--uds", path, env={"M0_UDS_PERMISSIONS": value}, wait=False)
    s.wait_log(re.escape(f"Listening on unix:{path}"))
    assert stat.S_IMODE(os.stat(path).st_mode) == mode


@pytest.mark.parametrize("args, message", [
    (["--uds", "x.sock", "--uds-permissions", "9"], "argument --uds-permissions: invalid octal mode '9'"),
    (["--uds", "x.sock", "--uds-permissions", "1777"], "argument --uds-permissions: '1777' is out of range"),
    (["--uds-permissions", "660"], "argument --uds-permissions: needs --uds"),
])
def test_bad_uds_permissions_is_one_line(args, message):
    r = subprocess.run([sys.executable, "-m", "m0serve", "cli_hello:app", *args], env=server_env(),
                       cwd=str(APPS_DIR), capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr


def test_uds_permissions_in_a_config_file(serve, tmp_path):
    path = str(tmp_path / "m0.sock")
    conf = tmp_path / "m0.conf.py"
    conf.write_text(f"uds = {path!r}\nuds_permissions = '660'\n")
    s = _with_umask(0o077, lambda: serve("cli_hello:app", "-c", str(conf), wait=False))
    s.wait_log(re.escape(f"Listening on unix:{path}"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o660


@pytest.mark.parametrize("ext, literal", [(".py", "0o660"), (".toml", "0o660"), (".toml", '"660"'), (".py", '"0o660"')])
def test_an_integer_mode_in_a_config_file_is_the_mode_it_is(serve, tmp_path, ext, literal):
    """`uds_permissions = 0o660` (the int 432) is mode 0660, not 0432; a string is octal text."""
    path = str(tmp_path / "m0.sock")
    conf = tmp_path / ("m0.conf" + ext)
    conf.write_text(f"uds = {path!r}\nuds_permissions = {literal}\n".replace("'", '"'))
    r = run_cli("-c", str(conf), "cli_hello:app", "--check-config")
    assert r.returncode == 0, r.stderr
    assert re.search(r'^uds_permissions = "0660"', r.stdout, re.M), r.stdout
    s = _with_umask(0o077, lambda: serve("cli_hello:app", "-c", str(conf), wait=False))
    s.wait_log(re.escape(f"Listening on unix:{path}"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o660


@pytest.mark.parametrize("ext", [".py", ".toml"])
def test_a_decimal_integer_mode_in_a_config_file_is_refused(tmp_path, ext):
    """`uds_permissions = 660` is the number 0o1224, not a mode: refused on one line, not read as octal."""
    conf = tmp_path / ("m0.conf" + ext)
    conf.write_text('uds = "x.sock"\nuds_permissions = 660\n')
    line = one_line(run_cli("-c", str(conf), "cli_hello:app", "--check-config"), 2)
    assert f"config file {conf}: uds_permissions: 660 is 0o1224 as a number" in line, line
    assert "0o660" in line, line
