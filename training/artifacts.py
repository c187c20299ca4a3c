"""What a model directory holds besides the weights, and writing it atomically."""
from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

from pipeline import contract
from pipeline.config import ShardlineConfig

LABEL_MAP_FILE = "label_map.json"
LINEAGE_FILE = "lineage.json"


@contextlib.contextmanager
def staged_dir(final_dir: Path) -> Iterator[Path]:
    """Yield a fresh temporary directory that replaces final_dir in one rename on success."""
    staging = final_dir.parent / f".{final_dir.name}.tmp-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    contract.swap_in_dir(staging, final_dir)


def write_model_sidecars(directory: Path, config: ShardlineConfig, manifest: contract.Manifest, summary: dict) -> None:
    """Tokenizer, label map and lineage beside the weights: the directory is usable on its own."""
    from pipeline import storage

    if storage.exists(storage.join(str(config.tokenizer_dir), "tokenizer.json")):
        save_model_tokenizer(str(config.tokenizer_dir), directory, manifest)
    (directory / LABEL_MAP_FILE).write_text(json.dumps(manifest.label_map, indent=2, sort_keys=True))
    lineage = {
        "dataset_dir": str(config.dataset_dir.resolve()),
        "dataset_manifest_sha256": contract.file_sha256(config.dataset_dir / contract.MANIFEST_FILE),
        "tokenizer_sha256": manifest.tokenizer_sha256,
        "schema_version": manifest.schema_version,
        "steps": summary["steps"],
        "final_loss": summary["final_loss"],
        "input_stall": summary["input_stall"],
        "weights_sha256_per_rank": summary["weights_sha256_per_rank"],  # equal on every rank, or DDP went wrong
        "code_version": _code_version(),
        "config": config.to_dict(),
    }
    contract.write_json_atomic(directory / LINEAGE_FILE, lineage)


def save_model_tokenizer(tokenizer_dir: str, directory: Path, manifest: contract.Manifest) -> None:
    """The dataset's tokenizer, saved for the model's users: `model_max_length` is the length the model
    was trained on, and for causal LM the tokenizer adds no special tokens, because documents were
    tokenized without them (an end-of-text token after each), so prompts encode the same way."""
    from pipeline.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    tokenizer.model_max_length = manifest.max_length
    if manifest.task == "causal_lm":
        tokenizer.backend_tokenizer.post_processor = None
        if manifest.eos_id is not None:
            tokenizer.eos_token = tokenizer.convert_ids_to_tokens(manifest.eos_id)
    tokenizer.save_pretrained(str(directory))


def _code_version() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, check=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"shardline {version('shardline')}"
        except PackageNotFoundError:
            return "unknown"
