from django.urls import path

from . import views

urlpatterns = [
    path("", views.index),
    path("json", views.as_json),
    path("form", views.form),
    path("json-echo", views.json_echo),
    path("upload", views.upload),
    path("stream", views.stream),
    path("download", views.download),
    path("slow", views.slow),
]
