"""`shardline` command line: preprocess, train, evaluate, run (all three), inspect."""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline import contract
from pipeline.config import ConfigError, ShardlineConfig, load_config
from pipeline.storage import StorageError

# Errors a user can fix from the message alone: printed as one line, no traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (
    ConfigError, FileNotFoundError, contract.DatasetNotReadyError, ValueError, StorageError,
)


def _add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML config file")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a config key, e.g. --set train.lr=3e-4 (repeatable; wins over the file)",
    )


def _add_stage_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true",
                        help="rerun even when done with this config and inputs (preprocess rebuilds the dataset)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would run, with the exact commands, and run nothing")


def build_parser() -> argparse.ArgumentParser:
    from pipeline.driver import STAGES

    parser = argparse.ArgumentParser(prog="shardline", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in [
        ("preprocess", "tokenize, split and shard the corpus with Spark (via spark-submit)"),
        ("train", "train the configured model on run_dir/dataset"),
        ("evaluate", "evaluate run_dir/model and write run_dir/eval.json"),
        ("run", "preprocess, train and evaluate in order, skipping stages already done"),
    ]:
        sub = commands.add_parser(name, help=text, description=text)
        _add_config_args(sub)
        _add_stage_args(sub)
        if name == "run":
            sub.add_argument("--from", dest="first", choices=STAGES, default=STAGES[0], help="first stage to run")
            sub.add_argument("--to", dest="last", choices=STAGES, default=STAGES[-1], help="last stage to run")
    package = commands.add_parser("package", help="zip pipeline/, spark_jobs/, training/ for spark-submit --py-files")
    package.add_argument("--output", default="dist/shardline.zip", help="zip to write (default: %(default)s)")
    inspect = commands.add_parser("inspect", help="print a dataset's manifest and a few decoded rows")
    inspect.add_argument("dataset_dir")
    inspect.add_argument("--split", default="train", choices=contract.SPLITS)
    inspect.add_argument("--rows", type=int, default=3)
    return parser


def _load(args: argparse.Namespace) -> ShardlineConfig:
    if args.config is None and not args.overrides:
        raise ConfigError("no config given: pass --config FILE.yaml and/or --set key=value")
    return load_config(args.config, args.overrides)


def _run_stages(config: ShardlineConfig, args: argparse.Namespace) -> None:
    """Every stage subcommand and `run` go through the driver, so markers stay truthful."""
    from pipeline.driver import run_stages

    first = getattr(args, "first", None) or args.command
    last = getattr(args, "last", None) or args.command
    run_stages(config, first, last, force=args.force, dry_run=args.dry_run)


def run_stage_main(stage: str, action: Callable[[ShardlineConfig, argparse.Namespace], Any], argv: list[str] | None) -> int:
    """Shared `main` of every stage: parse config args, run, turn user errors into one line."""
    parser = argparse.ArgumentParser(prog=f"shardline {stage}")
    _add_config_args(parser)
    return _guarded(stage, action, parser.parse_args(argv))


def _guarded(stage: str, action: Callable[[ShardlineConfig, argparse.Namespace], Any], args: argparse.Namespace) -> int:
    from pipeline.driver import StageFailed
    from pipeline.inputs import InputError

    try:
        action(_load(args), args)
    except StageFailed as error:
        print(f"shardline {stage}: {error}", file=sys.stderr)
        return 1
    except (*USER_ERRORS, InputError) as error:
        print(f"shardline {stage}: error: {error}", file=sys.stderr)
        return 2
    return 0


def inspect_dataset(dataset_dir: str, split: str, num_rows: int) -> None:
    import pyarrow.parquet as pq

    from pipeline.tokenizer import load_tokenizer

    manifest = contract.load_manifest(dataset_dir)
    summary = manifest.model_dump(mode="json", exclude={"config"})
    print(json.dumps(summary, indent=2, sort_keys=True))
    from pipeline import storage

    tokenizer = load_tokenizer(storage.join(dataset_dir, "tokenizer"))
    labels = {index: name for name, index in manifest.label_map.items()}
    shown = 0
    for uri in manifest.split_files(dataset_dir, split):
        filesystem, path = storage.filesystem(uri)
        table = pq.read_table(path, filesystem=filesystem).slice(0, num_rows - shown)
        for row in table.to_pylist():
            # causal_lm blocks have no label; their documents are told apart by segment id.
            label = f" label={labels.get(row[contract.LABEL])}" if contract.LABEL in row else ""
            if contract.SEGMENT_IDS in row:
                pieces = _segments(row[contract.INPUT_IDS], row[contract.SEGMENT_IDS])
                text = "\n".join(f"  <doc {s}> {tokenizer.decode(ids, skip_special_tokens=True)}" for s, ids in pieces)
            else:
                text = tokenizer.decode(row[contract.INPUT_IDS], skip_special_tokens=True)
            print(f"\n[{split} row {shown}] id={row[contract.ID_COLUMN]}{label} tokens={row[contract.NUM_TOKENS]}\n{text}")
            shown += 1
        if shown >= num_rows:
            break


def _segments(input_ids: list[int], segment_ids: list[int]) -> list[tuple[int, list[int]]]:
    """(segment id, its token ids) for each document piece of a packed block; padding (0) dropped."""
    pieces: dict[int, list[int]] = {}
    for token, segment in zip(input_ids, segment_ids):
        if segment:
            pieces.setdefault(segment, []).append(token)
    return sorted(pieces.items())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "inspect":
        try:
            inspect_dataset(args.dataset_dir, args.split, args.rows)
        except USER_ERRORS as error:
            print(f"shardline inspect: error: {error}", file=sys.stderr)
            return 2
        return 0
    if args.command == "package":
        from pipeline.packaging import build_package

        print(build_package(args.output))
        return 0
    action = {"preprocess": _run_stages, "train": _run_stages, "evaluate": _run_stages, "run": _run_stages}[args.command]
    return _guarded(args.command, action, args)


if __name__ == "__main__":
    sys.exit(main())
