"""A worker's connection name (disquepy.client.workerinfo) says who it is and reads back."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from disquepy.client.workerinfo import WorkerInfo, parse_name

text = st.text(min_size=1, max_size=20)


@given(host=text, pid=st.integers(0, 2**22), queues=st.lists(text, min_size=1, max_size=4),
       concurrency=st.integers(1, 512), done=st.integers(0, 2**40),
       failed=st.integers(0, 2**40), started=st.integers(0, 2**33))
def test_a_name_has_no_spaces_and_reads_back(host, pid, queues, concurrency, done, failed,
                                             started):
    w = WorkerInfo(host, pid, tuple(queues), concurrency, done, failed, started)
    name = w.name()
    assert not any(c.isspace() for c in name), name
    assert parse_name(name) == w


def test_other_names_are_not_workers():
    assert parse_name("") is None
    assert parse_name("my-app") is None
    assert parse_name("dqw1|host=a|pid=x|queues=q|concurrency=1") is None  # pid not a number
    assert parse_name("dqw1|host=a") is None  # fields missing
    assert parse_name("dqw2|host=a|pid=1|queues=q|concurrency=1") is None  # unknown version
