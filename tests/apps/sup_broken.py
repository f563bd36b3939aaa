"""A worker app that fails to import: the supervisor must stop with this traceback, not respawn."""

raise ImportError("sup_broken: a dependency is missing")
