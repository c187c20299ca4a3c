"""Preprocess a text corpus into a tokenized, split, sharded Parquet dataset.

    spark-submit spark_jobs/preprocess.py --config configs/demo.yaml [--set key=value ...] [--force]

Output: run_dir/dataset/{train,val,test}/*.parquet, rejects/, manifest.json, _SUCCESS, and the
tokenizer the rows were encoded with in run_dir/tokenizer/.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script (spark-submit): import the project from its root, not from spark_jobs/,
    # whose module names must not shadow the standard library's.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipeline import contract, inputs, sources, storage
from pipeline.config import ConfigError, ShardlineConfig, load_config, save_config
from pipeline.errors import ShardlineError
from pipeline.tokenizer import backend_json, load_tokenizer, train_tokenizer
from spark_jobs import clean, encode, input_count, quality, read, shard, split
from spark_jobs.manifest import begin_build, publish, remove_unlisted, versions
from spark_jobs.manifest import split_stats as split_stats_of
from spark_jobs.progress import SparkProgress, described, name_jobs
from spark_jobs.session import start_session, stop_session

APP_NAME = "shardline-preprocess"
PERSIST = StorageLevel.DISK_ONLY  # the read records, which the job reuses: see build_dataset

# Changing any config section outside these never rebuilds a dataset.
DATASET_SECTIONS = contract.DATASET_SECTIONS


DatasetConflictError = contract.DatasetConflictError


def check_existing(config: ShardlineConfig, files: list, force: bool) -> bool:
    """True when the finished dataset there has this config's fingerprint (skip); raise when it was
    built from another config or other input files, unless forced."""
    dataset_dir = config.dataset_dir
    if force or storage.info(storage.join(dataset_dir, contract.SUCCESS_FILE)) is None:
        return False
    existing = contract.load_manifest(dataset_dir)
    if existing.dataset_fingerprint == inputs.dataset_fingerprint(config, files):
        return True
    changed = contract.changed_dataset_sections(existing, config.to_dict())
    if changed:
        raise DatasetConflictError(
            f"{dataset_dir} was built from a different config (sections {changed} differ); "
            "use another run_dir, or pass --force to rebuild it"
        )
    raise DatasetConflictError(
        f"{dataset_dir} was built from different input files (names, sizes or modification times changed "
        f"under {config.data.input}); pass --force to rebuild it"
    )


def prepare_tokenizer(config: ShardlineConfig, texts: DataFrame, num_texts: int):
    """Train (on a Spark-drawn sample of the kept documents; one of each text with de-duplication) or
    load the tokenizer, and save the run's copy of it."""
    if config.tokenizer.train is not None:
        sample = training_sample(texts, config.tokenizer.train.sample_size, num_texts, config.preprocess.seed,
                                 distinct=config.preprocess.dedup)
        tokenizer = train_tokenizer(sample, config.tokenizer.train)
    else:
        tokenizer = load_tokenizer(config.tokenizer.path)
    with storage.staged_local_dir(config.tokenizer_dir) as staging:
        tokenizer.save_pretrained(staging)
    return tokenizer


_SAMPLE_BUCKETS = 1_000_000


def training_sample(texts: DataFrame, sample_size: int, num_texts: int, seed: int, distinct: bool = False) -> list[str]:
    """About sample_size texts, kept by a seeded hash of each text and returned sorted, so the same
    corpus gives the same sample however it is partitioned (local[1], local[2], a cluster, the
    read tasks' byte ranges) or ordered. Spark's sample() draws per partition, in partition order.
    distinct: each text once, as de-duplication will keep it (the hash keeps all copies or none)."""
    fraction = min(1.0, sample_size / max(num_texts, 1))
    if fraction < 1:
        bucket = F.pmod(F.xxhash64(F.col(read.TEXT), F.lit(seed)), F.lit(_SAMPLE_BUCKETS))
        texts = texts.filter(bucket < int(fraction * _SAMPLE_BUCKETS))
    # One job (toLocalIterator would run one per partition); sample_size bounds what it brings back.
    sampled = (row[0] for row in texts.select(read.TEXT).collect())
    return sorted(set(sampled) if distinct else sampled)


