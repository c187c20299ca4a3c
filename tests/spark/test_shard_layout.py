"""shard.with_layout on a real DataFrame: positions, row groups and files as the README promises."""
from collections import Counter

from spark_jobs import shard
from spark_jobs.shard import SplitPlan


def test_rows_get_consecutive_positions_and_row_groups_within_one_row_of_each_other(spark):
    rows = ([(f"t{i:02d}", "train") for i in range(17)] + [(f"v{i}", "val") for i in range(5)]
            + [(f"x{i}", "test") for i in range(3)])
    # As the job hands them over: spread over partitions, sorted by (split, id) within each.
    df = spark.createDataFrame(rows, "id string, split string").repartition(3, "id").sortWithinPartitions("split", "id")
    indexed = shard.with_local_index(df)
    counts = shard.count_positions(indexed)
    assert (counts.per_split, counts.duplicates) == ({"train": 17, "val": 5, "test": 3}, 0)
    bases = counts.bases
    plans = {"train": SplitPlan("train", 17, 8, 2), "val": SplitPlan("val", 5, 4, 1), "test": SplitPlan("test", 3, 8, 4)}
    laid_out = shard.with_layout(indexed, bases, plans).collect()
    for name, plan in plans.items():
        mine = sorted((r[shard.PARTITION], r[shard.LOCAL_INDEX], r[shard.POSITION], r[shard.GROUP], r[shard.FILE])
                      for r in laid_out if r["split"] == name)
        # Positions 0..n-1, in (partition, order within the partition) order.
        assert [m[2] for m in mine] == list(range(plan.rows)), name
        groups, files = [m[3] for m in mine], [m[4] for m in mine]
        # Row groups are runs of consecutive positions, never more than the plan's, sized
        # floor(n / G) or ceil(n / G): even when there are more groups than rows (test: 3 rows, 8 groups).
        assert groups == sorted(groups) and 0 <= groups[0] and groups[-1] < plan.num_row_groups
        sizes = Counter(groups)
        sizes = [sizes.get(g, 0) for g in range(plan.num_row_groups)]
        assert sum(sizes) == plan.rows
        assert set(sizes) <= {plan.rows // plan.num_row_groups, -(-plan.rows // plan.num_row_groups)}, (name, sizes)
        # Each file holds the same number of whole, consecutive row groups.
        assert files == sorted(files) and files[-1] < plan.num_files
        for file_number in set(files):
            held = {g for g, f in zip(groups, files) if f == file_number}
            first = file_number * (plan.num_row_groups // plan.num_files)
            assert held <= set(range(first, first + plan.num_row_groups // plan.num_files)), (name, file_number)


def test_a_corpus_with_no_rows_left_lays_out_nothing(spark):
    # Every record rejected: no (partition, split) run at all (this once failed to analyse).
    empty = shard.with_local_index(spark.createDataFrame([], "id string, split string"))
    counts = shard.count_positions(empty)
    assert (counts.per_split, counts.bases, counts.duplicates) == ({}, {}, 0)
    bases = counts.bases
    plans = {name: SplitPlan(name, 0, 0, 0) for name in ("train", "val", "test")}
    assert shard.with_layout(empty, bases, plans).collect() == []


def test_write_shards_copes_with_a_partition_that_gets_no_file(spark, tmp_path):
    # Two files, (train, 0) and (val, 0), hash to the same one of the two partitions write_shards
    # repartitions into, so the other task gets no rows at all (this once failed in pyarrow).
    import pyarrow as pa
    import pyarrow.parquet as pq

    # The contract's num_tokens and the encoder's accounting columns, which the writers sum.
    rows = [("t0", "train", 3, 1, 0, [3]), ("t1", "train", 4, 1, 0, [4]), ("v0", "val", 5, 1, 1, [9])]
    df = spark.createDataFrame(rows, "id string, split string, num_tokens int, _documents int, _truncated byte, "
                                     "_doc_lengths array<int>").repartition(1).sortWithinPartitions("split", "id")
    indexed = shard.with_local_index(df)
    bases = shard.count_positions(indexed).bases
    plans = {"train": SplitPlan("train", 2, 2, 1), "val": SplitPlan("val", 1, 2, 1), "test": SplitPlan("test", 0, 0, 0)}
    schema = pa.schema([("id", pa.string()), ("num_tokens", pa.int32())])
    written = shard.write_shards(shard.with_layout(indexed, bases, plans), plans, schema, str(tmp_path), "zstd", "b1")
    assert [(w.split, w.file, w.row_group_rows) for w in written] == [("train", 0, (1, 1)), ("val", 0, (1, 0))]
    train = [w for w in written if w.split == "train"][0]
    assert pq.read_table(tmp_path / train.path).column("id").to_pylist() == ["t0", "t1"]
    assert shard.totals_from_files(written)["train"]["tokens"] == 7


def test_the_positions_count_also_counts_the_duplicates_de_duplication_removed(spark):
    # 6 records, 3 distinct texts: de-duplication keeps 3 and removes 3, and the one aggregation that
    # lays the kept rows out says so, as the separate count does.
    from pyspark.sql import functions as F

    from spark_jobs import clean

    texts = ["a", "b", "a", "c", "a", "b"]
    records = spark.createDataFrame([(t, None) for t in texts], "text string, id_raw string")
    kept = (records.transform(lambda d: clean.with_ids(d, id_from_input=False)).repartition(2, clean.CONTENT_HASH)
            .transform(clean.drop_duplicates).withColumn("split", F.lit("train")).sortWithinPartitions("split", "id"))
    counts = shard.count_positions(shard.with_local_index(kept))
    assert (counts.per_split, counts.duplicates, clean.count_duplicates(kept)) == ({"train": 3}, 3, 3)
    assert clean.count_duplicates(records) == 0  # no de-duplication ran: nothing was removed
