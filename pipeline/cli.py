"""`shardline` command line: preprocess, train, evaluate, run (all three), predict, inspect, package."""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from pipeline import contract
from pipeline.config import ConfigError, ShardlineConfig, load_config
from pipeline.errors import MissingPathError, ShardlineError

# Errors a user can fix from the message alone: printed as one line, exit 2, no traceback. Anything
# else is a bug or a broken environment and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (ShardlineError,)
USER_ERROR_EXIT = 2


def version_text() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"shardline {version('shardline')}"
    except PackageNotFoundError:
        return "shardline (not installed: run from a checkout)"


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


def _verbosity_parent(default: Any) -> argparse.ArgumentParser:
    """-q/-v, accepted before the command and after it (`shardline -q run` = `shardline run -q`)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("-v", "--verbose", action="count", default=default,
                        help="show everything the stages write, Spark's INFO lines included")
    parent.add_argument("-q", "--quiet", action="count", default=default,
                        help="show only which stages run and errors: no progress, no Spark warnings")
    return parent


def build_parser() -> argparse.ArgumentParser:
    from pipeline.driver import STAGES

    parser = argparse.ArgumentParser(prog="shardline", description=__doc__, parents=[_verbosity_parent(0)])
    parser.add_argument("--version", action="version", version=version_text())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    verbosity = _verbosity_parent(argparse.SUPPRESS)  # a subcommand's -q/-v replace the top-level ones
    for name, text in [
        ("preprocess", "tokenize, split and shard the corpus with Spark (via spark-submit)"),
        ("train", "train the configured model on run_dir/dataset"),
        ("evaluate", "evaluate run_dir/model and write run_dir/eval.json"),
        ("run", "preprocess, train and evaluate in order, skipping stages already done"),
    ]:
        sub = commands.add_parser(name, help=text, description=text, parents=[verbosity])
        _add_config_args(sub)
        _add_stage_args(sub)
        if name == "run":
            sub.add_argument("--from", dest="first", choices=STAGES, default=STAGES[0], help="first stage to run")
            sub.add_argument("--to", dest="last", choices=STAGES, default=STAGES[-1], help="last stage to run")
    predict = commands.add_parser(
        "predict", parents=[verbosity], help="label texts (mlp, bert) or continue them (gpt2) with a trained model",
        description="Label texts with a trained classifier (probabilities for every label), or continue them "
                    "with a trained gpt2. Texts come from the arguments, --input FILE, or stdin.")
    predict.add_argument("--model", required=True, metavar="DIR", help="run_dir/model (or the run_dir) of a trained run")
    predict.add_argument("texts", nargs="*", metavar="TEXT", help="texts to predict for")
    predict.add_argument("--input", metavar="FILE",
                         help="one text per line (.jsonl: the text field the model was trained on); - reads stdin")
    predict.add_argument("--json", action="store_true", help="one JSON object per text instead of readable lines")
    predict.add_argument("--max-new-tokens", type=int, default=20, metavar="N",
                         help="gpt2: tokens to generate per text (default: %(default)s)")
    predict.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    waves = commands.add_parser(
        "sources", help="print the Spark jobs a run needs as JSON: the first wave, then the rest (parallel)",
        description="The preprocess jobs of this config, for a scheduler (the Airflow DAG): {\"first\": [...], "
                    "\"rest\": [...]}, each a mixture source's name (spark_jobs/preprocess.py --source NAME) or "
                    "null (the run's own dataset); the rest may run in parallel once the first are done.")
    _add_config_args(waves)
    package = commands.add_parser("package", help="zip pipeline/, spark_jobs/, training/ for spark-submit --py-files")
    package.add_argument("--output", default="dist/shardline.zip", help="zip to write (default: %(default)s)")
    inspect = commands.add_parser(
        "inspect", help="summarize a dataset (splits, tokens, tokenizer, rejects) and decode a few rows",
        description="Summarize a dataset and decode a few rows back to text. DIR is a run_dir or its dataset/.")
    inspect.add_argument("dataset_dir", metavar="DIR")
    inspect.add_argument("--split", default="train", choices=contract.SPLITS, help="split to show rows of")
    inspect.add_argument("--rows", type=int, default=3, help="rows to decode (default: %(default)s)")
    inspect.add_argument("--manifest", action="store_true", help="print the whole manifest as JSON instead")
    inspect.add_argument("--removed", metavar="RULE",
                         help="show the sampled documents that quality rule RULE removed (see the summary's removed line)")
    return parser


def _verbosity(args: argparse.Namespace) -> int:
    return (getattr(args, "verbose", 0) or 0) - (getattr(args, "quiet", 0) or 0)


def _load(args: argparse.Namespace) -> ShardlineConfig:
    if args.config is None and not args.overrides:
        raise ConfigError("no config given: pass --config FILE.yaml and/or --set key=value")
    return load_config(args.config, args.overrides)


def _run_stages(config: ShardlineConfig, args: argparse.Namespace) -> None:
    """Every stage subcommand and `run` go through the driver, so markers stay truthful."""
    from pipeline.driver import run_stages

    first = getattr(args, "first", None) or args.command
    last = getattr(args, "last", None) or args.command
    run_stages(config, first, last, force=args.force, dry_run=args.dry_run, verbosity=_verbosity(args))


def run_stage_main(stage: str, action: Callable[[ShardlineConfig, argparse.Namespace], Any], argv: list[str] | None) -> int:
    """Shared `main` of every stage process: parse config args, run, turn user errors into one line."""
    parser = argparse.ArgumentParser(prog=f"shardline {stage}")
    _add_config_args(parser)
    args = parser.parse_args(argv)
    return _guarded(stage, lambda: action(_load(args), args))


def _guarded(command: str, action: Callable[[], Any]) -> int:
    """Run action; a user error is one line and exit 2, a failed stage names its log."""
    from pipeline.driver import StageFailed

    try:
        action()
    except StageFailed as error:
        print(f"shardline {command}: {error}", file=sys.stderr)
        return USER_ERROR_EXIT if error.code == USER_ERROR_EXIT else 1
    except USER_ERRORS as error:
        print(f"shardline {command}: error: {error}", file=sys.stderr)
        return USER_ERROR_EXIT
    return 0


# --- inspect --------------------------------------------------------------------------------------

def find_dataset_dir(path: str) -> str:
    """path itself when it is a finished dataset, else path/dataset (a run_dir); local or a URI."""
    from pipeline import storage

    path = str(path)
    for candidate in (path, storage.join(path, "dataset")):
        if storage.exists(storage.join(candidate, contract.SUCCESS_FILE)):
            return candidate
    if not storage.exists(path):
        raise MissingPathError(f"{path} does not exist; give a run_dir or its dataset/ directory")
    if storage.exists(storage.join(path, contract.MANIFEST_FILE)) or not storage.exists(storage.join(path, "dataset")):
        return path  # load_manifest says what is unfinished about it
    return storage.join(path, "dataset")


def dataset_summary(dataset_dir: str, manifest: contract.Manifest) -> list[str]:
    """The lines `inspect` prints before any row: what the dataset is, split by split."""
    from pipeline import storage

    tokenizer_cfg = manifest.config.get("tokenizer", {})
    if tokenizer_cfg.get("train"):
        train = tokenizer_cfg["train"]
        source = f"{train['kind']} trained on up to {train['sample_size']} sampled documents"
    else:
        source = f"from {tokenizer_cfg.get('path')}"
    eos = f", eos id {manifest.eos_id}" if manifest.eos_id is not None else ""
    lines = [
        f"dataset {dataset_dir}: {manifest.task}, rows of {manifest.max_length} tokens, schema version {manifest.schema_version}",
        f"tokenizer: {source}; {manifest.vocab_size} tokens, pad id {manifest.pad_id}{eos}, "
        f"sha256 {manifest.tokenizer_sha256[:12]}",
    ]
    if manifest.label_map:
        lines.append("labels: " + ", ".join(f"{name} ({index})" for name, index in sorted(manifest.label_map.items(), key=lambda x: x[1])))
    documents = sum(s.documents for s in manifest.splits.values())
    rejects = ", ".join(f"{reason} {count}" for reason, count in sorted(manifest.rejected_by_reason.items()))
    lines.append(f"input: {manifest.input_records} records in {len(manifest.input_files)} file(s) -> {documents} documents; "
                 f"rejected {manifest.rejected_records}{f' ({rejects})' if rejects else ''}, "
                 f"duplicates removed {manifest.duplicates_removed}")
    header = ("split", "rows", "documents", "tokens", "padding", "truncated", "files", "row groups")
    table = [header]
    for name in contract.SPLITS:
        stats = manifest.splits.get(name)
        if stats is None:
            continue
        table.append((name, f"{stats.rows:,}", f"{stats.documents:,}", f"{stats.tokens:,}",
                      f"{100 * stats.padding_fraction:.1f}%", f"{100 * stats.truncated_fraction:.1f}%",
                      str(stats.num_files), str(stats.num_row_groups)))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines.append("")
    lines += ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
              for row in table]
    lines.append(f"rejected records: {storage.join(dataset_dir, contract.REJECTS_DIR)}/ (Parquet, with reason and source)"
                 if manifest.rejected_records else "rejected records: none")
    if manifest.removed_by_rule:
        removed = ", ".join(f"{rule} {count}" for rule, count in sorted(manifest.removed_by_rule.items()))
        lines.append(f"removed by quality rules: {sum(manifest.removed_by_rule.values())} ({removed}); "
                     f"samples in {storage.join(dataset_dir, contract.REMOVED_DIR)}/, see --removed RULE")
    return lines


def show_removed(dataset_dir: str, manifest: contract.Manifest, rule: str, num_rows: int) -> None:
    """The sampled documents one quality rule removed, from the removed/ files the manifest lists."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipeline import storage

    if rule not in manifest.removed_by_rule:
        known = ", ".join(sorted(manifest.removed_by_rule)) or "none: no quality rule removed anything"
        raise ShardlineError(f"no quality rule {rule!r} removed documents from {dataset_dir}; rules that did: {known}")
    print(f"{rule}: {manifest.removed_by_rule[rule]} record(s) removed; showing up to {num_rows} sampled")
    shown = 0
    for entry in manifest.removed_files:
        if shown >= num_rows:
            break
        with storage.open_input(storage.join(dataset_dir, entry.path)) as handle:
            table = pq.read_table(handle)
        table = table.filter(pc.equal(table.column(contract.REMOVED_BY), rule)).slice(0, num_rows - shown)
        for row in table.to_pylist():
            where = f"{row['source']}" + (f" @ byte {row['offset']}" if row.get("offset") is not None else "")
            extra = "".join(f" {key}={row[key]}" for key in (contract.LANGUAGE, contract.LANGUAGE_SCORE,
                                                              contract.DUPLICATE_OF) if row.get(key) is not None)
            print(f"\n[{shown}] {where}{extra}\n{row['text']}")
            shown += 1