def read_clean(spark: SparkSession, config: ShardlineConfig, files: list) -> DataFrame:
    """Every input record, its text cleaned, and with preprocess.quality judged by its heuristic
    rules and language, in the task that read it (read.read_corpus), then every record check in
    order; the first failing check names the reject."""
    pre = config.preprocess
    cleaner = clean.TextCleaner(pre.normalization, pre.collapse_whitespace)
    judge = quality.removal_marker(pre.quality) if pre.quality.active else None
    records = read.read_corpus(spark, config.data, files, cleaner if cleaner.active else None, judge)
    records = clean_records(records, config)
    if pre.quality.active and judge is None:  # near-dedup alone: no rule judged a text
        records = records.withColumn(quality.REMOVED_BY, F.lit(None).cast("string"))
    return records


def clean_records(records: DataFrame, config: ShardlineConfig) -> DataFrame:
    """The record checks, in order, on records whose text is already cleaned."""
    pre = config.preprocess
    df = records.transform(lambda d: clean.filter_length(d, pre.min_chars, pre.max_chars))
    if pre.task == "classification":
        df = df.transform(lambda d: clean.check_labels(d, config.data.labels))
    if config.data.id_column:
        df = df.transform(clean.check_ids)
    return df


def documents_by_content(good: DataFrame, config: ShardlineConfig, label_map: dict[str, int],
                         num_partitions: int) -> DataFrame:
    """Documents (id, split, text, label, ...) of good (records with content_hash and id:
    clean.with_ids) hashed by content hash into num_partitions and sorted by (split, id, text, raw
    label) within them; with de-duplication one per content hash, carrying clean.COPIES (summed by
    the shard writers). De-duplication (a group-by on the same key) needs no second shuffle, nor
    does the hashing when good is a computed cache hashed so already (quality.mark_near_duplicates);
    which partition a document lands in depends on its text alone, never on the cluster, so the same
    corpus gives the same shards everywhere."""
    pre = config.preprocess
    # Only what the documents need from here travels through the shuffle and the de-duplication's
    # struct: not the source URI, offset and reject columns every record carries for rejects/.
    language = [c for c in (quality.LANGUAGE, quality.LANGUAGE_SCORE) if c in good.columns]
    docs = good.select(clean.CONTENT_HASH, contract.ID_COLUMN, read.TEXT, read.LABEL_RAW, *language)
    docs = docs.repartition(num_partitions, clean.CONTENT_HASH)
    if pre.dedup:
        docs = docs.transform(clean.drop_duplicates)
    docs = docs.transform(lambda d: split.with_split(d, pre.split, pre.seed))
    if label_map:
        docs = docs.transform(lambda d: split.with_label_ids(d, label_map))
    # Text and label break ties between equal ids (copies kept without de-duplication, one text under
    # two labels), so the order, hence the shards, never depends on the order records arrived in.
    return docs.sortWithinPartitions(split.SPLIT, contract.ID_COLUMN, read.TEXT, read.LABEL_RAW)


def encoder_for(documents: DataFrame, config: ShardlineConfig, tokenizer) -> tuple[encode.BatchFunction, pa.Schema]:
    """The configured task's encoder over a task's document batches (id, split, text[, label,
    copies]), in packing order, and the Arrow schema of the files its rows go into."""
    pre = config.preprocess
    if pre.task == "causal_lm":
        encode_batches, out_schema = encode.packed_batches(
            backend_json(tokenizer), pre.max_length, tokenizer.pad_token_id, causal_lm_eos_id(tokenizer),
            pre.drop_remainder,
        )
    else:
        encode_batches, out_schema = encode.padded_batches(
            documents.schema, backend_json(tokenizer), pre.max_length, tokenizer.pad_token_id, pre.stride,
        )
    columns = contract_columns(pre.task, with_language=pre.quality.language is not None)
    return encode_batches, shard.arrow_schema(T.StructType([out_schema[name] for name in columns]))


def causal_lm_eos_id(tokenizer) -> int:
    eos_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    if eos_id is None:
        raise ConfigError(
            "config key tokenizer: the tokenizer has no eos (or sep) token to end packed documents; "
            "use one that defines eos_token"
        )
    return eos_id


def label_map_of(config: ShardlineConfig, found_labels: list[str]) -> dict[str, int]:
    """Label name -> id: the configured labels, else every (trimmed) label the documents carry."""
    if config.preprocess.task != "classification":
        return {}
    if config.data.label_column is None:
        raise ConfigError("config key data.label_column: required key is missing for preprocess.task classification")
    names = sorted(set(config.data.labels if config.data.labels is not None else found_labels))
    return {name: index for index, name in enumerate(names)}


