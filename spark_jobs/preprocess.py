"""Preprocess a text corpus into a tokenized, split, sharded Parquet dataset.

    spark-submit spark_jobs/preprocess.py --config configs/demo.yaml [--set key=value ...] [--force]

Output: run_dir/dataset/{train,val,test}/*.parquet, rejects/, manifest.json, _SUCCESS, and the
tokenizer the rows were encoded with in run_dir/tokenizer/.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    # Run as a script (spark-submit): import the project from its root, not from spark_jobs/,
    # whose module names must not shadow the standard library's.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline import contract
from pipeline.config import ConfigError, ShardlineConfig, load_config, save_config
from pipeline.tokenizer import backend_json, load_tokenizer, train_tokenizer
from spark_jobs import encode, read, split
from spark_jobs.manifest import new_staging_dir, parquet_files, publish, row_group_rows

# The config sections a dataset depends on: changing any other section never rebuilds it.
DATASET_SECTIONS = ("data", "tokenizer", "preprocess")


class DatasetConflictError(RuntimeError):
    pass


def check_existing(config: ShardlineConfig, force: bool) -> bool:
    """True when an identical finished dataset is already there (skip); raise on a different one."""
    dataset_dir = config.dataset_dir
    if force or not (dataset_dir / contract.SUCCESS_FILE).exists():
        return False
    existing = contract.load_manifest(dataset_dir)
    wanted = {k: config.to_dict()[k] for k in DATASET_SECTIONS}
    found = {k: existing.config.get(k) for k in DATASET_SECTIONS}
    if wanted == found:
        return True
    changed = sorted(k for k in DATASET_SECTIONS if wanted[k] != found[k])
    raise DatasetConflictError(
        f"{dataset_dir} was built from a different config (sections {changed} differ); "
        "use another run_dir, or pass --force to rebuild it"
    )


def prepare_tokenizer(spark: SparkSession, config: ShardlineConfig, texts: DataFrame):
    """Train (on a Spark-drawn sample) or load the tokenizer, and save the run's copy of it."""
    if config.tokenizer.train is not None:
        sample_size = config.tokenizer.train.sample_size
        total = texts.count()
        fraction = min(1.0, sample_size / max(total, 1))
        sample = texts.sample(fraction=fraction, seed=config.preprocess.seed) if fraction < 1 else texts
        rows = (row[0] for row in sample.select(read.TEXT).toLocalIterator())
        tokenizer = train_tokenizer(rows, config.tokenizer.train)
    else:
        tokenizer = load_tokenizer(config.tokenizer.path)
    if config.tokenizer_dir.exists():
        shutil.rmtree(config.tokenizer_dir)
    tokenizer.save_pretrained(str(config.tokenizer_dir))
    return tokenizer


def build_dataset(spark: SparkSession, config: ShardlineConfig) -> contract.Manifest:
    timings: dict[str, float] = {}
    started = time.perf_counter()
    files = read.resolve_input_files(config.data.input)
    corpus = read.read_corpus(spark, config.data, files)
    good, rejected = read.split_rejects(corpus)
    timings["read"] = time.perf_counter() - started

    started = time.perf_counter()
    tokenizer = prepare_tokenizer(spark, config, good.select(read.TEXT))
    timings["tokenizer"] = time.perf_counter() - started

    labelled = config.data.label_column is not None
    label_map: dict[str, int] = {}
    if labelled:
        labels = sorted(r[0] for r in good.select(F.trim(F.col(read.LABEL_RAW))).distinct().collect())
        label_map = {name: index for index, name in enumerate(labels)}
    else:
        raise ConfigError("config key data.label_column: required key is missing for preprocess.task classification")

    staging = new_staging_dir(config.dataset_dir)
    tokenizer.save_pretrained(str(staging / "tokenizer"))  # the dataset decodes on its own
    started = time.perf_counter()
    rows = (
        good.transform(split.with_content_id)
        .transform(lambda df: split.with_label_ids(df, label_map))
        .transform(lambda df: split.with_split(df, config.preprocess.split, config.preprocess.seed))
        .select(contract.ID_COLUMN, read.TEXT, contract.LABEL, split.SPLIT)
        .transform(
            lambda df: encode.encode_padded(
                df, backend_json(tokenizer), config.preprocess.max_length, tokenizer.pad_token_id
            )
        )
    )
    # One shuffle by id, then a sort by id: the same input always gives the same shard contents.
    (
        rows.repartition(config.preprocess.num_shards, contract.ID_COLUMN)
        .sortWithinPartitions(contract.ID_COLUMN)
        .write.partitionBy(split.SPLIT)
        .option("compression", "zstd")
        .parquet(str(staging / "_by_split"))
    )
    rejected.write.option("compression", "zstd").parquet(str(staging / contract.REJECTS_DIR))
    timings["tokenize_write"] = time.perf_counter() - started

    started = time.perf_counter()
    split_stats = _finalize_splits(spark, staging)
    rejects_by_reason = {
        r[0]: r[1] for r in spark.read.parquet(str(staging / contract.REJECTS_DIR)).groupBy(read.REJECT_REASON).count().collect()
    }
    timings["stats"] = time.perf_counter() - started

    manifest = contract.Manifest(
        schema_version=contract.SCHEMA_VERSION,
        task=config.preprocess.task,
        max_length=config.preprocess.max_length,
        vocab_size=len(tokenizer),
        pad_id=tokenizer.pad_token_id,
        tokenizer_sha256=contract.file_sha256(config.tokenizer_dir / "tokenizer.json"),
        label_map=label_map,
        input_records=sum(s.rows for s in split_stats.values()) + sum(rejects_by_reason.values()),
        rejected_records=sum(rejects_by_reason.values()),
        rejected_by_reason=dict(sorted(rejects_by_reason.items())),
        token_count=sum(s.tokens for s in split_stats.values()),
        splits=split_stats,
        input_files=[{"path": f, "bytes": os.path.getsize(f)} for f in files if os.path.exists(f)],
        versions=_versions(spark),
        stage_seconds={k: round(v, 3) for k, v in timings.items()},
        config=config.to_dict(),
    )
    publish(staging, config.dataset_dir, manifest)
    return manifest


