"""Minimal Django settings for the ASGI tests (no database)."""
SECRET_KEY = "m0serve-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "django_asgi.urls"
INSTALLED_APPS = []
MIDDLEWARE = []
DATABASES = {}
USE_TZ = True
