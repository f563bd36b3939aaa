"""The mixed suite's Django app (the fast route of the seed's pool measurement): / is Django's hello
(as django_hello.py: DEBUG off, no middleware), /slow?ms=N sleeps N milliseconds first."""
import time

import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    SECRET_KEY="bench-not-secret",
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    MIDDLEWARE=[],
    INSTALLED_APPS=[],
    USE_TZ=True,
)
django.setup()

from django.http import HttpResponse  # noqa: E402
from django.urls import path  # noqa: E402


def hello(request):
    return HttpResponse(b"Hello, world!", content_type="text/plain")


def slow(request):
    time.sleep(int(request.GET.get("ms", "200")) / 1000.0)
    return HttpResponse(b"Hello, world!", content_type="text/plain")


urlpatterns = [path("", hello), path("slow", slow)]

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
