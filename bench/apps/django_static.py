"""A Django app after `collectstatic`, for the static suite: its static files (bench/static_files.py:
DJANGO_SOURCE, collected into DJANGO_ROOT by whitenoise's CompressedManifestStaticFilesStorage:
hashed names and .gz siblings) served by whitenoise's middleware inside the app. The same app under
m0serve with --static-path-mount DJANGO_ROOT has them served by the engine instead: the middleware
never sees /static/ there. One plain-text view at /."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import django  # noqa: E402
from django.conf import settings  # noqa: E402

from bench.static_files import DJANGO_ROOT, DJANGO_SOURCE  # noqa: E402

settings.configure(
    DEBUG=False,
    SECRET_KEY="bench-not-secret",
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    MIDDLEWARE=["whitenoise.middleware.WhiteNoiseMiddleware"],
    INSTALLED_APPS=["django.contrib.staticfiles"],
    USE_TZ=True,
    STATIC_URL="/static/",
    STATIC_ROOT=str(DJANGO_ROOT),
    STATICFILES_DIRS=[str(DJANGO_SOURCE)],
    STORAGES={
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    },
)
django.setup()

from django.http import HttpResponse  # noqa: E402
from django.urls import path  # noqa: E402


def hello(request):
    return HttpResponse(b"Hello, world!", content_type="text/plain")


urlpatterns = [path("", hello)]

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
