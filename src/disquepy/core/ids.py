"""Job and node identifiers.

A job ID is exactly 40 bytes::

    D- | dcb833cf | 8YL1NT17e9+wsA/09NqxscQI | 05a1

``D-``, the first 8 hex digits of the creating node's ID, ``-``, 24 characters of
standard base64 of 144 bits of SHAKE-128(seed || block counter) (one call makes the
random parts of 64 IDs: a hash call per ID was a quarter of ADDJOB's CPU), ``-``, and
the TTL in minutes as 4 hex digits: even for at-most-once jobs (RETRY 0), odd
otherwise, so a node that holds no copy can still tell the job's delivery guarantee
and expiry.

IDs are kept as ``bytes`` end to end: they arrive as bytes from the protocol parser,
key the job registry and go out in replies without being decoded.
"""

from __future__ import annotations

import binascii
import hashlib
from collections.abc import Sequence
from typing import Final, Protocol, TypeGuard, TypeVar

from librt.strings import BytesWriter, write_i64_be
from mypy_extensions import i64

from ..codec import resp

JOB_ID_LEN: Final = 40
_PREFIX: Final = b"D-"
_shake = hashlib.shake_128
_b64 = binascii.b2a_base64
_RAND_BYTES: Final = 18  # random bytes per ID: 24 base64 characters, no padding
_RAND_CHARS: Final = 24
_BLOCK: Final = 64  # IDs per hash call
_MAX_TTL_MINUTES: Final = 0xFFFF

T = TypeVar("T")


class Rng(Protocol):
    """The randomness a node is given (``random.Random`` in the server, a seeded one in
    the simulator): the core draws from nothing else."""

    def getrandbits(self, k: int, /) -> int: ...
    def random(self) -> float: ...
    def choice(self, seq: Sequence[T], /) -> T: ...
    def sample(self, population: Sequence[T], k: int, /) -> list[T]: ...


def new_node_id(rng: Rng) -> str:
    """A fresh 40-hex-character node ID drawn from the injected RNG."""
    return f"{rng.getrandbits(160):040x}"


class JobIdGenerator:
    """Generates job IDs for one node. Pure: the seed comes from the caller's RNG, and
    the same seed gives the same IDs (the simulator replays them)."""

    __slots__ = ("_head", "_seed", "_counter", "_ttl_cache", "_pool", "_pos")

    def __init__(self, node_id: str, seed: bytes) -> None:
        self._head = _PREFIX + node_id[:8].encode() + b"-"
        self._seed = seed
        self._counter = 0  # hash blocks drawn
        self._ttl_cache: dict[int, bytes] = {}  # +-TTL (s) -> the ID's tail
        self._pool = b""  # the random parts of the block's IDs, as base64
        self._pos = 0  # the next ID's in it

    def _refill(self) -> None:
        self._counter += 1
        raw = _shake(self._seed + self._counter.to_bytes(8, "little")).digest(
            _RAND_BYTES * _BLOCK)
        self._pool = _b64(raw, newline=False)  # 18 bytes -> 24 characters, aligned
        self._pos = 0

    def next_id(self, ttl_seconds: int, retry: int) -> bytes:
        pos = self._pos
        if pos >= len(self._pool):
            self._refill()
            pos = 0
        self._pos = pos + _RAND_CHARS
        cache = self._ttl_cache
        key = ttl_seconds if retry else -ttl_seconds  # TTLs are > 0
        tail = cache.get(key)
        if tail is None:
            if len(cache) > 1024:
                cache.clear()
            tail = cache[key] = b"-" + ttl_field(ttl_seconds, retry)
        return b"".join((self._head, self._pool[pos:pos + _RAND_CHARS], tail))


