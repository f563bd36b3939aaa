"""bjoern has no command line: `python run_bjoern.py MODULE:APP HOST PORT`."""
import importlib
import sys

import bjoern

module, _, attr = sys.argv[1].partition(":")
app = getattr(importlib.import_module(module), attr or "app")
host, port = sys.argv[2], int(sys.argv[3])
print(f"Listening on http://{host}:{port}", flush=True)
bjoern.run(app, host, port)
