"""Errors that help a user coming from gunicorn and uvicorn: a config file's mistakes in the file's own
spelling and all at once, gunicorn's short APP form answered with the attribute to add, and an app that
does not import shown from the user's code down, without m0serve's and importlib's frames. Real CLI and
server processes."""
import os
import re
import textwrap

import pytest

from helpers import get, one_line, run_cli, wait_until


def test_a_toml_boolean_given_as_a_string_is_answered_in_toml_spelling(tmp_path):
    conf = tmp_path / "m0.toml"
    conf.write_text('access_log = "yes"\n')
    line = one_line(run_cli("-c", str(conf), "cli_hello:app", "--check-config"), 2)
    assert line == (f'm0serve: error: config file {conf}: access_log: must be true or false (a TOML boolean, '
                    'unquoted), not "yes"'), line
    assert "True" not in line


def test_a_python_config_file_keeps_python_spelling(tmp_path):
    conf = tmp_path / "m0.conf.py"
    conf.write_text('access_log = "yes"\n')
    line = one_line(run_cli("-c", str(conf), "cli_hello:app", "--check-config"), 2)
    assert line == f"m0serve: error: config file {conf}: access_log: must be True or False, not 'yes'", line


@pytest.mark.parametrize("ext", [".toml", ".py"])
def test_a_typo_and_a_bad_value_are_both_reported(tmp_path, ext):
    conf = tmp_path / ("m0" + ext)
    conf.write_text('acess_log = true\nworkers = "four"\n'.replace("true", "true" if ext == ".toml" else "True"))
    line = one_line(run_cli("-c", str(conf), "cli_hello:app", "--check-config"), 2)
    assert line.startswith(f"m0serve: error: config file {conf}: "), line
    assert "unknown name: acess_log (did you mean access_log?)" in line, line
    assert "workers: invalid integer 'four'" in line, line


def test_gunicorns_short_app_form_gets_the_attribute_to_add(tmp_path):
    """`m0serve mysite.wsgi` (gunicorn looks for `application`): the module's source is read, not
    imported, and the line says what to write."""
    pkg = tmp_path / "mysite"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    marker = tmp_path / "imported"
    (pkg / "wsgi.py").write_text(textwrap.dedent(f"""
        open({str(marker)!r}, "w").close()

        def application(environ, start_response):
            start_response("200 OK", [])
            return [b""]
    """))
    line = one_line(run_cli("mysite.wsgi", "--app-dir", str(tmp_path)), 2)
    assert line == ("m0serve: error: argument APP: 'mysite.wsgi' is not of the form module:attribute; did you "
                    f"mean mysite.wsgi:application? ({pkg / 'wsgi.py'} defines application)"), line
    assert not marker.exists()  # nothing of the app ran
    # and the suggestion serves
    r = run_cli("mysite.wsgi:application", "--app-dir", str(tmp_path), "--check-config")
    assert r.returncode == 0, r.stderr


def test_the_short_form_of_a_module_without_an_app_gets_no_suggestion(tmp_path):
    (tmp_path / "plain.py").write_text("x = 1\n")
    line = one_line(run_cli("plain", "--app-dir", str(tmp_path)), 2)
    assert line == "m0serve: error: argument APP: 'plain' is not of the form module:attribute", line


def _write(path, text):
    path.write_text(text)
    st = path.stat()  # a later mtime, whatever the filesystem's resolution
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))


GOOD = ("def app(environ, start_response):\n"
        "    start_response('200 OK', [('Content-Length', '2')])\n"
        "    return [b'ok']\n")


def _error_block(log, after):
    """The log's lines from the first 'cannot import' after offset `after` to the next log record."""
    rest = log[after:]
    start = rest.index("cannot import")
    lines = rest[start:].splitlines()
    block = [lines[0]]
    for line in lines[1:]:
        if re.match(r"\[\d{4}-", line):
            break
        block.append(line)
    return block


def test_reload_after_a_syntax_error_shows_the_users_error_alone(serve, tmp_path):
    app_file = tmp_path / "rl_syntax_app.py"
    _write(app_file, GOOD)
    s = serve("rl_syntax_app:app", "--app-dir", str(tmp_path), "--reload")
    assert get(s.host, s.port, "/")[2] == b"ok"
    mark = len(s.log)
    _write(app_file, "def app(environ, start_response)\n    oops\n")
    s.wait_log(r"before it was ready", timeout=15)
    block = _error_block(s.log, mark)
    assert block[1:] == [f'  File "{app_file}", line 1', "    def app(environ, start_response)",
                         "                                    ^", "SyntaxError: expected ':'"] or \
        (block[1] == f'  File "{app_file}", line 1' and block[-1].startswith("SyntaxError: ")), block
    assert not any("m0serve" in l or "importlib" in l for l in block[1:]), block
    _write(app_file, GOOD.replace("ok", "OK"))
    wait_until(lambda: get(s.host, s.port, "/")[2] == b"OK", 15, "the fixed app to be served")
    assert s.stop() == 0


def test_an_exception_in_the_apps_imports_starts_its_traceback_in_the_app(serve, tmp_path):
    (tmp_path / "imp_top.py").write_text("import json\nimport imp_helper\n" + GOOD)
    (tmp_path / "imp_helper.py").write_text("x = 1\nraise RuntimeError('helper failed')\n")
    r = run_cli("imp_top:app", "--app-dir", str(tmp_path), "--port", "0")
    assert r.returncode == 1, r.stderr
    tb = r.stderr[r.stderr.index("Traceback (most recent call last):"):].splitlines()
    assert tb[1] == f'  File "{tmp_path / "imp_top.py"}", line 2, in <module>', tb
    assert any(l == f'  File "{tmp_path / "imp_helper.py"}", line 2, in <module>' for l in tb), tb
    assert tb[-1] == "RuntimeError: helper failed", tb
    assert not any("m0serve" in l or "importlib" in l for l in tb), tb
