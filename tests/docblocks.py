"""The fenced blocks of the README and docs/, and the port rewrite that lets a block run
against nodes the tests started (tests/docs/test_doc_blocks.py runs them; a test that
runs one block against processes of its own finds it by its marker)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from support import ROOT

README = ROOT / "README.md"
DOCS = [README, *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "API.md")]
RUNNABLE = ("sh", "python", "conf")
MARK = re.compile(r"^<!--\s*doc-test:\s*(.*?)\s*-->$")
PORT = re.compile(r"(?<!\d)(1?771[1-3])(?!\d)")
# a plain block starting with one of these is a command: it must say ```sh
COMMAND_WORDS = ("make ", "python ", "python3 ", ".venv/", "disque", "redis-cli ", "curl ",
                 "openssl ", "pip ", "export ", "cd ")
EXPECT = {"sh": re.compile(r"#\s*(\(integer\) -?\d+|\(nil\))"),
          "python": re.compile(r"^\s*print\(.*#\s*(True|False|None)\b")}
PROMPT = re.compile(r"^[\w.]+:(\d+)> (.*)$")
JOB_ID = re.compile(r"D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}")


@dataclass
class Block:
    path: Path
    lineno: int
    lang: str
    code: str
    mark: str = ""

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.lineno}-{self.lang}"

    def expected(self) -> list[str]:
        """The replies its comments show, in order."""
        return [m.group(1) for line in self.code.splitlines()
                if (m := EXPECT[self.lang].search(line))]

    def commands(self) -> list[str]:
        """Its shell command lines (sh: every line; transcript: the ``$`` lines)."""
        if self.lang == "transcript":
            return [ln[2:] for ln in self.code.splitlines() if ln.startswith("$ ")]
        return self.code.splitlines() if self.lang == "sh" else []


def doc_blocks(path: Path) -> list[Block]:
    blocks: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        prev = next((ln.strip() for ln in reversed(lines[:start]) if ln.strip()), "")
        mark = MARK.match(prev)
        first = next((ln for ln in body if ln.strip()), "")
        if not lang and (first.startswith("$ ") or PROMPT.match(first)):
            lang = "transcript"
        where = f"{path.relative_to(ROOT)}:{start + 1}"
        if lang in (*RUNNABLE, "transcript"):
            blocks.append(Block(path, start + 1, lang, "\n".join(body) + "\n",
                                mark.group(1) if mark else ""))
        else:
            assert not mark, f"{where}: a doc-test marker on a ``` block that is not " \
                             f"{RUNNABLE}"
            assert lang or not first.startswith(COMMAND_WORDS), \
                f"{where}: a plain ``` block starting with a command: say ```sh (it is run)"
    return blocks


def marked_block(path: Path, words: str) -> Block:
    """The one block of ``path`` whose doc-test marker contains ``words``."""
    found = [b for b in doc_blocks(path) if words in b.mark]
    assert len(found) == 1, f"{path.name}: {len(found)} blocks marked {words!r}"
    return found[0]


def rewrite_ports(code: str, base: int) -> str:
    def sub(m: re.Match) -> str:
        p = int(m.group(1))
        return str(base + p - 7711 if p < 10000 else base + 10000 + p - 17711)
    return code if base == 7711 else PORT.sub(sub, code)
