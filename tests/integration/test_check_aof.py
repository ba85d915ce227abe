"""disque-check-aof run as a real process on AOF files built with the codec."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from disquepy.core.aofrecords import encode_deljob, encode_loadjob, scan

ROOT = Path(__file__).resolve().parents[2]
NODE = "0123456789abcdef0123456789abcdef01234567"


def jid(i: int) -> bytes:
    return b"D-%08x-%024d-%04x" % (i, i, 0x3D)


def fields(i: int) -> list:
    return [
        jid(i),
        b"q",
        b"body %d" % i,
        1_700_000_000_000_000_000 + i,
        3600,
        0,
        60,
        1,
        0,
        0,
        [NODE],
        1,
        0,
        0,
    ]


def good_aof(n: int = 5) -> tuple[bytes, list[int]]:
    """n LOADJOBs and a DELJOB after every other one; returns (data, record offsets)."""
    parts, offsets, pos = [], [], 0
    for i in range(n):
        recs = [encode_loadjob(fields(i))] + ([encode_deljob(jid(i))] if i % 2 else [])
        for r in recs:
            offsets.append(pos)
            parts.append(r)
            pos += len(r)
    return b"".join(parts), offsets


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run(
        [sys.executable, "-m", "disquepy.tools.check_aof", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=ROOT,
    )


def test_valid_file(tmp_path):
    data, offsets = good_aof()
    f = tmp_path / "appendonly.aof"
    f.write_bytes(data)
    p = run(str(f))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "AOF is valid" in p.stdout
    assert f"size={len(data)}" in p.stdout
    assert "records=7 (LOADJOB=5, DELJOB=2, OUTCOME=0)" in p.stdout
    # --fix on a valid file changes nothing.
    p = run("--fix", str(f))
    assert p.returncode == 0 and "AOF is valid" in p.stdout
    assert f.read_bytes() == data
    assert not (tmp_path / "appendonly.aof.bak").exists()


def test_empty_file_is_valid(tmp_path):
    f = tmp_path / "appendonly.aof"
    f.write_bytes(b"")
    p = run(str(f))
    assert p.returncode == 0 and "AOF is valid" in p.stdout


def test_torn_tail_then_fix(tmp_path):
    data, _ = good_aof()
    torn = data + encode_loadjob(fields(99))[:-7]
    f = tmp_path / "appendonly.aof"
    f.write_bytes(torn)

    p = run(str(f))
    assert p.returncode == 1, p.stdout + p.stderr
    diff = len(torn) - len(data)
    assert f"AOF analyzed: size={len(torn)}, ok_up_to={len(data)}, diff={diff}" in p.stdout
    assert f"AOF has an incomplete record at the end (offset {len(data)})" in p.stdout
    assert "--fix truncates it" in p.stdout
    assert f.read_bytes() == torn  # not changed without --fix

    p = run("--fix", str(f))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Successfully truncated AOF" in p.stdout
    assert f.read_bytes() == data
    assert (tmp_path / "appendonly.aof.bak").read_bytes() == torn
    assert scan(f.read_bytes()).status == "ok"

    p = run(str(f))
    assert p.returncode == 0 and "AOF is valid" in p.stdout


def test_fix_never_overwrites_an_older_backup(tmp_path):
    data, _ = good_aof(2)
    f = tmp_path / "appendonly.aof"
    (tmp_path / "appendonly.aof.bak").write_bytes(b"older backup")
    f.write_bytes(data + b"*2\r\n$6\r\nDEL")
    p = run("--fix", str(f))
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "appendonly.aof.bak").read_bytes() == b"older backup"
    assert (tmp_path / "appendonly.aof.bak.1").read_bytes() == data + b"*2\r\n$6\r\nDEL"
    assert "appendonly.aof.bak.1" in p.stdout


def test_fix_without_backup(tmp_path):
    data, _ = good_aof(2)
    f = tmp_path / "appendonly.aof"
    f.write_bytes(data + b"*")
    p = run("--fix", "--no-backup", str(f))
    assert p.returncode == 0, p.stdout + p.stderr
    assert f.read_bytes() == data
    assert list(tmp_path.iterdir()) == [f]


def corrupt_in_the_middle() -> tuple[bytes, int, bytes]:
    data, offsets = good_aof(6)
    bad_at = offsets[3]
    body = data.index(b"body", bad_at)
    corrupt = bytearray(data)
    corrupt[body] ^= 0x20  # "body" -> "Body": caught by the CRC
    return bytes(corrupt), bad_at, data[:bad_at]


def test_corrupt_in_the_middle(tmp_path):
    corrupt, bad_at, _ = corrupt_in_the_middle()
    f = tmp_path / "appendonly.aof"
    f.write_bytes(corrupt)
    p = run(str(f))
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"AOF is not valid at offset {bad_at}: CRC mismatch" in p.stdout
    assert f"ok_up_to={bad_at}" in p.stdout
    assert f.read_bytes() == corrupt


@pytest.mark.parametrize("answer", ["", "n\n", "no\n", "maybe\n"])
def test_corrupt_fix_asks_first(tmp_path, answer):
    corrupt, bad_at, _ = corrupt_in_the_middle()
    f = tmp_path / "appendonly.aof"
    f.write_bytes(corrupt)
    p = run("--fix", str(f), stdin=answer)
    assert p.returncode == 1, p.stdout + p.stderr
    lost = len(corrupt) - bad_at
    assert f"drops {lost} bytes" in p.stdout
    assert "the bad record and about 5 records after it (5 of which look valid)" in p.stdout
    assert "Continue? [y/N]" in p.stdout
    assert "Aborted" in p.stdout
    assert f.read_bytes() == corrupt
    assert not (tmp_path / "appendonly.aof.bak").exists()


def test_corrupt_fix_confirmed_on_stdin(tmp_path):
    corrupt, bad_at, prefix = corrupt_in_the_middle()
    f = tmp_path / "appendonly.aof"
    f.write_bytes(corrupt)
    p = run("--fix", str(f), stdin="y\n")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Successfully truncated AOF" in p.stdout
    assert f.read_bytes() == prefix
    assert (tmp_path / "appendonly.aof.bak").read_bytes() == corrupt


def test_corrupt_fix_yes(tmp_path):
    corrupt, bad_at, prefix = corrupt_in_the_middle()
    f = tmp_path / "appendonly.aof"
    f.write_bytes(corrupt)
    p = run("--fix", "--yes", str(f))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Continue?" not in p.stdout
    assert "Successfully truncated AOF" in p.stdout
    assert f.read_bytes() == prefix
    assert (tmp_path / "appendonly.aof.bak").read_bytes() == corrupt
    p = run(str(f))
    assert p.returncode == 0 and "AOF is valid" in p.stdout


def test_garbage_first_record(tmp_path):
    data, _ = good_aof(2)
    f = tmp_path / "appendonly.aof"
    f.write_bytes(b"SET foo bar\r\n" + data)
    p = run(str(f))
    assert p.returncode == 1
    assert "AOF is not valid at offset 0: not a multibulk record" in p.stdout
    p = run("--fix", "-y", str(f))
    assert p.returncode == 0 and f.read_bytes() == b""


def test_missing_file(tmp_path):
    p = run(str(tmp_path / "nope.aof"))
    assert p.returncode == 2
    assert "Cannot read the AOF" in p.stderr


def test_usage_error():
    p = run()
    assert p.returncode == 2
    assert "usage: disque-check-aof" in p.stderr


def test_main_in_process(tmp_path, capsys):
    from disquepy.tools.check_aof import main

    data, _ = good_aof(1)
    f = tmp_path / "appendonly.aof"
    f.write_bytes(data + b"*3\r\n")
    assert main([str(f)]) == 1
    assert main(["--fix", "--no-backup", str(f)]) == 0
    assert main([str(f)]) == 0
    assert "AOF is valid" in capsys.readouterr().out
