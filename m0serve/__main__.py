"""`python -m m0serve` runs the command line."""
from .cli import main

raise SystemExit(main())
