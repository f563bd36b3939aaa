"""Ordinary mistakes at start (a bad path, a missing module, a typo, a habit from gunicorn)
end in one line that names the cause, never in a traceback of m0serve's own frames or a
service that serves errors. On the real CLI process."""
import json
import re
import textwrap

import pytest

from helpers import get, one_line, run_cli

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib


# --- files the server writes: one line, exit 2 ------------------------------------------


@pytest.mark.parametrize("flag", ["--pid-file", "--log-file"])
@pytest.mark.parametrize("mode", [[], ["--workers", "2"], ["--check-config"]])
@pytest.mark.parametrize("where", ["missing directory", "a directory"])
def test_an_unwritable_pid_or_log_file_is_one_line_naming_the_flag_and_the_path(tmp_path, flag, mode, where):
    path = tmp_path / "no" / "such" / "dir" / "m0.out" if where == "missing directory" else tmp_path
    line = one_line(run_cli("cli_hello:app", "--port", "0", flag, str(path), *mode), 2)
    assert line.startswith(f"m0serve: error: argument {flag}: cannot write {path}: "), line
    assert ".tmp" not in line


def test_check_config_accepts_writable_files(tmp_path):
    r = run_cli("cli_hello:app", "--pid-file", str(tmp_path / "m0.pid"), "--log-file", str(tmp_path / "m0.log"),
                "--check-config")
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "m0.pid").exists() and not (tmp_path / "m0.log").exists()  # checked, not created


# --- the app's module: one line when it is missing, its traceback once when it raises ------


@pytest.mark.parametrize("mode", [[], ["--workers", "3"]])
def test_a_missing_app_module_is_the_check_config_line_once(tmp_path, mode):
    r = run_cli("no_such_module_here:app", "--app-dir", str(tmp_path), "--port", "0", *mode)
    line = one_line(r, 1)
    assert line == (f"m0serve: error: argument APP: no module named 'no_such_module_here' in --app-dir {tmp_path} "
                    "or on sys.path")


