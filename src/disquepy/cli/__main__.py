"""``python -m disquepy.cli``: the ``disque`` command line."""

from disquepy.cli import main

main()
