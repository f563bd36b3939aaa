"""`m0serve --version`, `--check-config` and `--print-config [toml|json]`, on the real CLI process."""
import json
import re
import textwrap

import pytest

from helpers import run_cli

import m0serve
from m0serve import showconfig
from m0serve.config import OPTIONS, resolve

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None

needs_tomllib = pytest.mark.skipif(tomllib is None, reason="tomllib is Python 3.11+")


def test_version_names_the_release_and_the_interpreter():
    r = run_cli("--version")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"m0serve (\S+) \((CPython|PyPy) 3\.\d+\.\d+\S*, Linux \S+\)\n", r.stdout), r.stdout
    assert r.stdout.split()[1] == m0serve.__version__


@pytest.fixture
def project(tmp_path):
    """An app whose import would leave a marker file, and a config file for it."""
    (tmp_path / "marked.py").write_text(textwrap.dedent(f"""
        open({str(tmp_path / "imported")!r}, "w").close()

        def app(environ, start_response):
            start_response("200 OK", [])
            return [b""]
    """))
    conf = tmp_path / "m0.conf.py"
    conf.write_text(textwrap.dedent("""
        app = "marked:app"
        port = 7001
        workers = 3
        keep_alive_timeout = 2
        reload_dir = ["a", "b"]
        access_log_format = '%(h)s "%(r)s" \\\\ %(s)s'

        def post_fork(server, worker):
            pass
    """))
    return tmp_path, conf


def _lines(text):
    return {line.split(" = ", 1)[0]: line for line in text.splitlines() if " = " in line and not line.startswith("#")}


def test_check_config_resolves_like_a_start_and_says_where_each_value_came_from(project):
    d, conf = project
    r = run_cli("-c", str(conf), "--app-dir", str(d), "--workers", "4", "--check-config", env={"M0_PORT": "7002"})
    assert r.returncode == 0, r.stderr
    lines = _lines(r.stdout)
    assert lines["workers"] == "workers = 4  # command line"
    assert lines["port"] == "port = 7002  # environment M0_PORT"
    assert lines["keep_alive_timeout"] == f"keep_alive_timeout = 2.0  # config file {conf}"
    assert lines["backlog"] == "backlog = 2048  # default"
    assert lines["app"].startswith(f'app = "marked:app"  # config file {conf}; module found at {d / "marked.py"}')
    assert "# hooks: post_fork" in r.stdout
    assert "a supervisor and 4 workers" in r.stdout
    assert "# health_path: not set (default)" in r.stdout
    assert not (d / "imported").exists(), "--check-config imported the app"


@needs_tomllib
def test_check_config_output_is_toml(project):
    d, conf = project
    r = run_cli("-c", str(conf), "--app-dir", str(d), "--check-config")
    assert r.returncode == 0, r.stderr
    parsed = tomllib.loads(r.stdout)
    assert parsed["port"] == 7001 and parsed["reload_dir"] == ["a", "b"]


def test_print_config_json_is_what_resolve_gives(project):
    d, conf = project
    argv = ["-c", str(conf), "--app-dir", str(d), "--threads", "2"]
    env = {"M0_KEEP_ALIVE_TIMEOUT": "9", "M0_ACCESS_LOG": "yes", "WEB_CONCURRENCY": "5"}
    r = run_cli(*argv, "--print-config", "json", env=env)
    assert r.returncode == 0, r.stderr
    printed = json.loads(r.stdout)
    assert printed == showconfig.settings(resolve(argv, environ=env))
    assert set(printed) == {"app" if o.flag == "APP" else o.dest for o in OPTIONS}
    assert printed["keep_alive_timeout"] == 9.0 and printed["access_log"] is True
    assert printed["workers"] == 3  # the file wins over $WEB_CONCURRENCY
    assert printed["threads"] == 2 and printed["port"] == 7001 and printed["health_path"] is None
    assert printed["access_log_format"] == '%(h)s "%(r)s" \\ %(s)s'
    assert not (d / "imported").exists()


