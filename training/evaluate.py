"""Evaluate a trained model on one split and write run_dir/eval.json.

    python -m training.evaluate --config configs/demo.yaml [--set eval.split=val]

Classification: loss, accuracy, macro-F1. Causal LM: loss and perplexity per predicted token.
"""
from __future__ import annotations

import math
import sys

from pipeline import console, contract, storage
from pipeline.config import ShardlineConfig
from training.data import TASK_COLUMNS, split_spec
from training.distributed import pick_device
from training.loop import evaluate, resolve_precision
from training.models import load_model


def run_evaluation(config: ShardlineConfig) -> dict:
    storage.check_reachable(config.run_dir)  # a missing bucket must not read as a missing dataset
    manifest = contract.load_manifest(config.dataset_dir)
    split = config.eval.split
    if manifest.splits[split].rows == 0 and split == "test":
        split = "val"  # a tiny corpus can leave test empty; val is the next best held-out split
    device = pick_device(config.train.device)
    model = load_model(config.model_dir).to(device)
    spec = split_spec(config.dataset_dir, manifest, split, batch_size=config.eval.batch_size,
                      columns=TASK_COLUMNS[manifest.task], shuffle=False, backend=config.reader.backend,
                      verify_checksums=config.reader.verify_checksums)
    num_batches = math.ceil(manifest.splits[split].rows / config.eval.batch_size)
    result = evaluate(model, spec, device, manifest.task, resolve_precision(config.train.precision, device),
                      progress=lambda batches: console.track(batches, num_batches, "evaluate", "batch"))
    payload = {"split": split, "task": manifest.task, **result}
    contract.write_json_atomic(config.run_path("eval.json"), payload)
    shown = ", ".join(f"{k} {v:.4f}" for k, v in result.items() if isinstance(v, float))
    print(f"evaluate: {split}: {shown} on {result['examples']} examples; wrote {config.run_path('eval.json')}")
    return payload


def main(argv: list[str] | None = None) -> int:
    from pipeline.cli import run_stage_main

    return run_stage_main("evaluate", lambda config, args: run_evaluation(config), argv)


if __name__ == "__main__":
    sys.exit(main())
