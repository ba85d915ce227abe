"""Job IDs from JobIdGenerator (core/ids.py): Disque's form, unique, the same sequence
for the same seed (the simulator replays it), and random parts uniform across the
64-ID blocks one hash call makes."""

from __future__ import annotations

import base64
from collections import Counter

from disquepy.core.ids import (
    JobIdGenerator,
    id_is_at_most_once,
    id_ttl_minutes,
    is_valid_job_id,
)

NODE = "dcb833cf" + "0" * 32


def test_ids_have_disques_form_and_carry_the_ttl() -> None:
    gen = JobIdGenerator(NODE, b"seed")
    for ttl, retry, minutes in ((3600, 1, 61), (3600, 0, 60), (60, 5, 1), (59, 0, 0)):
        jid = gen.next_id(ttl, retry)
        assert is_valid_job_id(jid), jid
        assert jid[:11] == b"D-dcb833cf-"
        assert len(base64.b64decode(jid[11:35], validate=True)) == 18
        assert id_ttl_minutes(jid) == minutes
        assert id_is_at_most_once(jid) == (retry == 0)


def test_ids_are_unique_across_blocks_and_repeat_for_a_seed() -> None:
    a = [JobIdGenerator(NODE, b"seed").next_id(60, 1)]
    gen = JobIdGenerator(NODE, b"seed")
    ids = [gen.next_id(60, 1) for _ in range(10_000)]  # 157 blocks of 64
    assert len(set(ids)) == len(ids)
    assert ids[0] == a[0]  # the same seed, the same first ID
    again = JobIdGenerator(NODE, b"seed")
    assert [again.next_id(60, 1) for _ in range(200)] == ids[:200]
    other = JobIdGenerator(NODE, b"other seed")
    assert not {other.next_id(60, 1) for _ in range(200)} & set(ids)


def test_random_parts_are_uniform_across_blocks() -> None:
    """Two characters of the random part take 64 x 64 = 4096 values: 10,240 IDs fill
    them as uniform draws would (Poisson, 2.5 each: ~3,760 used, none above ~12); a
    bias repeating every block of 64 IDs would pile them up. Every position of the
    random part uses the whole base64 alphabet."""
    gen = JobIdGenerator(NODE, b"spread")
    ids = [gen.next_id(60, 1) for _ in range(10_240)]
    pairs = Counter(jid[11:13] for jid in ids)
    assert len(pairs) > 3_500
    assert max(pairs.values()) <= 14
    for i in range(11, 35):
        assert len({jid[i] for jid in ids}) == 64
