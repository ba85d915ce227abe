"""A module that fails while being imported (``disque-worker broken_module:handle``)."""

raise RuntimeError("broken on purpose at import")
