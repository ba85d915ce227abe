"""Batches on the wire: many commands in one write, their replies read in order.

This is the client's hot path (the worker's fetch/ack loop, :meth:`Disque.add_jobs`,
every :class:`~disquepy.client.Pipeline`): the commands are encoded by the project's own
RESP encoder (:func:`disquepy.codec.resp.bulk_array`: a request is an array of bulk
strings) into one buffer, written with one ``sendall`` on a connection borrowed from the
client's redis-py pool (which did the connecting, ``AUTH`` and TLS), and the replies are
read by that connection's hiredis reader. No redis-py command object, packer or response
callback per command: a pipelined batch costs about half a microsecond of client CPU per
command (bench/client.py, "per stage").

Error replies come back as :class:`~disquepy.client.ResponseError` instances in their
place (not raised), so one refused command does not hide the others' replies; a
connection error (or a timeout) is raised, the connection closed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from redis.exceptions import ResponseError as _RedisResponseError

from ..codec.resp import bulk_array
from .errors import convert_error

#: commands per write of a large batch (:meth:`Disque.add_jobs`): each chunk is one round
#: trip, so a node's output for one client stays small whatever the batch's size
CHUNK = 1000


def encode(args: Sequence[Any]) -> bytes:
    """One request as RESP: ``["ADDJOB", "q", b"body", 0]`` -> ``*4\\r\\n$6\\r\\nADDJOB...``
    (``int`` and ``float`` arguments as their decimal text)."""
    return bulk_array([a if type(a) is bytes or type(a) is str else _text(a) for a in args])


def _text(a: Any) -> bytes | str:
    if isinstance(a, bytes | str):
        return a
    if isinstance(a, bytearray | memoryview):
        return bytes(a)
    if isinstance(a, int | float):
        return repr(a)
    raise TypeError(f"a command argument must be bytes, str, int or float, "
                    f"not {type(a).__name__}")


def encode_many(commands: Iterable[Sequence[Any]]) -> bytes:
    """Several requests, one buffer (what one write sends)."""
    return b"".join(map(encode, commands))



def round_trip(pool: Any, payload: bytes, n: int) -> list[Any]:
    """Write ``payload`` (``n`` encoded requests) on a connection of redis-py ``pool``
    and read the ``n`` replies, errors as instances. A connection error or timeout
    closes the connection and is raised (redis-py's ``ConnectionError``/``TimeoutError``)."""
    conn = pool.get_connection()
    try:
        conn.send_packed_command([payload], check_health=False)
        out: list[Any] = []
        read = conn.read_response
        for _ in range(n):
            try:
                out.append(read())
            except _RedisResponseError as e:
                out.append(convert_error(e))
        return out
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


async def async_round_trip(pool: Any, payload: bytes, n: int) -> list[Any]:
    """:func:`round_trip` on a ``redis.asyncio`` pool."""
    conn = await pool.get_connection()
    try:
        await conn.send_packed_command([payload], check_health=False)
        out: list[Any] = []
        read = conn.read_response
        for _ in range(n):
            try:
                out.append(await read())
            except _RedisResponseError as e:
                out.append(convert_error(e))
        return out
    except BaseException:
        await conn.disconnect()
        raise
    finally:
        await pool.release(conn)


__all__ = ["CHUNK", "encode", "encode_many", "round_trip", "async_round_trip"]
