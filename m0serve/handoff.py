"""The accept hand-off (src/net/acceptor.h), for the I/O backends that cannot wake one loop of
many for a connection on a shared listening socket: EPOLLEXCLUSIVE is epoll's; on poll and
kqueue every loop watching the socket wakes for each connection (a thundering herd: one of
them accepts it, the others find nothing). There, one thread (`_core.Acceptor`) accepts for
every loop and passes each connection, as an fd over a Unix socket pair, to one of them: the
supervisor runs it for its workers (one pair per loop of each ready worker), a single worker
with --threads runs it in-process. docs/ARCHITECTURE.md says why this and not one
SO_REUSEPORT socket per loop.
"""
from __future__ import annotations

import os
import socket
import warnings


def wanted(cfg):
    """Whether this server hands connections off: its backend is not epoll, and the workers
    share the listeners (with --reuse-port each worker has its own socket)."""
    from . import _core

    backend = os.environ.get("M0_IO_BACKEND") or _core.io_backends.split(",")[0]
    return backend != "epoll" and not cfg.reuse_port


def start(listeners):
    """The acceptor over these listeners (Listener objects or sockets)."""
    from . import _core

    return _core.Acceptor([s.fileno() for s in listeners])


# Python 3.12+ warns at a fork of a process that runs more than one thread (the child gets only the
# forking one, and any lock another held stays locked in it).
_FORK_WARNING = r"This process \(pid=\d+\) is multi-threaded, use of fork\(\) may lead to deadlocks"


def _threads():
    """How many threads this process runs (None: cannot tell here)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def fork(acceptor):
    """os.fork() with the acceptor held (acceptor.hold(): its thread is then outside the section
    in which it holds an accepted client's fd, and outside every lock it takes, its one allocation
    included; it may only be waiting for the acceptor's own lock, which the child never touches:
    m0_acceptor_forget). When that thread is the only other one the process runs, Python's warning
    about forking with threads is about nothing, and it is not shown; with any other thread (one an
    app's hook started, say) it is. The caller releases the acceptor after the fork, in the parent."""
    acceptor.hold()
    quiet = _threads() == 2
    try:
        with warnings.catch_warnings():
            if quiet:
                warnings.filterwarnings("ignore", message=_FORK_WARNING, category=DeprecationWarning)
            return os.fork()
    except BaseException:
        acceptor.release()
        raise


class Route:
    """The socket pairs of one worker's loops: `inlets` for the worker (its Servers' listeners),
    `outlets` for the acceptor, added once the worker serves and removed before it is asked to
    stop (its loops then serve what they were sent, read end-of-file, and may finish)."""

    def __init__(self, loops):
        pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(loops)]
        self.outlets = [p[0] for p in pairs]
        self.inlets = [p[1] for p in pairs]
        self.added = []  # outlet fds the acceptor owns
        self.spares = []  # the supervisor's copies of the worker's inlets (in_parent(keep=True))
        self.closed = False  # close() ran: never opened again

    def in_child(self):
        """In the worker: its ends only."""
        for s in self.outlets:
            s.close()
        self.outlets = []

    def in_parent(self, keep=False):
        """In the supervisor, once forked: the worker's ends are its own. keep: the supervisor keeps a
        copy of each (`spares`), to hand off again what the worker leaves unread if it dies."""
        if keep:
            self.spares = self.inlets
        else:
            for s in self.inlets:
                s.close()
        self.inlets = []

    def reclaim(self, acceptor):
        """The worker is gone: what its loops left unread in their inlets goes to other loops
        (a worker killed inside a slow view had been sent a connection or two it never read)."""
        n = 0
        for s in self.spares:
            s.setblocking(False)
            if acceptor is not None:
                n += acceptor.reclaim(s.fileno())
            s.close()
        self.spares = []
        return n

    def open(self, acceptor):
        """Hand the worker connections. With spares, the acceptor gets a copy of each inlet too: how
        much a loop left unread (FIONREAD) is how it passes over a loop inside a slow view."""
        for i, s in enumerate(self.outlets):
            fd = s.detach()
            self.added.append(fd)
            acceptor.add(fd, os.dup(self.spares[i].fileno()) if i < len(self.spares) else None)
        self.outlets = []

    def close(self, acceptor):
        self.closed = True
        for fd in self.added:
            if acceptor is not None:
                acceptor.remove(fd)
        self.added = []
        for s in self.outlets + self.inlets:
            s.close()
        self.outlets = []
        self.inlets = []

    def close_spares(self):
        for s in self.spares:
            s.close()
        self.spares = []
