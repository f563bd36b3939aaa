"""m0serve: a WSGI and ASGI 3 application server with an HTTP/1.1 engine in C."""

__version__ = "0.1.0"
