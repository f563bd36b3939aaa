"""Access-log test app, WSGI (`app`) and ASGI (`asgi`): answers b"hello" with
`X-Resp: <the path>` (so pipelined responses carry different values), and on
/tab a value with a tab in it. POST reads its body (Expect: 100-continue)."""


def resp_value(path):
    return "a\tb" if path == "/tab" else path


def app(environ, start_response):
    if environ["REQUEST_METHOD"] == "POST":
        environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "text/plain"), ("X-Resp", resp_value(environ["PATH_INFO"])),
                              ("Content-Length", "5")])
    return [b"hello"]


async def asgi(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["method"] == "POST":
        while (await receive()).get("more_body"):
            pass
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"x-resp", resp_value(scope["path"]).encode()),
                            (b"content-length", b"5")]})
    await send({"type": "http.response.body", "body": b"hello"})
