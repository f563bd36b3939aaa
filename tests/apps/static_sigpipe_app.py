"""WSGI app beside a static mount whose views change the worker's SIGPIPE
disposition while it serves: /sigpipe/default restores the default (a peer
that goes away during a sendfile would then kill the worker unless the
engine guards the send), /sigpipe/ignore ignores it again."""
import signal


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/sigpipe/default":
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    elif path == "/sigpipe/ignore":
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    body = ("SIGPIPE %s" % signal.getsignal(signal.SIGPIPE)).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
