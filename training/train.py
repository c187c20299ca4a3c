"""Train a model on a preprocessed dataset.

    python -m training.train --config configs/demo.yaml [--set key=value ...]

Reads run_dir/dataset (through Petastorm), writes run_dir/model/ and appends run_dir/metrics.jsonl.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from pipeline import contract
from pipeline.config import ShardlineConfig, save_config
from training import artifacts
from training.loop import fit, pick_device
from training.models import build_model


def train(config: ShardlineConfig) -> Path:
    manifest = contract.load_manifest(config.dataset_dir)
    torch.manual_seed(config.train.seed)
    device = pick_device(config.train.device)
    model = build_model(config.train, manifest).to(device)
    print(f"train: {config.train.model} on {device}, {manifest.splits['train'].rows} training rows", flush=True)
    steps = fit(model, config.train, config.dataset_dir, Path(config.run_dir) / "metrics.jsonl", device)
    with artifacts.staged_dir(config.model_dir) as staging:
        model.to("cpu").save(staging)
        artifacts.write_model_sidecars(staging, config, manifest, steps)
    save_config(config, Path(config.run_dir) / "config.resolved.yaml")
    print(f"train: {steps} steps; model saved to {config.model_dir}")
    return config.model_dir


def main(argv: list[str] | None = None) -> int:
    from pipeline.cli import run_stage_main

    return run_stage_main("train", lambda config, args: train(config), argv)


if __name__ == "__main__":
    sys.exit(main())