def inspect_dataset(path: str, split: str, num_rows: int, show_manifest: bool = False,
                    removed_rule: str | None = None) -> None:
    import pyarrow.parquet as pq

    from pipeline import storage
    from pipeline.tokenizer import load_tokenizer

    dataset_dir = find_dataset_dir(path)
    manifest = contract.load_manifest(dataset_dir)
    if show_manifest:
        print(json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=True))
        return
    if removed_rule is not None:
        show_removed(dataset_dir, manifest, removed_rule, num_rows)
        return
    print("\n".join(dataset_summary(dataset_dir, manifest)))
    tokenizer = load_tokenizer(storage.join(dataset_dir, "tokenizer"))
    labels = {index: name for name, index in manifest.label_map.items()}
    shown = 0
    for uri in manifest.split_files(dataset_dir, split):  # only the files the manifest lists are the dataset
        if shown >= num_rows:
            break
        with storage.open_input(uri) as handle:
            table = pq.read_table(handle).slice(0, num_rows - shown)
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
    if shown == 0:
        print(f"\n(the {split} split has no rows)")


def _segments(input_ids: list[int], segment_ids: list[int]) -> list[tuple[int, list[int]]]:
    """(segment id, its token ids) for each document piece of a packed block; padding (0) dropped."""
    pieces: dict[int, list[int]] = {}
    for token, segment in zip(input_ids, segment_ids):
        if segment:
            pieces.setdefault(segment, []).append(token)
    return sorted(pieces.items())


