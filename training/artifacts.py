"""What a model directory holds besides the weights."""
from __future__ import annotations

import os
import subprocess

from pipeline import contract, storage
from pipeline.config import ShardlineConfig
from training import mixture

LABEL_MAP_FILE = "label_map.json"
LINEAGE_FILE = "lineage.json"


def write_model_sidecars(directory: str, config: ShardlineConfig, manifest: contract.Manifest, summary: dict,
                         sources: list | None = None) -> None:
    """Tokenizer, label map and lineage beside the weights in a local staging directory: the
    model directory is usable on its own, wherever it is put. sources: a mixture's (training.mixture)."""
    tokenizer_dir = mixture.tokenizer_dir(sources) if sources else config.tokenizer_dir
    if storage.exists(storage.join(tokenizer_dir, "tokenizer.json")):
        save_model_tokenizer(tokenizer_dir, directory, manifest)
    contract.write_json_atomic(os.path.join(directory, LABEL_MAP_FILE), manifest.label_map)
    dataset_dir = sources[0].dataset_dir if sources else config.dataset_dir
    lineage = {
        "dataset_dir": storage.normalize(dataset_dir),
        "dataset_fingerprint": manifest.dataset_fingerprint,
        "dataset_manifest_sha256": contract.file_sha256(storage.join(dataset_dir, contract.MANIFEST_FILE)),
        "sources": mixture.lineage(sources) if sources else None,  # a mixture: every source, its weight, its dataset
        "sources_seen": summary.get("sources"),
        "tokenizer_sha256": manifest.tokenizer_sha256,
        "schema_version": manifest.schema_version,
        "steps": summary["steps"],
        "final_loss": summary["final_loss"],
        "input_stall": summary["input_stall"],
        "weights_sha256_per_rank": summary["weights_sha256_per_rank"],  # equal on every rank, or DDP went wrong
        "code_version": _code_version(),
        "config": config.to_dict(),
    }
    contract.write_json_atomic(os.path.join(directory, LINEAGE_FILE), lineage)


def save_model_tokenizer(tokenizer_dir: str, directory: str, manifest: contract.Manifest) -> None:
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
            ["git", "rev-parse", "HEAD"], cwd=os.path.dirname(os.path.abspath(__file__)), capture_output=True,
            text=True, check=True, timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"shardline {version('shardline')}"
        except PackageNotFoundError:
            return "unknown"
