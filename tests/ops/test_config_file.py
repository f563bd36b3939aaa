"""-c/--config FILE: settings and server hooks in a Python file.

The hooks write "name pid detail" lines to the file named by $MARKS; the tests read it
to see which hook ran in which process, and in what order."""
import re
import signal
import socket
import textwrap
import threading

import pytest

from m0serve.config import resolve
from helpers import get, run_cli, wait_until, worker_pids

ALL_HOOKS = textwrap.dedent("""\
    import os

    def _mark(*what):
        with open(os.environ["MARKS"], "a") as f:
            f.write(" ".join(str(w) for w in what) + "\\n")

    def on_starting(server):
        _mark("on_starting", os.getpid(), type(server).__name__)

    def when_ready(server):
        _mark("when_ready", os.getpid(), server.pid)

    def pre_fork(server, worker):
        _mark("pre_fork", os.getpid(), worker.age, worker.pid)

    def post_fork(server, worker):
        _mark("post_fork", os.getpid(), worker.age, worker.pid, worker.ppid)

    def post_worker_init(worker):
        _mark("post_worker_init", os.getpid(), worker.age, callable(worker.app))

    def worker_int(worker):
        _mark("worker_int", os.getpid(), worker.pid)

    def worker_abort(worker):
        _mark("worker_abort", os.getpid(), worker.pid)

    def worker_exit(server, worker):
        _mark("worker_exit", os.getpid(), worker.pid)

    def child_exit(server, worker):
        _mark("child_exit", os.getpid(), worker.pid)

    def on_exit(server):
        _mark("on_exit", os.getpid())
    """)


