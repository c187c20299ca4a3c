"""Train a model on a preprocessed dataset, alone or as one of N data-parallel processes.

    python -m training.train --config configs/demo.yaml [--set key=value ...]
    torchrun --nproc_per_node N -m training.train --config configs/demo.yaml

Reads run_dir/dataset (through Petastorm); writes run_dir/model/, metrics.jsonl, tensorboard/,
plots/loss.png and checkpoints/ (a killed run started again resumes from the newest valid one).
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from pipeline import contract
from pipeline.config import ShardlineConfig, save_config
from training import artifacts, distributed
from training.loop import Trainer
from training.metrics import METRICS_FILE, plot_losses
from training.models import build_model, check_dataset_matches


def train(config: ShardlineConfig) -> Path:
    processes = distributed.init(config.train.device)
    try:
        manifest = contract.load_manifest(config.dataset_dir)
        torch.manual_seed(config.train.seed)
        model = build_model(config.train, manifest)
        check_dataset_matches(model, manifest, config)
        trainer = Trainer(model.to(processes.device), config, manifest, processes)
        if processes.is_main:
            print(f"train: {config.train.model} on {processes.device} x{processes.world_size}, "
                  f"{trainer.total_steps} steps of {trainer.batches_per_epoch} batches/epoch per process", flush=True)
        summary = trainer.fit()
        if processes.is_main:
            run_dir = Path(config.run_dir)
            with artifacts.staged_dir(config.model_dir) as staging:
                model.to("cpu").save(staging)
                artifacts.write_model_sidecars(staging, config, manifest, summary)
            plot_losses(run_dir / METRICS_FILE, run_dir / "plots" / "loss.png")
            save_config(config, run_dir / "config.resolved.yaml")
            print(f"train: {summary['steps']} steps, final loss {summary['final_loss']:.4f}; "
                  f"model saved to {config.model_dir}", flush=True)
        return config.model_dir
    finally:
        distributed.teardown()


def main(argv: list[str] | None = None) -> int:
    from pipeline.cli import run_stage_main

    return run_stage_main("train", lambda config, args: train(config), argv)


if __name__ == "__main__":
    sys.exit(main())
