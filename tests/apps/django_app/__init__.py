"""A minimal real Django project for the WSGI bridge tests (no database)."""
