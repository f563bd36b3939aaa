"""Django hello in one module: DEBUG off, no middleware, one plain-text view at /."""
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


urlpatterns = [path("", hello)]

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