def test_a_missing_module_inside_a_found_package_is_one_line_per_start(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    r = run_cli("pkg.nope:app", "--app-dir", str(tmp_path), "--port", "0", "--workers", "3")
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert len(re.findall(r"cannot load pkg\.nope:app: no module named 'pkg\.nope' in --app-dir", r.stderr)) == 1, \
        r.stderr


def _rendezvous_app(tmp_path, n, body):
    """An app whose import, in each of n workers, waits for the others before `body`: their
    failures then come at once."""
    (tmp_path / "together.py").write_text(textwrap.dedent(f"""
        import os, time
        open(os.path.join({str(tmp_path)!r}, f"arrived.{{os.getpid()}}"), "w").close()
        deadline = time.monotonic() + 5
        while sum(n.startswith("arrived.") for n in os.listdir({str(tmp_path)!r})) < {n} and time.monotonic() < deadline:
            time.sleep(0.01)
    """) + textwrap.dedent(body))


@pytest.mark.parametrize("body, error", [
    ("raise RuntimeError('together: configuration failed')\n", "RuntimeError: together: configuration failed"),
    ("import no_such_dependency_of_the_app\n", "ModuleNotFoundError: No module named 'no_such_dependency_of_the_app'"),
])
def test_an_exception_in_the_apps_import_keeps_its_traceback_once(tmp_path, body, error):
    _rendezvous_app(tmp_path, 4, body)
    r = run_cli("together:app", "--app-dir", str(tmp_path), "--port", "0", "--workers", "4", timeout=60)
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("Traceback (most recent call last)") == 1, r.stderr
    assert r.stderr.count(error) == 1, r.stderr
    assert "together.py" in r.stderr and "Listening on" not in r.stderr


# --- config files ------------------------------------------------------------------------


def test_a_toml_config_file_is_loaded_by_its_extension(serve, tmp_path):
    conf = tmp_path / "m0serve.toml"
    conf.write_text('root_path = "/from-toml"\nno_server_header = true\nkeep_alive_timeout = 2.5\n'
                    'reload_dir = ["a", "b"]\n')
    s = serve("cli_hello:app", "-c", str(conf))
    status, headers, body = get(s.host, s.port, "/from-toml/page")
    assert (status, body) == (200, b"hello script=/from-toml path=/page")
    assert "server" not in {k.lower() for k in headers}
    r = run_cli("cli_hello:app", "-c", str(conf), "--print-config", "json")
    printed = json.loads(r.stdout)
    assert printed["keep_alive_timeout"] == 2.5 and printed["reload_dir"] == ["a", "b"]


def test_print_config_output_loads_with_c(tmp_path):
    (tmp_path / "m0.conf.py").write_text(textwrap.dedent("""
        workers = 3
        access_log = True
        health_path = "/healthz"
        access_log_format = '%(h)s "%(r)s" \\\\ %(s)s'
        reload_dir = ["src"]
    """))
    argv = ["cli_hello:app", "-c", str(tmp_path / "m0.conf.py"), "--port", "7005", "--root-path", "/a\"b"]
    first = run_cli(*argv, "--print-config")
    assert first.returncode == 0, first.stderr
    saved = tmp_path / "saved.toml"
    saved.write_text(first.stdout)
    again = run_cli("-c", str(saved), "--print-config")
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout.replace(f'# config: "{tmp_path / "m0.conf.py"}"', f'# config: "{saved}"')
    before = json.loads(run_cli(*argv, "--print-config", "json").stdout)
    after = json.loads(run_cli("-c", str(saved), "--print-config", "json").stdout)
    assert after == dict(before, config=str(saved))
    assert after["workers"] == 3 and after["root_path"] == '/a"b' and after["port"] == 7005


def test_print_config_takes_an_app_after_it():
    r = run_cli("--print-config", "cli_hello:app")
    assert r.returncode == 0, r.stderr
    assert tomllib.loads(r.stdout)["app"] == "cli_hello:app"
    r = run_cli("--print-config", "json", "cli_hello:app")
    assert r.returncode == 0 and json.loads(r.stdout)["app"] == "cli_hello:app", r.stderr


@pytest.mark.parametrize("name, text, where, error", [
    ("m0.conf.py", "workers = 2\nport = = 8000\n", 2, "SyntaxError: invalid syntax"),
    ("m0.conf.py", "if True:\nworkers = 2\n", 2, "IndentationError: expected an indented block"),
    ("m0.toml", "workers = 2\nport = = 8000\n", 2, "invalid TOML: Invalid value"),
    ("m0.toml", "workers = false\nworkers = 3\n", 2, "invalid TOML: Cannot overwrite a value"),
])
def test_a_config_file_that_does_not_parse_is_one_line_with_file_and_line(tmp_path, name, text, where, error):
    conf = tmp_path / name
    conf.write_text(text)
    for mode in [["--port", "0"], ["--check-config"]]:
        line = one_line(run_cli("cli_hello:app", "-c", str(conf), *mode), 2)
        assert line.startswith(f"m0serve: error: config file {conf}:{where}: {error}"), line


def test_a_toml_config_file_names_a_bad_setting(tmp_path):
    conf = tmp_path / "m0.toml"
    conf.write_text('access_log = true\nport = "eighty"\n')  # `true`: TOML, not Python
    line = one_line(run_cli("cli_hello:app", "-c", str(conf)), 2)
    assert line.startswith(f"m0serve: error: config file {conf}: port: invalid integer 'eighty'"), line


# --- typos and habits --------------------------------------------------------------------


def test_an_unknown_m0_variable_is_a_warning_naming_the_nearest_option(serve):
    s = serve("cli_hello:app", env={"M0_WOKERS": "4", "M0_ZZZ": "1"})
    s.wait_log(r"\[WARNING\] environment variable M0_WOKERS is not an m0serve setting and is ignored "
               r"\(did you mean M0_WORKERS\?\)")
    assert "environment variable M0_ZZZ is not an m0serve setting and is ignored (no option has this name)" in s.log
    assert get(s.host, s.port)[0] == 200
    r = run_cli("cli_hello:app", "--check-config", env={"M0_KEEPALIVE_TIMEOUT": "2"})
    assert r.returncode == 0
    assert r.stderr == ("m0serve: warning: environment variable M0_KEEPALIVE_TIMEOUT is not an m0serve setting and "
                        "is ignored (did you mean M0_KEEP_ALIVE_TIMEOUT?)\n")


@pytest.mark.parametrize("args, hints", [
    (["-w", "4"], ["-w (here: --workers)"]),
    (["-w4"], ["-w (here: --workers)"]),
    (["-b", "0.0.0.0:8000"], ["-b (here: --host and --port, or --uds)"]),
    (["--bind", "0.0.0.0:8000"], ["--bind (here: --host and --port, or --uds)"]),
    (["--bind=unix:/tmp/s", "--timeout", "30"],
     ["--bind (here: --host and --port, or --uds)", "--timeout (here: --worker-timeout)"]),
    (["--timeout", "30"], ["--timeout (here: --worker-timeout)"]),
])
def test_gunicorn_flags_get_the_flag_to_use(args, hints):
    line = one_line(run_cli("cli_hello:app", *args), 2)
    assert line.startswith("m0serve: error: unrecognized arguments: "), line
    for hint in hints:
        assert hint in line, line


@pytest.mark.parametrize("mode", [[], ["--workers", "2"]])
def test_threads_with_an_app_found_to_be_asgi_is_one_line_exit_2(serve, mode):
    """With a GIL (a GIL build, or a free-threaded one run with PYTHON_GIL=1) an ASGI app's
    --threads loops would take turns on one core: refused (asgi/test_asgi_threads.py serves them
    on a free-threaded build)."""
    s = serve("sup_asgi:app", "--threads", "2", *mode, wait=False, env={"PYTHON_GIL": "1"})
    assert s.proc.wait(20) == 2
    s._reader.join(5)
    errors = [line for line in s.lines if "m0serve: error:" in line]
    assert errors == ["m0serve: error: argument --threads: sup_asgi:app is an ASGI application: an ASGI app "
                      "runs its --threads event loops in parallel only on a free-threaded Python (3.13t with "
                      "the GIL off); use --workers\n"], s.log
    if not mode:
        assert s.log.strip() == errors[0].strip()


@pytest.mark.parametrize("mode", [[], ["--workers", "2"]])
def test_a_factory_without_factory_is_said_at_start(serve, mode):
    s = serve("cli_hello:create_app", *mode, wait=False)
    assert s.proc.wait(20) == 1
    s._reader.join(5)
    assert "Listening on" not in s.log
    found = re.findall(r"cannot load cli_hello:create_app: cli_hello:create_app takes no arguments: it looks like an "
                       r"app factory; add --factory \(or write APP as cli_hello:create_app\(\)\)", s.log)
    assert len(found) == 1, s.log
    # The forms that say it is a factory serve.
    ok = serve("cli_hello:create_app", "--factory")
    assert get(ok.host, ok.port)[2] == b"factory"