def count_records(records: DataFrame, with_labels: bool) -> tuple[int, int, list[str]]:
    """(input records, rejects, the distinct trimmed labels of the documents) in one aggregation
    over the read records: one small job instead of a count per term and a distinct()."""
    is_reject = F.col(read.REJECT_REASON).isNotNull()
    label = F.when(~is_reject, F.trim(F.col(read.LABEL_RAW))) if with_labels else F.lit(None).cast("string")
    groups = records.groupBy(is_reject.alias("reject"), label.alias("label")).count().collect()
    input_records = sum(row["count"] for row in groups)
    rejected = sum(row["count"] for row in groups if row["reject"])
    labels = sorted(row["label"] for row in groups if not row["reject"] and row["label"] is not None)
    return input_records, rejected, labels


def build_dataset(spark: SparkSession, config: ShardlineConfig, files: list | None = None) -> contract.Manifest:
    files = files if files is not None else read.resolve_input_files(config.data.input)
    num_partitions = read.num_partitions_for(files, config.preprocess.num_partitions)
    input_bytes_per_partition = math.ceil(sum(f.size for f in files) / num_partitions)
    with sized_shuffles(spark, num_partitions, input_bytes_per_partition), described(spark.sparkContext, "preprocess"):
        return _build(spark, config, files, num_partitions)


SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
ADVISORY_PARTITION_BYTES = "spark.sql.adaptive.advisoryPartitionSizeInBytes"
# Spark's advisory default and its coalescing's minPartitionSize default: the bounds of the job's.
MAX_ADVISORY_BYTES, MIN_ADVISORY_BYTES = 64 << 20, 1 << 20


@contextmanager
def sized_shuffles(spark: SparkSession, num_partitions: int, input_bytes_per_partition: int) -> Iterator[None]:
    """While the job runs, then back to the session's values:
    - spark.sql.shuffle.partitions = num_partitions: the shuffles it does not size itself
      (near-dedup's joins, windows and aggregations) grow with the input as its own do. Spark's 200
      is too many tasks for a small corpus and too few for a terabyte, and a persisted plan keeps
      it (adaptive execution does not coalesce a cached plan's partitions). preprocess.num_partitions
      sets the count; the session's own setting is not used;
    - adaptive execution's advisory partition size = the input bytes per partition, within Spark's
      1 MB to 64 MB: it coalesces those shuffles' partitions up to that size. With Spark's 64 MB a
      small corpus's coalesced tasks held less than a big one's (the largest task of near-dedup's
      one-task components phase: 16 MB of execution memory at GCIDE x1, 80 MB at x4; 25 MB at x4
      with this), where now a coalesced partition is no bigger than a read task's input."""
    advisory_bytes = min(MAX_ADVISORY_BYTES, max(MIN_ADVISORY_BYTES, input_bytes_per_partition))
    settings = {SHUFFLE_PARTITIONS: str(num_partitions), ADVISORY_PARTITION_BYTES: str(advisory_bytes)}
    before = {key: spark.conf.get(key) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)