def ttl_field(ttl_seconds: int, retry: int) -> bytes:
    """The 4-hex TTL-in-minutes suffix: even for RETRY 0 jobs, odd otherwise."""
    minutes = min(ttl_seconds // 60, _MAX_TTL_MINUTES)
    if retry == 0:
        minutes &= ~1
    else:
        minutes |= 1
        if minutes > _MAX_TTL_MINUTES:
            minutes = _MAX_TTL_MINUTES
    return b"%04x" % minutes


def is_valid_job_id(jid: bytes) -> bool:
    """Disque's syntactic rule: 40 bytes, ``D-`` prefix, ``-`` at offsets 10 and 35."""
    return len(jid) == JOB_ID_LEN and jid[:2] == _PREFIX and jid[10] == 0x2D and jid[35] == 0x2D


def id_ttl_minutes(jid: bytes) -> int:
    """The TTL-in-minutes field, or 0 where a client wrote no hex there."""
    try:
        return int(jid[36:40], 16)
    except ValueError:
        return 0


def id_is_at_most_once(jid: bytes) -> bool:
    """True when the ID's TTL field is even, i.e. the job was created with RETRY 0."""
    return id_ttl_minutes(jid) % 2 == 0


_HEX: Final = frozenset("0123456789abcdef")


# Node IDs found valid so far; and lists of them, each kept as one tuple of shared str
# objects (a cluster has a handful of nodes, so of lists too). Jobs keep the node IDs of
# their copies: the strings a message decodes to are new objects (89 bytes each), so a
# replica would otherwise hold three of them and a tuple for every job.
_VALID_IDS: Final[dict[str, str]] = {}  # each valid ID seen, mapped to its shared object
_NODE_LISTS: Final[dict[tuple[object, ...], tuple[str, ...]]] = {}  # looked up by wire tuples
_CACHE_MAX: Final = 4096


def valid_node_id(nid: object) -> TypeGuard[str]:
    """40 lowercase hex characters. Every bus message carries a few node IDs, so the
    answer for IDs seen before comes from a small cache (it only saves time)."""
    if type(nid) is not str:
        return False
    if nid in _VALID_IDS:
        return True
    if len(nid) != 40 or set(nid) - _HEX:
        return False
    if len(_VALID_IDS) < _CACHE_MAX:
        _VALID_IDS[nid] = nid
    return True


def node_ids_from_wire(ids: list[object]) -> tuple[str, ...] | None:
    """The node IDs of a message as a shared tuple of shared str objects, or None if
    any is not a valid_node_id(). A list seen before costs one lookup (msgpack yields
    exact ``str``, ``bytes`` or containers: a non-str item never equals a cached list,
    and an unhashable one raises TypeError)."""
    try:
        t = tuple(ids)
        known = _NODE_LISTS.get(t)
    except TypeError:
        return None
    if known is not None:
        return known
    get = _VALID_IDS.get
    shared: list[str] = []
    for nid in t:
        if not valid_node_id(nid):
            return None
        shared.append(get(nid, nid))
    nodes = tuple(shared)
    if len(_NODE_LISTS) < _CACHE_MAX:
        _NODE_LISTS[nodes] = nodes
    return nodes


# Event IDs (consumer groups, core/groups.py): 25 bytes, ``<16 hex: creation time in
# ns>-<8 hex: the creating node>``. Unique across the cluster (a node's creation times
# are strictly rising; the node part tells nodes apart) and ordered by time as a string.
EVENT_ID_LEN: Final = 25
_EVENT_ID_HEAD: Final = b"$%d\r\n" % EVENT_ID_LEN  # (a bulk reply of one)


def event_id_suffix(node_id: str) -> bytes:
    """The part of an event ID that names its creating node: ``-`` and 8 hex digits
    (kept by the node: :func:`event_id` is QADD's hot path)."""
    return b"-" + node_id[:8].encode()


def _hex8(x: i64) -> i64:
    """The 8 hex digits of ``x``'s low 32 bits as 8 ASCII bytes in one integer, the
    first digit in the top byte: each nibble spread to a byte of its own, then '0'
    added to every byte and 'a' - '0' - 10 more to those of 10 and over (compiled:
    a few integer operations in place of eight lookups of two-digit strings; QADD's
    and QGET's share of it: bench/inproc.py --only groups)."""
    x &= 0xFFFFFFFF
    x = ((x & 0xFFFF0000) << 16) | (x & 0xFFFF)
    x = ((x & 0x0000FF000000FF00) << 8) | (x & 0x000000FF000000FF)
    x = ((x & 0x00F000F000F000F0) << 4) | (x & 0x000F000F000F000F)
    letters = ((x + 0x0606060606060606) >> 4) & 0x0101010101010101
    return x + 0x3030303030303030 + letters * 0x27


def event_id(ctime_ns: int, suffix: bytes) -> bytes:
    """``<ctime_ns, 16 hex>-<node, 8 hex>`` (docs/GROUPS.md), ``suffix`` from
    :func:`event_id_suffix`; the time's low 64 bits. (A QGET builds one per event it
    leases: see _hex8.)"""
    if ctime_ns >> 63:  # (negative or 2**63 and over, not a time: a peer gone wrong)
        return (ctime_ns & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big").hex().encode() + suffix
    t: i64 = ctime_ns
    w = BytesWriter()
    write_i64_be(w, _hex8(t >> 32))
    write_i64_be(w, _hex8(t))
    w.write(suffix)
    return w.getvalue()


def event_id_reply(ctime_ns: int, suffix: bytes) -> bytes:
    """``event_id(ctime_ns, suffix)`` as a bulk reply (QADD's), written in one buffer."""
    if ctime_ns >> 63 or len(suffix) != EVENT_ID_LEN - 16:
        return resp.bulk(event_id(ctime_ns, suffix))
    t: i64 = ctime_ns
    w = BytesWriter()
    w.write(_EVENT_ID_HEAD)
    write_i64_be(w, _hex8(t >> 32))
    write_i64_be(w, _hex8(t))
    w.write(suffix)
    w.write(b"\r\n")
    return w.getvalue()


def is_valid_event_id(eid: object) -> bool:
    # (the hex digits deleted, the "-" at 16 is all that is left: one C call, a tenth
    # of a set's cost, which counted with 100 IDs in a QACK)
    return (type(eid) is bytes and len(eid) == EVENT_ID_LEN and eid[16] == 0x2D
            and eid.translate(None, _HEX_DIGITS) == b"-")


_HEX_DIGITS: Final = b"0123456789abcdef"


def all_valid_event_ids(ids: list[bytes]) -> bool:
    """Whether every one of ``ids`` is a valid event ID (is_valid_event_id), checked
    together: their lengths, then one join whose every 25th byte from the 17th is the
    "-" and whose other bytes are hex: a few C calls for a QACK's 100 IDs."""
    n = len(ids)
    if n < 2:
        return all(is_valid_event_id(i) for i in ids)
    if any(type(i) is not bytes or len(i) != EVENT_ID_LEN for i in ids):
        return False
    joined = b"".join(ids)
    dashes = b"-" * n
    return (joined[16::EVENT_ID_LEN] == dashes
            and joined.translate(None, _HEX_DIGITS) == dashes)