def _finalize_splits(spark: SparkSession, staging: Path) -> dict[str, contract.SplitStats]:
    """Move split=<name>/ directories to <name>/ and measure each split from its written files."""
    by_split = staging / "_by_split"
    token_sums = {
        r[0]: (r[1], r[2] or 0)
        for r in spark.read.parquet(str(by_split))
        .groupBy(split.SPLIT)
        .agg(F.count(F.lit(1)), F.sum(contract.NUM_TOKENS))
        .collect()
    }
    stats = {}
    for name in contract.SPLITS:
        target = staging / name
        source = by_split / f"{split.SPLIT}={name}"
        if source.exists():
            os.replace(source, target)
        else:
            target.mkdir()
        rows, tokens = token_sums.get(name, (0, 0))
        stats[name] = contract.SplitStats(
            rows=rows,
            tokens=int(tokens),
            num_files=len(parquet_files(target)),
            num_row_groups=len(row_group_rows(target)),
            row_group_rows=row_group_rows(target),
        )
    shutil.rmtree(by_split)
    return stats


def _versions(spark: SparkSession) -> dict[str, str]:
    import pyarrow
    import tokenizers
    import transformers

    return {
        "python": sys.version.split()[0],
        "spark": spark.version,
        "pyarrow": pyarrow.__version__,
        "tokenizers": tokenizers.__version__,
        "transformers": transformers.__version__,
    }


def create_spark_session(config: ShardlineConfig) -> SparkSession:
    # Spark's Python workers must run this interpreter (the one with pandas/pyarrow/tokenizers),
    # not whatever `python3` is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("shardline-preprocess")
    if not _launched_by_spark_submit():
        builder = builder.master(config.spark.master)
    for key, value in config.spark.conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _launched_by_spark_submit() -> bool:
    """spark-submit already set --master on the JVM it started (and exported the gateway port to
    us); the builder would override it, so only set the master when run as plain Python."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="spark_jobs/preprocess.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="YAML config file")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--force", action="store_true", help="rebuild even if the dataset exists")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = load_config(args.config, args.overrides)
        if check_existing(config, args.force):
            print(f"preprocess: {config.dataset_dir} is already built from this config; skipping")
            return 0
        save_config(config, Path(config.run_dir) / "config.resolved.yaml")
        spark = create_spark_session(config)
        try:
            manifest = build_dataset(spark, config)
        finally:
            spark.stop()
    except (ConfigError, read.InputError, DatasetConflictError, contract.DatasetNotReadyError) as error:
        print(f"preprocess: error: {error}", file=sys.stderr)
        return 2
    counts = ", ".join(f"{name} {stats.rows}" for name, stats in manifest.splits.items())
    print(
        f"preprocess: wrote {config.dataset_dir} ({counts}; rejected {manifest.rejected_records} "
        f"of {manifest.input_records})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
