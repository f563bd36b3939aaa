"""Put this directory first on PYTHONPATH to run m0serve as if watchfiles were not installed
(tests/ops/test_reload.py: --reload's polling fallback)."""
raise ImportError("watchfiles is hidden by tests/apps/no_watchfiles")
