"""Print what `make fuzz` ran: the cases per target, from the JSON files the fuzz tests
write (DISQUEPY_FUZZ_REPORT)."""

from __future__ import annotations

import json
import sys


def main(paths: list[str]) -> int:
    total = 0
    for path in paths:
        with open(path) as f:
            counts = json.load(f)
        for target, n in sorted(counts.items()):
            print(f"fuzz {target:<24} {n:>8} cases")
            total += n
    print(f"fuzz {'total':<24} {total:>8} cases, no failure")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
