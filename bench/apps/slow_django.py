"""The mixed suite's Django app (the fast route of the seed's pool measurement): django_hello.py's
app, whose / is Django's hello, with /slow?ms=N added, which sleeps N milliseconds first."""
import time

from django.http import HttpResponse
from django.urls import path

import django_hello
from django_hello import application  # noqa: F401  (the app the suite serves)


def slow(request):
    time.sleep(int(request.GET.get("ms", "200")) / 1000.0)
    return HttpResponse(b"Hello, world!", content_type="text/plain")


django_hello.urlpatterns.append(path("slow", slow))  # django_hello is the ROOT_URLCONF
