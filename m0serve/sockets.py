"""Listening sockets: TCP (--host/--port), Unix (--uds), inherited (--fd), systemd
socket activation (LISTEN_FDS/LISTEN_PID). They are bound once, before any fork, so
every worker shares one accept queue; with --reuse-port the supervisor only reserves
the address and each worker binds its own SO_REUSEPORT socket. On an I/O backend without
EPOLLEXCLUSIVE (poll, kqueue) the workers do not accept from them at all: the supervisor's
accept hand-off does, and passes each connection to one loop (m0serve/handoff.py).
"""
from __future__ import annotations

import errno
import os
import socket
import stat

SD_LISTEN_FDS_START = 3


class BindError(Exception):
    pass


def _describe(sock):
    if sock.family == socket.AF_UNIX:
        name = sock.getsockname()
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        return f"unix:{name}" if name else "unix:(unnamed)"
    host, port = sock.getsockname()[:2]
    if sock.family == socket.AF_INET6:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def url_of(listener, cfg):
    """The listener's URL as the log gives it: https:// when the engine serves TLS."""
    if cfg.ssl_certfile is not None and listener.url.startswith("http://"):
        return "https://" + listener.url[len("http://"):]
    return listener.url


class Listener:
    """One listening address. `sock` is listening unless this reserves a SO_REUSEPORT address."""

    def __init__(self, sock, *, origin, unlink_path=None, reuse_port=False, backlog=2048):
        self.sock = sock
        self.origin = origin  # "bind" | "uds" | "fd" | "systemd"
        self.unlink_path = unlink_path
        self.reuse_port = reuse_port
        self.backlog = backlog
        self.url = _describe(sock)

    def fileno(self):
        return self.sock.fileno()

    def worker_socket(self):
        """The socket a worker serves: the shared one, or a fresh SO_REUSEPORT one."""
        if not self.reuse_port:
            return self.sock
        s = socket.socket(self.sock.family, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            _tcp_nodelay(s)
            s.bind(self.sock.getsockname())
            s.listen(self.backlog)
        except BaseException:
            s.close()
            raise
        return s

    def stop_listening(self):
        """Refuse new connections at once in every process that shares this socket.

        Not for a socket handed to us (--fd, systemd): its owner keeps it listening so
        connections queue for the next server instead of being refused."""
        if self.origin in ("fd", "systemd"):
            return
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self):
        try:
            self.sock.close()
        finally:
            if self.unlink_path:
                try:
                    if stat.S_ISSOCK(os.lstat(self.unlink_path).st_mode):
                        os.unlink(self.unlink_path)
                except OSError:
                    pass


def _tcp_nodelay(s):
    if s.family in (socket.AF_INET, socket.AF_INET6):
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited by accepted sockets
        except OSError:
            pass


def bind_tcp(host, port, backlog, reuse_port=False, reserve_only=False):
    """Bind host:port. reserve_only (with reuse_port): bind without listening, so the
    address is held while each worker listens on its own SO_REUSEPORT socket."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise BindError(f"cannot resolve --host {host!r}: {e.strerror}") from None
    family, type_, proto, _, addr = infos[0]
    s = socket.socket(family, type_, proto)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if host in ("::", "") else 1)
        _tcp_nodelay(s)
        s.bind(addr)
        if not reserve_only:
            s.listen(backlog)
    except OSError as e:
        s.close()
        raise BindError(f"cannot bind {host}:{port}: {e.strerror or e}") from None
    return Listener(s, origin="bind", reuse_port=reserve_only, backlog=backlog)


def bind_unix(path, backlog, mode=None):
    """Bind and listen at path. mode (octal text such as "0660", or None for what the umask leaves) is
    set before listen(2), so no client connects to the socket while it has the umask's mode."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISSOCK(st.st_mode):
            raise BindError(f"--uds {path}: exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError as e:
            if e.errno not in (errno.ECONNREFUSED, errno.ENOENT):
                raise BindError(f"--uds {path}: {e.strerror}") from None
            os.unlink(path)  # stale: nobody listens on it
        else:
            raise BindError(f"--uds {path}: another server is listening on it")
        finally:
            probe.close()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(path)
        if mode is not None:
            os.chmod(path, int(mode, 8))
        s.listen(backlog)
    except OSError as e:
        s.close()
        raise BindError(f"cannot bind --uds {path}: {e.strerror or e}") from None
    return Listener(s, origin="uds", unlink_path=path, backlog=backlog)


def from_fd(fd, backlog, origin="fd"):
    try:
        s = socket.socket(fileno=fd)
    except OSError as e:
        raise BindError(f"--fd {fd}: not a socket ({e.strerror or e})") from None
    if s.type != socket.SOCK_STREAM:
        s.detach()
        raise BindError(f"--fd {fd}: not a stream socket")
    try:
        s.listen(backlog)  # harmless when already listening; required when only bound
    except OSError as e:
        s.detach()
        raise BindError(f"--fd {fd}: cannot listen ({e.strerror or e})") from None
    s.setblocking(True)
    return Listener(s, origin=origin, backlog=backlog)


def systemd_fds(environ):
    """The fds passed by systemd socket activation for this process (and unset the variables)."""
    pid = environ.get("LISTEN_PID")
    n = environ.get("LISTEN_FDS")
    if not pid or not n:
        return []
    try:
        if int(pid) != os.getpid():
            return []
        count = int(n)
    except ValueError:
        return []
    for k in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        environ.pop(k, None)
    return list(range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + count))


def open_listeners(cfg, environ=None):
    """Bind (or adopt) every listener of the configuration."""
    environ = os.environ if environ is None else environ
    fds = systemd_fds(environ)
    if fds:
        return [from_fd(fd, cfg.backlog, origin="systemd") for fd in fds]
    if cfg.fd is not None:
        return [from_fd(cfg.fd, cfg.backlog)]
    if cfg.uds is not None:
        return [bind_unix(cfg.uds, cfg.backlog, getattr(cfg, "uds_permissions", None))]
    return [bind_tcp(cfg.host, cfg.port, cfg.backlog, reuse_port=cfg.reuse_port, reserve_only=cfg.reuse_port and cfg.supervised)]


def open_listeners_or_exit(cfg):
    """open_listeners, or exit 1 after logging why one could not be bound."""
    from . import logs

    try:
        return open_listeners(cfg)
    except BindError as e:
        logs.log.error("%s", e)
        raise SystemExit(1) from None
