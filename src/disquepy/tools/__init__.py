"""Command-line tools that work on disquepy's files (``disque-check-aof``)."""
