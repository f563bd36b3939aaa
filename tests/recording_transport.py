"""An httpx transport that keeps the bytes its connections read off the socket, so that a test can
check what httpx was given (an informational response, a trailer section) as well as what it made
of it, and count the connections it opened."""
import httpcore
import httpx


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner, log):
        self.inner, self.log = inner, log

    def read(self, max_bytes, timeout=None):
        data = self.inner.read(max_bytes, timeout)
        self.log.append(data)
        return data

    def write(self, buffer, timeout=None):
        self.inner.write(buffer, timeout)

    def close(self):
        self.inner.close()

    def start_tls(self, *args, **kwargs):
        raise NotImplementedError

    def get_extra_info(self, info):
        return self.inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self):
        self.inner = httpcore.SyncBackend()
        self.connections = []  # the bytes read on each connection, in chunks

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        log = []
        self.connections.append(log)
        return _Stream(self.inner.connect_tcp(host, port, timeout, local_address, socket_options), log)

    def connect_unix_socket(self, *args, **kwargs):
        raise NotImplementedError

    def sleep(self, seconds):
        self.inner.sleep(seconds)


def recording_client(**kwargs):
    """(httpx.Client, backend): backend.connections[i] is what connection i read, as a list of chunks."""
    backend = _Backend()
    transport = httpx.HTTPTransport()
    # httpx builds its pool without a way to pass a network backend; this one is the same pool with ours
    transport._pool = httpcore.ConnectionPool(network_backend=backend)
    return httpx.Client(transport=transport, **kwargs), backend


def read_bytes(backend):
    return [b"".join(chunks) for chunks in backend.connections]
