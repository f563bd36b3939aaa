"""--reload (issue 23, item 12): watchfiles (inotify) when installed, the poller otherwise; both
honour --reload-include and --reload-exclude, log which watcher runs and what it watches, and
the poller says when it stops counting files."""
import os
import re
import time

import pytest

from servers import APPS_DIR
from helpers import get, wait_until

# The servers' PYTHONPATH (servers.server_env) with the stub that hides watchfiles first.
NO_WATCHFILES = {"PYTHONPATH": os.pathsep.join([str(APPS_DIR / "no_watchfiles"), str(APPS_DIR),
                                                os.environ.get("PYTHONPATH", "")])}

APP = (
    "import os\n"
    "HERE = os.path.dirname(os.path.abspath(__file__))\n"
    "with open(os.path.join(HERE, 'templates', 'page.html'), 'rb') as f:\n"
    "    PAGE = f.read()\n"
    "def app(environ, start_response):\n"
    "    start_response('200 OK', [('Content-Type', 'text/html'), ('Content-Length', str(len(PAGE)))])\n"
    "    return [PAGE]\n"
)


def _write(path, text):
    path.write_text(text)
    st = path.stat()  # a later mtime, whatever the filesystem's resolution
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))


def _project(tmp_path):
    (tmp_path / "templates").mkdir()
    (tmp_path / "generated").mkdir()
    (tmp_path / "rl_app.py").write_text(APP)
    (tmp_path / "templates" / "page.html").write_text("one")
    (tmp_path / "generated" / "cache.html").write_text("x")
    return tmp_path


def _body(s):
    try:
        return get(s.host, s.port, "/")[2]
    except OSError:
        return None


@pytest.mark.parametrize("watcher", ["watchfiles", "polling"])
def test_reload_include_sees_templates_and_exclude_ignores_a_directory(serve, tmp_path, watcher):
    pytest.importorskip("watchfiles") if watcher == "watchfiles" else None
    d = _project(tmp_path)
    s = serve("rl_app:app", "--app-dir", str(d), "--reload", "--reload-include", "*.html",
              "--reload-exclude", "generated", env=NO_WATCHFILES if watcher == "polling" else None)
    # Which watcher runs, and what it watches.
    line = s.wait_log(r"reload: (watchfiles [0-9.]+ \(inotify\)|polling every 0.5s \d+ file\(s\) under) .*").group(0)
    assert line.startswith(f"reload: {watcher}"), line
    assert str(d) in line and "*.py, *.html" in line and "generated" in line, line
    if watcher == "polling":
        assert "polling every 0.5s 2 file(s)" in line, line  # rl_app.py and templates/page.html
    assert _body(s) == b"one"
    # A change in an excluded directory restarts nothing (given time for a poll and a debounce)...
    _write(d / "generated" / "cache.html", "y")
    _write(d / "notes.txt", "not included")
    time.sleep(2.0)
    assert "changes detected" not in s.log, s.log
    # ...and an included template does.
    _write(d / "templates" / "page.html", "two")
    s.wait_log(r"changes detected \(templates/page\.html\): restarting workers", timeout=10)
    wait_until(lambda: _body(s) == b"two", 10, "the edited template to be served")
    assert "changes detected (generated" not in s.log
    assert s.stop() == 0


@pytest.mark.parametrize("watcher", ["watchfiles", "polling"])
def test_reload_still_sees_py_files_by_default(serve, tmp_path, watcher):
    pytest.importorskip("watchfiles") if watcher == "watchfiles" else None
    d = _project(tmp_path)
    s = serve("rl_app:app", "--app-dir", str(d), "--reload", env=NO_WATCHFILES if watcher == "polling" else None)
    s.wait_log(rf"reload: {watcher}")
    _write(d / "templates" / "page.html", "two")  # not included without --reload-include
    time.sleep(1.5)
    assert "changes detected" not in s.log
    _write(d / "rl_app.py", APP + "# edited\n")
    s.wait_log(r"changes detected \(rl_app\.py\)", timeout=10)
    wait_until(lambda: _body(s) == b"two", 10, "the restarted worker to read the template again")
    assert s.stop() == 0


def test_poller_says_when_it_hits_its_file_cap(serve, tmp_path):
    d = _project(tmp_path)
    many = d / "many"
    many.mkdir()
    for i in range(20_001):
        (many / f"m{i}.py").write_bytes(b"")
    s = serve("rl_app:app", "--app-dir", str(d), "--reload", env=NO_WATCHFILES)
    m = s.wait_log(r"reload: more than 20000 matching files under (\S+): only the first 20000 are polled")
    assert m.group(1) == str(d)
    s.wait_log(r"reload: polling every 0.5s 20000 file\(s\)")
    # Excluding the directory brings it under the cap again.
    s2 = serve("rl_app:app", "--app-dir", str(d), "--reload", "--reload-exclude", "many", env=NO_WATCHFILES)
    s2.wait_log(r"reload: polling every 0.5s 1 file\(s\)")  # rl_app.py
    assert "more than 20000" not in s2.log
    assert s.stop() == 0 and s2.stop() == 0


def test_reload_globs_from_the_environment(serve, tmp_path):
    d = _project(tmp_path)
    s = serve("rl_app:app", "--app-dir", str(d), "--reload",
              env={**NO_WATCHFILES, "M0_RELOAD_INCLUDE": "*.html:*.txt", "M0_RELOAD_EXCLUDE": "generated"})
    line = s.wait_log(r"reload: polling .*").group(0)
    assert "*.py, *.html, *.txt" in line and "excluding .*, *~, *.py[cod], *.sw?, generated," in line, line
