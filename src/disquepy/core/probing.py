"""Linear-probing hash tables of 64-bit entries in a ``librt.vecs`` ``vec[i64]`` (which
mypyc compiles to plain C loads and stores), as the job registry (jobtable.py) and the
outcome index (outcomes.py) keep them: 0 is an empty slot, a table's size is a power
of two, and an entry's home slot is ``(entry >> shift) & mask``, its hash bits sitting
above a payload of ``shift`` bits. Each caller probes inline (its own key and payload
checks, on its hot path); the shared part is here.
"""

from __future__ import annotations

from librt.vecs import vec
from mypy_extensions import i64


def zeros(n: i64) -> vec[i64]:
    """A table (or any vec) of ``n`` zeros."""
    return vec[i64](memoryview(bytes(8 * n)).cast("q"))


def delete(tab: vec[i64], i: i64, shift: i64) -> None:
    """Empty slot ``i``, shifting back the entries after it that may live closer to
    their home (no tombstones: every entry stays in the unbroken run from its home)."""
    mask: i64 = len(tab) - 1
    j: i64 = i
    while True:
        j = (j + 1) & mask
        e = tab[j]
        if e == 0:
            break
        k: i64 = (e >> shift) & mask
        if (k <= i < j) or (i < j < k) or (j < k <= i):
            tab[i] = e
            i = j
    tab[i] = 0


def rehash(old: vec[i64], size: i64, shift: i64) -> vec[i64]:
    """The entries of ``old`` in a new table of ``size`` slots."""
    tab = zeros(size)
    mask: i64 = size - 1
    for e in old:
        if e:
            i: i64 = (e >> shift) & mask
            while tab[i]:
                i = (i + 1) & mask
            tab[i] = e
    return tab