def _build(spark: SparkSession, config: ShardlineConfig, files: list, num_partitions: int) -> contract.Manifest:
    pre = config.preprocess
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(stage: str, next_stage: str | None = None) -> None:
        nonlocal clock
        timings[stage] = round(time.perf_counter() - clock, 3)
        clock = time.perf_counter()
        print(f"preprocess: {stage} done in {timings[stage]:.1f} s", flush=True)
        if next_stage is not None:
            begin(next_stage)

    def begin(stage: str) -> None:  # the stage's name for its Spark jobs (build_dataset puts the old one back)
        name_jobs(spark.sparkContext, f"preprocess: {stage}")

    begin("read_clean")

    dataset_dir = config.dataset_dir
    build_id = begin_build(dataset_dir)
    # Read once, used up to three times. On disk, not in memory: the in-memory columnar cache builds
    # each batch in heap buffers the memory store does not account for, and a 1 GB corpus filled a
    # 1 GB heap with cached blocks until a task's batch no longer fit (OutOfMemoryError); on disk
    # the heap holds one batch per task, whatever the corpus size.
    records = read_clean(spark, config, files).persist(PERSIST)
    good, rejected = read.split_rejects(records)
    good = good.transform(lambda d: clean.with_ids(d, config.data.id_column is not None))
    wants_labels = pre.task == "classification" and config.data.labels is None
    input_records, num_rejected, found_labels = count_records(records, wants_labels)
    # Each term of the manifest's identity is counted where it happens, so a lost row shows:
    # rejects by what the rejects writers wrote, documents by what the shard writers wrote. With
    # no rejects at all, the writer pass (a Python task per read partition) is skipped.
    rejects_files = shard.write_rejects(rejected, dataset_dir, "zstd", build_id) if num_rejected else []
    rejects_by_reason = shard.rejects_by_reason(rejects_files)
    lap("read_clean", "count_input")
    # Each file's records counted again, whole and apart from the read pass: a record lost while
    # reading fails the job here, before the tokenizer runs.
    input_count.check_input_counts(input_count.count_input(spark, config.data, files), input_count.read_per_file(records),
                                   files, read.detect_format(files, config.data.format), dataset_dir)
    lap("count_input", "quality" if pre.quality.active else "tokenizer")

    removed_files, removed_by_rule, near_marked = [], {}, None
    if pre.quality.active:
        if pre.quality.near_dedup is not None:
            # Read by the removal writer, the tokenizer's sample and the documents: joined once.
            near_marked = quality.mark_near_duplicates(good, pre.quality, num_partitions).persist(PERSIST)
        good, removed = quality.split_removed(good, near_marked)
        removed_files, removed_by_rule = shard.write_removed(removed, quality.REMOVED_BY, dataset_dir, "zstd",
                                                             build_id, pre.quality.num_removed_samples)
        quality.check_removal_caps(input_records, removed_by_rule, pre.quality.max_removed_fraction)
        lap("quality", "tokenizer")

    num_kept = input_records - num_rejected - sum(removed_by_rule.values())
    tokenizer = prepare_tokenizer(config, good.select(read.TEXT), num_kept)
    with storage.staged_local_dir(storage.join(dataset_dir, "tokenizer")) as staging:
        tokenizer.save_pretrained(staging)  # the dataset decodes on its own
    label_map = label_map_of(config, found_labels)
    lap("tokenizer", "tokenize_write")

    documents = documents_by_content(good, config, label_map, num_partitions)
    # Only what the encoder and the duplicates count read crosses into Python.
    wanted = [contract.ID_COLUMN, split.SPLIT, read.TEXT, contract.LABEL, clean.COPIES, quality.LANGUAGE,
              quality.LANGUAGE_SCORE]
    documents = documents.select(*[c for c in wanted if c in documents.columns])
    encode_batches, schema = encoder_for(documents, config, tokenizer)
    # One stage tokenizes and writes: the encoder runs in the task that writes its rows.
    written = shard.write_partitions(documents, encode_batches, schema, dataset_dir, pre.shard, build_id)
    records.unpersist()
    if near_marked is not None:
        near_marked.unpersist()
    lap("tokenize_write")

    split_stats = {
        name: split_stats_of([w.data_file() for w in written.files if w.split == name], written.totals.get(name),
                             pre.max_length)
        for name in contract.SPLITS
    }
    num_documents = sum(s.documents for s in split_stats.values())
    rejected_total = sum(rejects_by_reason.values())
    check_accounting(input_records, num_documents, rejected_total, written.duplicates, removed_by_rule, dataset_dir)
    manifest = contract.Manifest(
        schema_version=contract.SCHEMA_VERSION,
        task=pre.task,
        max_length=pre.max_length,
        vocab_size=len(tokenizer),
        pad_id=tokenizer.pad_token_id,
        eos_id=causal_lm_eos_id(tokenizer) if pre.task == "causal_lm" else None,
        tokenizer_sha256=contract.file_sha256(storage.join(config.tokenizer_dir, "tokenizer.json")),
        label_map=label_map,
        input_records=input_records,
        rejected_records=rejected_total,
        rejected_by_reason=dict(sorted(rejects_by_reason.items())),
        duplicates_removed=written.duplicates,
        token_count=sum(s.tokens for s in split_stats.values()),
        splits=split_stats,
        input_files=inputs.input_file_list(files),
        dataset_fingerprint=inputs.dataset_fingerprint(config, files),
        rejects_files=[w.data_file() for w in rejects_files],
        removed_by_rule=dict(sorted(removed_by_rule.items())),
        removed_files=[w.data_file() for w in removed_files],
        versions=versions(spark.version),
        stage_seconds=timings,
        config=config.to_dict(),
    )
    removed = remove_unlisted(dataset_dir, manifest)
    if removed:
        print(f"preprocess: removed {len(removed)} file(s) of failed or speculative task attempts", flush=True)
    publish(dataset_dir, manifest)
    return manifest


