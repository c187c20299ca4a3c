"""Evaluate a trained model on one split and write run_dir/eval.json.

    python -m training.evaluate --config configs/demo.yaml [--set eval.split=val]
"""
from __future__ import annotations

import sys
from pathlib import Path

from pipeline import contract
from pipeline.config import ShardlineConfig
from training.data import ReaderSpec
from training.loop import evaluate, pick_device
from training.models import load_model


def run_evaluation(config: ShardlineConfig) -> dict:
    manifest = contract.load_manifest(config.dataset_dir)
    split = config.eval.split
    if manifest.splits[split].rows == 0 and split == "test":
        split = "val"  # a tiny corpus can leave test empty; val is the next best held-out split
    device = pick_device(config.train.device)
    model = load_model(config.model_dir).to(device)
    spec = ReaderSpec(contract.split_dir(config.dataset_dir, split), config.eval.batch_size, shuffle=False)
    result = evaluate(model, spec, device)
    payload = {"split": split, "examples": result.examples, "loss": result.loss, "accuracy": result.accuracy}
    contract.write_json_atomic(Path(config.run_dir) / "eval.json", payload)
    print(f"evaluate: {split} accuracy {result.accuracy:.4f} loss {result.loss:.4f} on {result.examples} examples")
    return payload


def main(argv: list[str] | None = None) -> int:
    from pipeline.cli import run_stage_main

    return run_stage_main("evaluate", lambda config, args: run_evaluation(config), argv)


if __name__ == "__main__":
    sys.exit(main())
