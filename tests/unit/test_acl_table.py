"""docs/SECURITY.md's table of the roles is the one the code makes (acl.role_table),
and every command it names exists; tests/integration/test_acl_queues.py runs it row by
row on a live node."""

from __future__ import annotations

from pathlib import Path

from disquepy.core import acl
from disquepy.core.commands import COMMANDS

ROOT = Path(__file__).resolve().parents[2]


def test_security_md_holds_the_generated_role_table():
    doc = (ROOT / "docs" / "SECURITY.md").read_text()
    assert acl.role_table() in doc, "regenerate the table: python -c 'from " \
        "disquepy.core.acl import role_table; print(role_table())'"


def test_every_command_a_role_names_exists():
    for names in acl.CATEGORIES.values():
        for name in names:
            base, _, sub = name.partition("|")
            assert base.encode() in COMMANDS, name
            assert not sub or sub in acl.SUBCOMMANDS[base], name
