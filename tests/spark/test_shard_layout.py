"""shard.write_partitions on real DataFrames: each tokenizing task writes its own split files, and
reports them, their token accounting and the duplicates behind its documents."""
import json

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipeline import contract
from pipeline.config import ShardConfig
from spark_jobs import clean, encode, shard

SCHEMA = pa.schema([("id", pa.string()), (contract.NUM_TOKENS, pa.int32())])


def token_counter():
    """A stand-in encoder for the layout alone: num_tokens = the text's length, one document a row.
    (Made inside a function so that Spark's workers get it by value: they cannot import a test module.)"""
    def count_tokens(batches):
        for batch in batches:
            lengths = pa.array([len(t) for t in batch.column("text").to_pylist()], pa.int32())
            n = batch.num_rows
            yield pa.RecordBatch.from_arrays(
                [batch.column("id"), batch.column("split"), lengths, pa.array([1] * n, pa.int32()),
                 pa.array([0] * n, pa.int8()), pa.array([[x] for x in lengths.to_pylist()], pa.list_(pa.int32())),
                 pa.array([False] * n)],
                names=["id", "split", contract.NUM_TOKENS, encode.DOCUMENTS, encode.TRUNCATED, encode.DOC_LENGTHS,
                       encode.DROPPED])
    return count_tokens


def balanced_groups(rows: int, row_group_rows: int) -> list[int]:
    """Row groups of row_group_rows, the last two sharing what is left evenly."""
    full, rest = divmod(rows, row_group_rows)
    if rest == 0 or full == 0:
        return [row_group_rows] * full + ([rest] if rest else [])
    tail = row_group_rows + rest
    return [row_group_rows] * (full - 1) + [(tail + 1) // 2, tail // 2]


def test_each_partition_writes_its_own_files_with_every_row_once_in_split_and_id_order(spark, tmp_path):
    rows = ([(f"t{i:02d}", "train", "x" * i) for i in range(17)] + [(f"v{i}", "val", "yy") for i in range(5)]
            + [(f"x{i}", "test", "z") for i in range(3)])
    # As the job hands them over: spread over partitions, sorted by (split, id) within each.
    df = spark.createDataFrame(rows, "id string, split string, text string").repartition(3, "id") \
        .sortWithinPartitions("split", "id")
    written = shard.write_partitions(df, token_counter(), SCHEMA, str(tmp_path), ShardConfig(row_group_rows=4), "b1")
    by_partition = {}
    for row in df.select(F.spark_partition_id().alias("p"), "id", "split").collect():
        by_partition.setdefault((row["split"], row["p"]), []).append(row["id"])
    files = {(w.split, w.file >> shard.SEQUENCE_BITS): w for w in written.files}
    assert set(files) == set(by_partition)  # one file per (split, partition) that has rows
    for (name, partition), ids in by_partition.items():
        w = files[(name, partition)]
        assert w.path.startswith(f"{name}/part-{partition:05d}-000-b1-")
        table = pq.read_table(tmp_path / w.path)
        assert table.column("id").to_pylist() == ids
        assert list(w.row_group_rows) == balanced_groups(len(ids), 4)
    assert written.files == sorted(written.files)  # the manifest's read order: split, partition, sequence
    assert {name: t["documents"] for name, t in written.totals.items()} == {"train": 17, "val": 5, "test": 3}
    assert written.totals["train"]["tokens"] == sum(range(17)) and written.duplicates == 0


def test_a_partition_without_rows_writes_nothing_and_no_rows_at_all_gives_no_files(spark, tmp_path):
    df = spark.createDataFrame([("a", "train", "text")], "id string, split string, text string").repartition(4)
    written = shard.write_partitions(df, token_counter(), SCHEMA, str(tmp_path / "one"), ShardConfig(), "b")
    assert [(w.split, w.row_group_rows) for w in written.files] == [("train", (1,))]
    empty = spark.createDataFrame([], "id string, split string, text string").repartition(2)
    nothing = shard.write_partitions(empty, token_counter(), SCHEMA, str(tmp_path / "none"), ShardConfig(), "b")
    assert (nothing.files, nothing.totals, nothing.duplicates) == ([], {}, 0)


def test_the_writers_count_the_duplicates_de_duplication_removed(spark, tmp_path):
    # 6 records, 3 distinct texts: de-duplication keeps 3 and removes 3, and the writer tasks that
    # stream the kept documents past say so.
    texts = ["a", "b", "a", "c", "a", "b"]
    records = spark.createDataFrame([(t, None) for t in texts], "text string, id_raw string")
    kept = (records.transform(lambda d: clean.with_ids(d, id_from_input=False)).repartition(2, clean.CONTENT_HASH)
            .transform(clean.drop_duplicates).withColumn("split", F.lit("train")).sortWithinPartitions("split", "id")
            .select("id", "split", "text", clean.COPIES))
    written = shard.write_partitions(kept, token_counter(), SCHEMA, str(tmp_path), ShardConfig(), "b")
    assert (written.duplicates, written.totals["train"]["documents"]) == (3, 3)


def test_dropped_blocks_are_counted_for_their_split_though_no_file_holds_them(spark, tmp_path):
    # causal_lm with drop_remainder: a split whose every block is dropped still has its documents
    # and dropped tokens in the totals.
    count_tokens = token_counter()

    def drop_val(batches):
        for encoded in count_tokens(batches):
            columns = encoded.columns[:-1] + [pa.array([s == "val" for s in encoded.column("split").to_pylist()])]
            yield pa.RecordBatch.from_arrays(columns, names=encoded.schema.names)

    df = spark.createDataFrame([("t", "train", "abc"), ("v", "val", "hello")], T.StructType([
        T.StructField("id", T.StringType()), T.StructField("split", T.StringType()),
        T.StructField("text", T.StringType())])).repartition(1).sortWithinPartitions("split", "id")
    written = shard.write_partitions(df, drop_val, SCHEMA, str(tmp_path), ShardConfig(), "b")
    assert [w.split for w in written.files] == ["train"]
    assert {k: v for k, v in written.totals["val"].items() if k != "length_histogram"} == {
        "tokens": 0, "documents": 1, "truncated_documents": 0, "dropped_tokens": 5}
    assert json.loads(written.files[0].stats)["tokens"] == 3
