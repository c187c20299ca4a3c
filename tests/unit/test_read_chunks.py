"""Line chunking of input files (no Spark)."""
import gzip

import pytest

from pipeline import storage

pytest.importorskip("pyspark")  # spark_jobs imports it; a GPU machine's training-only environment has none
from spark_jobs.read import EmptyFile, plan_chunks, read_chunk_lines  # noqa: E402


def test_chunks_cover_every_line_exactly_once(tmp_path):
    lines = [("x" * n).encode() for n in [0, 5, 1, 17, 3, 0, 9, 2, 30, 1, 4]]
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"".join(line + b"\n" for line in lines) + b"tail-without-newline")
    expected = [line for line in lines if line] + [b"tail-without-newline"]
    size = path.stat().st_size
    for chunk_bytes in range(1, size + 2):
        got = []
        for _, start, end in plan_chunks([storage.info(str(path))], chunk_bytes, whole_files=False):
            got += [raw for raw, _ in read_chunk_lines(str(path), start, end)]
        assert got == expected, chunk_bytes


def test_offsets_point_at_the_lines(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"ab\n\ncd\r\nef")
    assert list(read_chunk_lines(str(path), 0, -1)) == [(b"ab", 0), (b"cd", 4), (b"ef", 8)]


def test_corrupt_gzip_member_ends_the_file_with_an_error_and_empty_files_are_marked(tmp_path):
    good = gzip.compress(b"one\ntwo\n")
    bad = bytearray(gzip.compress(b"three\n" * 50))
    bad[20:40] = b"\xff" * 20
    path = tmp_path / "c.txt.gz"
    path.write_bytes(good + bytes(bad))
    records = list(read_chunk_lines(str(path), 0, -1))
    assert [r for r, _ in records[:2]] == [b"one", b"two"]
    assert isinstance(records[2][0], Exception) and records[2][1] == 8
    empty = tmp_path / "e.txt"
    empty.write_bytes(b"")
    [(marker, offset)] = read_chunk_lines(str(empty), 0, -1)
    assert isinstance(marker, EmptyFile) and offset == 0
    assert plan_chunks([storage.info(str(path))], 1, whole_files=False) == [(str(path), 0, -1)]  # gzip is never cut