# --- predict --------------------------------------------------------------------------------------

def read_texts(args: argparse.Namespace) -> list[str]:
    texts = list(args.texts)
    if args.input:
        texts += _texts_from_file(args.input, args.model)
    elif not texts and not sys.stdin.isatty():
        texts += _texts_from_file("-", args.model)
    if not texts:
        raise ShardlineError("no texts to predict for: give them as arguments, with --input FILE, or on stdin")
    return texts


def _texts_from_file(name: str, model_dir: str) -> list[str]:
    if name == "-":
        lines = sys.stdin.read().splitlines()
    else:
        from pipeline import storage

        try:
            lines = storage.read_text(name).splitlines()
        except FileNotFoundError:
            raise MissingPathError(f"--input {name} does not exist") from None
    if not name.endswith(".jsonl"):
        return [line for line in lines if line.strip()]
    field = _trained_text_column(model_dir)
    texts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            texts.append(str(json.loads(line)[field]))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ShardlineError(f"--input {name} line {number} is not a JSON object with a {field!r} field") from None
    return texts


def _trained_text_column(model_dir: str) -> str:
    from pipeline import storage
    from training.artifacts import LINEAGE_FILE
    from training.predict import find_model_dir

    try:
        lineage = json.loads(storage.read_text(storage.join(find_model_dir(model_dir), LINEAGE_FILE)))
        return lineage["config"]["data"]["text_column"]
    except (FileNotFoundError, KeyError, json.JSONDecodeError):
        return "text"


def run_predict(args: argparse.Namespace) -> None:
    from training.predict import Predictor, format_prediction

    texts = read_texts(args)
    results = Predictor.load(args.model, args.device)(texts, max_new_tokens=args.max_new_tokens)
    width = max((len(r["label"]) for r in results if "label" in r), default=0)
    for result in results:
        print(json.dumps(result, ensure_ascii=False) if args.json else format_prediction(result, width))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return USER_ERROR_EXIT
    if args.command == "inspect":
        return _guarded("inspect", lambda: inspect_dataset(args.dataset_dir, args.split, args.rows, args.manifest,
                                                           args.removed))
    if args.command == "predict":
        return _guarded("predict", lambda: run_predict(args))
    if args.command == "sources":
        from pipeline.sources import preprocess_waves

        return _guarded("sources", lambda: print(json.dumps(preprocess_waves(_load(args)))))
    if args.command == "package":
        from pipeline.packaging import build_package

        return _guarded("package", lambda: print(build_package(args.output)))
    return _guarded(args.command, lambda: _run_stages(_load(args), args))


if __name__ == "__main__":
    sys.exit(main())
