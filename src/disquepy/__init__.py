"""disquepy: a distributed in-memory job queue compatible with Disque."""

__version__ = "0.1.0"
