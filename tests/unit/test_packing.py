"""causal_lm packing on plain arrays: block contents, position and segment ids, padding, dropping."""
import numpy as np
import pytest

pytest.importorskip("pyspark")  # spark_jobs imports it; a GPU machine's training-only environment has none
from spark_jobs.encode import BlockPacker, pad_rows  # noqa: E402

EOS, PAD = 9, 0


def _pack(docs, max_length, drop_remainder=False, batches=1):
    """Feed docs (lists of token ids) in `batches` pieces; return every block produced."""
    packer = BlockPacker(max_length, PAD, EOS, drop_remainder)
    packer.split = "train"
    out = []
    pieces = np.array_split(np.arange(len(docs)), batches)
    for piece in pieces:
        chunk = [docs[i] for i in piece]
        tokens = np.array([t for d in chunk for t in d], dtype=np.int32)
        lengths = np.array([len(d) for d in chunk], dtype=np.int64)
        out.append(packer.add(tokens, lengths, [f"d{i}" for i in piece]))
    out.append(packer.finish())
    return out


def _rows(blocks, name):
    return [row.tolist() for b in blocks for row in getattr(b, name)]


def test_documents_are_joined_with_eos_and_cut_into_full_blocks():
    docs = [[11, 12, 13], [21, 22, 23, 24, 25], [31]]
    blocks = _pack(docs, max_length=4)
    # stream: 11 12 13 EOS | 21 22 23 24 | 25 EOS 31 EOS  -> three full blocks, no padding
    assert _rows(blocks, "input_ids") == [[11, 12, 13, 9], [21, 22, 23, 24], [25, 9, 31, 9]]
    assert _rows(blocks, "segment_ids") == [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 2, 2]]
    # positions restart at each document and at the start of a block (doc 2 continues in block 3)
    assert _rows(blocks, "position_ids") == [[0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 0, 1]]
    assert [b for blk in blocks for b in blk.block_ids] == ["d0@0", "d1@0", "d1@4"]
    assert [int(x) for blk in blocks for x in blk.documents] == [1, 1, 1]
    assert [x.tolist() for blk in blocks for x in blk.doc_lengths] == [[4], [6], [2]]


def test_last_block_is_padded_with_segment_zero_or_dropped():
    docs = [[1, 2], [3, 4, 5, 6, 7]]
    blocks = _pack(docs, max_length=4)
    assert _rows(blocks, "input_ids") == [[1, 2, 9, 3], [4, 5, 6, 7], [9, 0, 0, 0]]
    assert _rows(blocks, "segment_ids") == [[1, 1, 1, 2], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert _rows(blocks, "position_ids") == [[0, 1, 2, 0], [0, 1, 2, 3], [0, 0, 0, 0]]
    assert [bool(x) for blk in blocks for x in blk.dropped] == [False, False, False]
    dropped = _pack(docs, max_length=4, drop_remainder=True)
    assert [bool(x) for blk in dropped for x in blk.dropped] == [False, False, True]


def test_batch_boundaries_do_not_change_the_blocks():
    rng = np.random.default_rng(0)
    docs = [list(rng.integers(10, 99, size=rng.integers(1, 20))) for _ in range(40)]
    whole = _pack(docs, max_length=16)
    pieces = _pack(docs, max_length=16, batches=7)
    for name in ("input_ids", "position_ids", "segment_ids"):
        assert _rows(whole, name) == _rows(pieces, name)
    # every token of every document (plus its EOS) is in exactly one block, in order
    stream = [t for row in _rows(whole, "input_ids") for t in row]
    expected = [t for d in docs for t in (*d, EOS)]
    assert stream[: len(expected)] == expected and set(stream[len(expected):]) <= {PAD}
    assert sum(int(x) for b in whole for x in b.documents) == len(docs)


def test_pad_rows_right_pads_flat_ids():
    ids = np.array([5, 6, 7, 8], dtype=np.int32)
    assert pad_rows(ids, np.array([1, 3, 0]), 4, 0).tolist() == [[5, 0, 0, 0], [6, 7, 8, 0], [0, 0, 0, 0]]
