import hashlib
import json
import os

from django.http import FileResponse, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt


def index(request):
    return HttpResponse("hello from django", content_type="text/plain")


def as_json(request):
    return JsonResponse(
        {
            "path": request.path,
            "q": request.GET.get("q"),
            "script_name": request.META.get("SCRIPT_NAME"),
            "ua": request.headers.get("User-Agent"),
            "cookie": request.COOKIES.get("c"),
        }
    )


@csrf_exempt
def form(request):
    if request.method != "POST":
        return HttpResponse(status=405)
    return JsonResponse({k: request.POST.getlist(k) for k in request.POST})


@csrf_exempt
def json_echo(request):
    data = json.loads(request.body)
    return JsonResponse({"echo": data, "len": len(request.body)})


@csrf_exempt
def upload(request):
    f = request.FILES["file"]
    h = hashlib.sha256()
    for chunk in f.chunks():
        h.update(chunk)
    return JsonResponse({"name": f.name, "size": f.size, "sha256": h.hexdigest(), "field": request.POST.get("field")})


def stream(request):
    return StreamingHttpResponse((f"part{i}\n".encode() for i in range(5)), content_type="text/plain")


def download(request):
    return FileResponse(open(os.environ.get("WSGI_TEST_FILE", __file__), "rb"), content_type="application/octet-stream")


def slow(request):
    import time

    time.sleep(int(request.GET.get("ms", "200")) / 1000)
    return HttpResponse("slow from django", content_type="text/plain")
