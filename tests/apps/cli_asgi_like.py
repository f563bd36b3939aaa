"""Callables of each shape, for interface auto-detection."""


async def asgi_function(scope, receive, send):
    pass


class AsgiObject:
    async def __call__(self, scope, receive, send):
        pass


asgi_object = AsgiObject()


def wsgi_function(environ, start_response):
    return []


class WsgiObject:
    def __call__(self, environ, start_response):
        return []


wsgi_object = WsgiObject()
