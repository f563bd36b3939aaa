import asyncio
import json

from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import path


def hello(request):
    return HttpResponse(b"hello from django", content_type="text/plain")


async def async_view(request):
    await asyncio.sleep(0.01)
    return JsonResponse({"async": True, "path": request.path, "q": request.GET.get("q")})


def echo(request):
    return JsonResponse({"method": request.method, "body": request.body.decode(), "ct": request.content_type})


async def stream(request):
    async def gen():
        for i in range(3):
            yield f"chunk {i}\n"

    return StreamingHttpResponse(gen(), content_type="text/plain")


urlpatterns = [
    path("", hello),
    path("async/", async_view),
    path("echo/", echo),
    path("stream/", stream),
]