def write(tmp_path, text, name="m0conf.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def marks(path):
    """[(hook, pid, *details)] in the order they were written."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        name, pid, *rest = line.split(" ")
        out.append((name, int(pid), *rest))
    return out


def names(ms, pid=None):
    return [m[0] for m in ms if pid is None or m[1] == pid]


@pytest.fixture
def hooks_conf(tmp_path):
    conf = write(tmp_path, ALL_HOOKS + "\nworkers = 2\n")
    return conf, tmp_path / "marks"


@pytest.mark.parametrize("app", ["sup_app:app", "sup_asgi:app"])
def test_every_hook_runs_in_its_process_and_order(serve, hooks_conf, app):
    conf, marks_file = hooks_conf
    s = serve(app, "-c", str(conf), env={"MARKS": str(marks_file)})
    sup = s.proc.pid
    workers = worker_pids(s, 2)
    assert get(s.host, s.port, "/")[0] == 200
    wait_until(lambda: names(marks(marks_file)).count("post_worker_init") == 2, 5, "both workers initialised")
    assert s.stop() == 0
    ms = marks(marks_file)

    # The supervisor: on_starting, when_ready (its sockets are bound), then one pre_fork per
    # worker before that worker exists; at the end child_exit for each, then on_exit, last.
    assert names(ms, sup) == ["on_starting", "when_ready", "pre_fork", "pre_fork", "child_exit", "child_exit",
                              "on_exit"]
    assert ms[0] == ("on_starting", sup, "Supervisor") and ms[-1] == ("on_exit", sup)
    assert ("when_ready", sup, str(sup)) in ms
    assert [m[2:] for m in ms if m[0] == "pre_fork"] == [("1", "None"), ("2", "None")]
    assert sorted(int(m[2]) for m in ms if m[0] == "child_exit") == sorted(workers)

    # Each worker: post_fork, post_worker_init (its app loaded), and worker_exit as it leaves.
    for pid in workers:
        assert names(ms, pid) == ["post_fork", "post_worker_init", "worker_exit"], ms
        [fork] = [m for m in ms if m[0] == "post_fork" and m[1] == pid]
        assert fork[3] == str(pid) and fork[4] == str(sup)
        assert [m for m in ms if m[0] == "post_worker_init" and m[1] == pid][0][3] == "True"
        assert ("worker_exit", pid, str(pid)) in ms
    # Order across processes: a worker's hooks come after its pre_fork; its child_exit after
    # its worker_exit.
    index = {m: i for i, m in enumerate(ms)}
    for pid in workers:
        age = [m for m in ms if m[0] == "post_fork" and m[1] == pid][0][2]
        assert index[("pre_fork", sup, age, "None")] < index[[m for m in ms if m[0] == "post_fork" and m[1] == pid][0]]
        assert index[("worker_exit", pid, str(pid))] < index[("child_exit", sup, str(pid))]
    assert "worker_int" not in names(ms) and "worker_abort" not in names(ms)


@pytest.mark.parametrize("app", ["sup_app:app", "sup_asgi:app"])
def test_quit_runs_worker_int_in_each_worker(serve, hooks_conf, app):
    conf, marks_file = hooks_conf
    s = serve(app, "-c", str(conf), env={"MARKS": str(marks_file)})
    workers = worker_pids(s, 2)
    wait_until(lambda: names(marks(marks_file)).count("post_worker_init") == 2, 5, "both workers initialised")
    s.stop(signal.SIGQUIT)
    ms = marks(marks_file)
    for pid in workers:
        assert names(ms, pid)[-2:] == ["worker_int", "worker_exit"], ms
    assert names(ms)[-1] == "on_exit"


@pytest.mark.parametrize("app, path, frame", [("sup_app:app", "/sleep?s=30", "in slow_view"),
                                              ("sup_asgi:app", "/block?s=30", "in blocking_view")])
def test_worker_abort_runs_in_a_stuck_worker(serve, hooks_conf, app, path, frame):
    conf, marks_file = hooks_conf
    s = serve(app, "-c", str(conf), "--worker-timeout", "1", env={"MARKS": str(marks_file)})
    worker_pids(s, 2)
    threading.Thread(target=lambda: _swallow(lambda: get(s.host, s.port, path, timeout=20)),
                     daemon=True).start()
    m = s.wait_log(r"worker (\d+) has been stuck", timeout=10)
    stuck = int(m.group(1))
    s.wait_log(rf"worker {stuck} exited with code 1 \(worker timeout\)", timeout=10)
    ms = marks(marks_file)
    assert names(ms, stuck)[-1] == "worker_abort", ms
    assert ("child_exit", s.proc.pid, str(stuck)) in marks(marks_file)
    # The stack dump still came first, and the worker was replaced.
    assert frame in s.log
    wait_until(lambda: len(re.findall(r"worker \d+ ready", s.log)) == 3, 10, "the replacement")
    assert get(s.host, s.port, "/")[0] == 200


def _swallow(fn):
    try:
        fn()
    except OSError:
        pass


def test_without_a_supervisor_the_in_process_hooks_run(serve, tmp_path):
    # One worker, no fork hooks: m0serve serves in the process it started, and runs the hooks
    # that make sense there; INT (Ctrl-C) is worker_int.
    conf = write(tmp_path, ALL_HOOKS.split("def pre_fork")[0] + textwrap.dedent("""\
        def post_worker_init(worker):
            _mark("post_worker_init", os.getpid(), worker.pid)

        def worker_int(worker):
            _mark("worker_int", os.getpid())

        def worker_exit(server, worker):
            _mark("worker_exit", os.getpid())

        def on_exit(server):
            _mark("on_exit", os.getpid())
        """))
    marks_file = tmp_path / "marks"
    s = serve("cli_hello:app", "--config", str(conf), env={"MARKS": str(marks_file)})
    assert "supervisor" not in s.log
    assert s.stop(signal.SIGINT) == 0
    pid = s.proc.pid
    assert marks(marks_file) == [("on_starting", pid, "InProcess"), ("when_ready", pid, str(pid)),
                                 ("post_worker_init", pid, str(pid)), ("worker_int", pid), ("worker_exit", pid),
                                 ("on_exit", pid)]


def test_a_fork_hook_brings_the_supervisor(serve, tmp_path):
    conf = write(tmp_path, """\
        def post_fork(server, worker):
            server.log.info("post_fork hook saw worker %d", worker.pid)
        """)
    s = serve("sup_app:app", "-c", str(conf))
    [pid] = worker_pids(s, 1)
    s.wait_log(rf"post_fork hook saw worker {pid}")
    assert "supervisor" in s.log


def test_a_failing_post_worker_init_is_a_failed_boot(serve, tmp_path):
    conf = write(tmp_path, """\
        workers = 2
        def post_worker_init(worker):
            raise RuntimeError("no database")
        """)
    s = serve("sup_app:app", "-c", str(conf), wait=False)
    assert s.proc.wait(20) == 1
    s.stop()
    assert "the post_worker_init hook raised" in s.log and "RuntimeError: no database" in s.log
    assert "before it was ready" in s.log


def test_a_failing_on_starting_exits_1_before_binding(tmp_path):
    conf = write(tmp_path, """\
        def on_starting(server):
            raise RuntimeError("not today")
        """)
    r = run_cli("cli_hello:app", "-c", str(conf), "--port", "0")
    assert r.returncode == 1
    assert "the on_starting hook raised" in r.stderr and "RuntimeError: not today" in r.stderr
    assert "Listening" not in r.stderr


# --- settings and precedence -------------------------------------------------------------


def _line(length):
    """A request whose request line is `length` bytes long (without CRLF)."""
    target = "/" + "a" * (length - len("GET / HTTP/1.1"))
    return f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()


def _status(s, raw):
    with socket.create_connection((s.host, s.port), timeout=5) as c:
        c.sendall(raw)
        data = b""
        while b"\r\n" not in data:
            chunk = c.recv(4096)
            if not chunk:
                break
            data += chunk
    return int(data.split(b" ")[1])


def test_precedence_command_line_then_environment_then_file(serve, tmp_path):
    conf = write(tmp_path, "limit_request_line = 100\n")
    # The file alone.
    s = serve("cli_hello:app", "-c", str(conf))
    assert (_status(s, _line(100)), _status(s, _line(150))) == (200, 414)
    s.stop()
    # The environment wins over the file.
    s = serve("cli_hello:app", "-c", str(conf), env={"M0_LIMIT_REQUEST_LINE": "200"})
    assert (_status(s, _line(150)), _status(s, _line(250))) == (200, 414)
    s.stop()
    # The command line wins over both.
    s = serve("cli_hello:app", "-c", str(conf), "--limit-request-line", "300", env={"M0_LIMIT_REQUEST_LINE": "200"})
    assert (_status(s, _line(250)), _status(s, _line(350))) == (200, 414)
    s.stop()
    # M0_CONFIG names the file too.
    s = serve("cli_hello:app", env={"M0_CONFIG": str(conf)})
    assert _status(s, _line(150)) == 414


def test_precedence_of_every_kind_of_setting(tmp_path):
    conf = write(tmp_path, """\
        import multiprocessing
        from os.path import join
        from multiprocessing import cpu_count

        _base = "/srv"
        app = "fromfile:app"
        workers = 3
        keep_alive_timeout = 2
        access_log = True
        reload_dir = [join(_base, "a"), "b"]
        root_path = "/mount"
        pid_file = None
        """)
    cfg = resolve(["-c", str(conf)], environ={})
    assert (cfg.app, cfg.workers, cfg.keep_alive_timeout, cfg.access_log) == ("fromfile:app", 3, 2.0, True)
    assert cfg.reload_dir == ["/srv/a", "b"] and cfg.root_path == "/mount" and cfg.pid_file is None
    assert cfg.config == str(conf) and not cfg.hooks
    # The file wins over WEB_CONCURRENCY (a default), M0_* over the file, the command line over all.
    assert resolve(["-c", str(conf)], environ={"WEB_CONCURRENCY": "5"}).workers == 3
    assert resolve(["-c", str(conf)], environ={"M0_WORKERS": "4", "M0_APP": "env:app"}).workers == 4
    cfg = resolve(["cli:app", "-c", str(conf), "--workers", "6", "--keep-alive-timeout", "0"],
                  environ={"M0_WORKERS": "4", "M0_ACCESS_LOG": "0"})
    assert (cfg.app, cfg.workers, cfg.keep_alive_timeout, cfg.access_log) == ("cli:app", 6, 0.0, False)
    # Without the file, the defaults.
    cfg = resolve(["x:app"], environ={})
    assert (cfg.workers, cfg.keep_alive_timeout, cfg.access_log, cfg.config) == (1, 5.0, False, None)


def test_hooks_are_loaded_and_fork_hooks_need_a_supervisor(tmp_path):
    conf = write(tmp_path, ALL_HOOKS)
    cfg = resolve(["x:app", "-c", str(conf)], environ={})
    assert sorted(cfg.hooks.funcs) == sorted(
        ["on_starting", "when_ready", "pre_fork", "post_fork", "post_worker_init", "worker_int", "worker_abort",
         "worker_exit", "child_exit", "on_exit"])
    assert cfg.workers == 1 and cfg.supervised
    conf = write(tmp_path, "def on_starting(server):\n    pass\n", "b.py")
    assert not resolve(["x:app", "-c", str(conf)], environ={}).supervised


# --- errors: one line, exit 2 ------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expect",
    [
        ("wokers = 2\n", ["unknown name: wokers (did you mean workers?)"]),
        ("bind = '0.0.0.0:80'\ntimeout = 30\n",
         ["unknown names: bind (here: host and port (or uds)), timeout (here: worker_timeout)"]),
        ("def post_forks(server, worker):\n    pass\n", ["post_forks (did you mean post_fork?)"]),
        ("def pre_request(worker, req):\n    pass\n", ["pre_request (a gunicorn hook m0serve does not have)"]),
        ("def helper():\n    pass\n", ["unknown name: helper"]),
        ("config = 'other.py'\n", ["config (a config file cannot name another)"]),
        ("workers = 'many'\n", ["workers: invalid integer 'many'"]),
        ("workers = 0\n", ["workers: 0 is out of range"]),
        ("workers = True\n", ["workers: invalid value True"]),
        ("access_log = 'yes'\n", ["access_log: must be True or False"]),
        ("keep_alive_timeout = -1\n", ["keep_alive_timeout:"]),
        ("interface = 'cgi'\n", ["interface: invalid choice 'cgi'"]),
        ("reload_dir = [1]\n", ["reload_dir: must be a list of strings"]),
        ("post_fork = 3\n", ["post_fork: must be callable, not int"]),
        ("def post_fork(server):\n    pass\n", ["post_fork: must accept (server, worker)"]),
    ],
)
def test_bad_config_file_exits_2_with_one_line(tmp_path, text, expect):
    conf = write(tmp_path, text)
    r = run_cli("cli_hello:app", "-c", str(conf))
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"m0serve: error: config file {conf}: "), lines[0]
    for e in expect:
        assert e in lines[0], lines[0]


def test_missing_config_file(tmp_path):
    r = run_cli("cli_hello:app", "--config", str(tmp_path / "nope.py"))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"m0serve: error: config file {tmp_path / 'nope.py'}: no such file"]


def test_config_file_that_raises_shows_its_traceback_then_one_line(tmp_path):
    conf = write(tmp_path, "workers = 2\nraise RuntimeError('bad config')\n")
    r = run_cli("cli_hello:app", "-c", str(conf))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert "Traceback" in r.stderr and f'File "{conf}", line 2' in r.stderr
    assert lines[-1] == f"m0serve: error: config file {conf}: RuntimeError: bad config"


def test_config_file_without_py_suffix(tmp_path):
    conf = write(tmp_path, "workers = 2\n", "m0serve.conf")
    assert resolve(["x:app", "-c", str(conf)], environ={}).workers == 2

