"""A Starlette app for the ASGI bridge tests: JSON, path params, form/body, streaming,
a file through FileResponse (pathsend when the server offers it), lifespan state."""
import contextlib
import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route


@contextlib.asynccontextmanager
async def lifespan(app):
    yield {"greeting": "hello from lifespan"}


async def home(request: Request):
    return JSONResponse({"framework": "starlette", "greeting": request.state.greeting})


async def item(request: Request):
    return JSONResponse({"id": request.path_params["item_id"], "q": request.query_params.get("q")})


async def echo(request: Request):
    body = await request.body()
    return PlainTextResponse(body, headers={"x-length": str(len(body))})


async def stream(request: Request):
    async def gen():
        for i in range(5):
            yield f"line {i}\n"

    return StreamingResponse(gen(), media_type="text/plain")


async def file(request: Request):
    return FileResponse(os.path.abspath(__file__))


app = Starlette(
    routes=[
        Route("/", home),
        Route("/items/{item_id:int}", item),
        Route("/echo", echo, methods=["POST"]),
        Route("/stream", stream),
        Route("/file", file),
    ],
    lifespan=lifespan,
)