@needs_tomllib
def test_print_config_toml_round_trips(project):
    d, conf = project
    argv = ["-c", str(conf), "--app-dir", str(d), "--root-path", "/a\"b", "--host", "::1"]
    toml = run_cli(*argv, "--print-config")
    js = run_cli(*argv, "--print-config", "json")
    assert toml.returncode == 0 and js.returncode == 0, toml.stderr + js.stderr
    # config is a comment: a config file cannot name another
    expected = {k: v for k, v in json.loads(js.stdout).items() if v is not None and k != "config"}
    assert tomllib.loads(toml.stdout) == expected


@needs_tomllib
@pytest.mark.parametrize("value", ['q"uote', "back\\slash", "tab\tnl\nbell\x07del\x7f", "é ✓", "", "100%"])
def test_toml_strings_are_escaped(value):
    assert tomllib.loads(f"v = {showconfig.toml_value(value)}")["v"] == value


@pytest.mark.parametrize("value", [0.0, 5.0, 0.25, 1e20, 1e-7, 123456789.5])
def test_toml_floats_stay_floats(value):
    text = showconfig.toml_value(value)
    assert "." in text or "e" in text
    if tomllib:
        assert tomllib.loads(f"v = {text}")["v"] == value


@pytest.mark.parametrize("mode", [["--check-config"], ["--print-config"], ["--print-config", "json"]])
@pytest.mark.parametrize(
    "args, env, conf, name",
    [
        (["--port", "eighty"], None, None, "argument --port"),
        (["--bogus"], None, None, "--bogus"),
        ([], {"M0_KEEP_ALIVE_TIMEOUT": "soon"}, None, "environment variable M0_KEEP_ALIVE_TIMEOUT"),
        ([], {"WEB_CONCURRENCY": "many"}, None, "environment variable WEB_CONCURRENCY"),
        ([], None, "workers = 'four'\n", "workers"),
        ([], None, "wokers = 2\n", "wokers (did you mean workers?)"),
        (["--max-requests-jitter", "5"], None, None, "argument --max-requests-jitter"),
    ],
)
def test_a_bad_setting_exits_2_naming_it(tmp_path, mode, args, env, conf, name):
    if conf is not None:
        (tmp_path / "bad.conf.py").write_text(conf)
        args = [*args, "-c", str(tmp_path / "bad.conf.py")]
    r = run_cli("cli_hello:app", *args, *mode, env=env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("m0serve: error: ") and name in lines[0], r.stderr
    if conf is not None:
        assert f"config file {tmp_path / 'bad.conf.py'}" in lines[0]


def test_print_config_takes_toml_or_json_only():
    r = run_cli("cli_hello:app", "--print-config", "yaml")
    assert r.returncode == 2 and "argument --print-config" in r.stderr and "yaml" in r.stderr


def test_check_config_finds_no_app_module(tmp_path):
    r = run_cli("no_such_module_here:app", "--app-dir", str(tmp_path), "--check-config")
    assert r.returncode == 2
    assert r.stderr.strip() == (f"m0serve: error: argument APP: no module named 'no_such_module_here' in "
                                f"--app-dir {tmp_path} or on sys.path")


def test_check_config_applies_the_log_config(tmp_path):
    bad = tmp_path / "log.json"
    bad.write_text('{"version": 1, "handlers": {"h": {"class": "no.such.Handler"}}}')
    r = run_cli("cli_hello:app", "--log-config", str(bad), "--check-config")
    assert r.returncode == 2 and r.stderr.startswith(f"m0serve: error: argument --log-config: {bad}"), r.stderr
    # --print-config alone only resolves; with --check-config it checks too
    assert run_cli("cli_hello:app", "--log-config", str(bad), "--print-config").returncode == 0
    assert run_cli("cli_hello:app", "--log-config", str(bad), "--print-config", "--check-config").returncode == 2


def test_check_config_with_native_needs_no_app():
    r = run_cli("--native", "hello", "--check-config")
    assert r.returncode == 0, r.stderr
    assert "one process, no supervisor" in r.stdout and "# app: not set (default)" in r.stdout