class AccountingError(RuntimeError):
    """The job's own counts disagree: records were lost or counted twice on the way to the shards."""


def check_accounting(input_records: int, documents: int, rejected: int, duplicates: int,
                     removed_by_rule: dict[str, int], dataset_dir: str) -> None:
    """Fail the job, before anything is published, unless every input record is a document, a
    reject, a removed exact duplicate or a record a quality rule removed. Each term is counted where
    it happens: input records by the read pass, rejects by what the rejects writers wrote, removals
    by the removal writers, documents and duplicates by the tasks that wrote the shards."""
    removed = sum(removed_by_rule.values())
    unaccounted = input_records - (documents + rejected + duplicates + removed)
    if unaccounted:
        raise AccountingError(
            f"the dataset's counts do not add up, so it was not published: input_records {input_records} != "
            f"documents {documents} + rejected {rejected} + duplicates_removed {duplicates} + removed by quality "
            f"rules {removed} ({unaccounted:+d} records unaccounted for). This is a bug in the job; the "
            f"unpublished output is in {dataset_dir} for the report."
        )


def contract_columns(task: str, with_language: bool = False) -> list[str]:
    """The columns a split's Parquet files hold, in order; with_language (classification): the
    document's detected language and score after them."""
    if task == "causal_lm":
        return [contract.ID_COLUMN, contract.INPUT_IDS, contract.ATTENTION_MASK, contract.POSITION_IDS,
                contract.SEGMENT_IDS, contract.NUM_TOKENS]
    language = [contract.LANGUAGE, contract.LANGUAGE_SCORE] if with_language else []
    return [contract.ID_COLUMN, contract.INPUT_IDS, contract.ATTENTION_MASK, contract.LABEL, contract.NUM_TOKENS,
            *language]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="spark_jobs/preprocess.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="YAML config file")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--force", action="store_true", help="rebuild even if the dataset exists")
    parser.add_argument("--source", metavar="NAME",
                        help="build this source of the mixture (train.datasets) into run_dir/sources/NAME/dataset")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = load_config(args.config, args.overrides)
        storage.check_reachable(config.run_dir)
        built = build_all(datasets_to_build(config, args.source), args.force, sources.trains_tokenizer(config))
    except ShardlineError as error:  # config, input, store, dataset conflicts: one line, exit 2
        print(f"preprocess: error: {error}", file=sys.stderr)
        return 2
    for dataset_dir, manifest in built:
        counts = ", ".join(f"{name} {stats.rows}" for name, stats in manifest.splits.items())
        print(f"preprocess: wrote {dataset_dir} ({counts}; rejected {manifest.rejected_records} of {manifest.input_records})")
    return 0


def datasets_to_build(config: ShardlineConfig, source: str | None) -> list[ShardlineConfig]:
    """The run's dataset; for a mixture (train.datasets), the source named, or every source with an
    input in config order (the first trains the tokenizer the others read)."""
    if source is not None:
        return [sources.source_config(config, source)]
    if config.train.datasets is not None:
        return [sources.source_config(config, entry.name) for entry in sources.built_sources(config)]
    return [config]


def build_all(targets: list[ShardlineConfig], force: bool, first_trains_tokenizer: bool) -> list[tuple[str, Any]]:
    """Build each target not already built from its config, in one Spark application; when the first
    of a mixture's sources is rebuilt with a trained tokenizer, the later ones are rebuilt too."""
    built, spark, new_tokenizer = [], None, False
    try:
        for number, target in enumerate(targets):
            files = read.resolve_input_files(target.data.input)
            if check_existing(target, files, force or new_tokenizer):
                print(f"preprocess: {target.dataset_dir} is already built from this config; skipping")
                continue
            save_config(target, target.run_path("config.resolved.yaml"))
            if spark is None:
                spark = start_session(target, APP_NAME, sum(entry.size for entry in files))
            with SparkProgress(spark.sparkContext):
                built.append((target.dataset_dir, build_dataset(spark, target, files)))
            new_tokenizer = new_tokenizer or (number == 0 and first_trains_tokenizer)  # the later sources read it
    finally:
        if spark is not None:
            stop_session(spark)
    return built


if __name__ == "__main__":
    sys.exit(main())
