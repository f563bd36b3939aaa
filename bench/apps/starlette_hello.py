"""Starlette hello: one plain-text route at /."""
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route


async def hello(request):
    return PlainTextResponse("Hello, world!")


app = Starlette(routes=[Route("/", hello)])
