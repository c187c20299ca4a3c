"""Evaluate a trained model on one split and write run_dir/eval.json.

    python -m training.evaluate --config configs/demo.yaml [--set eval.split=val]

Classification: loss, accuracy, macro-F1. Causal LM: loss and perplexity per predicted token.
"""
from __future__ import annotations

import math
import sys

from pipeline import console, contract, storage
from pipeline.config import ShardlineConfig
from training import mixture
from training.data import TASK_COLUMNS, split_spec
from training.distributed import pick_device
from training.loop import evaluate, resolve_precision
from training.models import load_model


def run_evaluation(config: ShardlineConfig) -> dict:
    """eval.json: the split's metrics; for a mixture, each source's (`sources`) and their weighted whole."""
    storage.check_reachable(config.run_dir)  # a missing bucket must not read as a missing dataset
    sources = mixture.sources_of(config)
    datasets = [(s.name, s.dataset_dir, s.manifest) for s in sources] if sources else [
        (None, config.dataset_dir, contract.load_manifest(config.dataset_dir))]
    device = pick_device(config.train.device)
    model = load_model(config.model_dir).to(device)
    found = {}
    for name, dataset_dir, manifest in datasets:
        split, result = _evaluate_dataset(config, model, device, dataset_dir, manifest, name)
        found[name] = {"split": split, **result}
    task = datasets[0][2].task
    if sources is None:
        payload = {"task": task, **found[None]}
    else:
        weights = {s.name: s.weight for s in sources}
        payload = {"split": config.eval.split, "task": task, **mixture.weighted_whole(found, weights),
                   "weights": weights, "sources": found}
    contract.write_json_atomic(config.run_path("eval.json"), payload)
    for name, result in found.items():
        shown = ", ".join(f"{k} {v:.4f}" for k, v in result.items() if isinstance(v, float))
        print(f"evaluate: {name + ': ' if name else ''}{result['split']}: {shown} on {result['examples']} examples")
    if sources is not None:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in payload.items() if isinstance(v, float))
        print(f"evaluate: the mixture, weighted: {shown}")
    print(f"evaluate: wrote {config.run_path('eval.json')}")
    return payload


def _evaluate_dataset(config: ShardlineConfig, model, device, dataset_dir: str, manifest: contract.Manifest,
                      name: str | None) -> tuple[str, dict]:
    split = config.eval.split
    if manifest.splits[split].rows == 0 and split == "test":
        split = "val"  # a tiny corpus can leave test empty; val is the next best held-out split
    spec = split_spec(dataset_dir, manifest, split, batch_size=config.eval.batch_size,
                      columns=TASK_COLUMNS[manifest.task], shuffle=False, backend=config.reader.backend,
                      verify_checksums=config.reader.verify_checksums)
    num_batches = math.ceil(manifest.splits[split].rows / config.eval.batch_size)
    label = f"evaluate {name}" if name else "evaluate"
    result = evaluate(model, spec, device, manifest.task, resolve_precision(config.train.precision, device),
                      progress=lambda batches: console.track(batches, num_batches, label, "batch"))
    return split, result


def main(argv: list[str] | None = None) -> int:
    from pipeline.cli import run_stage_main

    return run_stage_main("evaluate", lambda config, args: run_evaluation(config), argv)


if __name__ == "__main__":
    sys.exit(main())
