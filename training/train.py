"""Train a model on a preprocessed dataset, alone or as one of N data-parallel processes.

    python -m training.train --config configs/demo.yaml [--set key=value ...]
    torchrun --nproc_per_node N -m training.train --config configs/demo.yaml

Reads run_dir/dataset; writes run_dir/model/, checkpoints/ (a killed run started again resumes
from the newest valid one), metrics.jsonl and plots/loss.png; TensorBoard events go to
config.local_dir/tensorboard/ (run_dir itself when it is local). run_dir may be any storage URI.
"""
from __future__ import annotations

import os
import sys

import torch

from pipeline import contract, storage
from pipeline.config import ShardlineConfig, save_config
from training import artifacts, distributed, mixture
from training.loop import Trainer
from training.metrics import METRICS_FILE, PLOT_FILE, copy_to_run_dir, plot_losses
from training.models import build_model, check_dataset_matches


def train(config: ShardlineConfig) -> str:
    storage.check_reachable(config.run_dir)  # a missing bucket must not read as a missing dataset
    if config.train.deterministic:
        distributed.use_deterministic_kernels()
    processes = distributed.init(config.train.device, config.train.process_group_timeout_s,
                                 config.train.eval_timeout_s)
    try:
        sources = mixture.sources_of(config)  # train.datasets: compatible by check, so the first speaks for all
        manifest = sources[0].manifest if sources else contract.load_manifest(config.dataset_dir)
        torch.manual_seed(config.train.seed)
        model = build_model(config.train, manifest)
        check_dataset_matches(model, manifest, config)
        trainer = Trainer(model.to(processes.device), config, manifest, processes, sources)
        if processes.is_main:
            print(f"train: {config.train.model} on {processes.device} x{processes.world_size}, "
                  f"{trainer.total_steps} steps of {trainer.batches_per_epoch} batches/epoch per process", flush=True)
        summary = trainer.fit()
        if processes.is_main:
            with storage.staged_local_dir(config.model_dir) as staging:
                model.to("cpu").save(staging)
                artifacts.write_model_sidecars(staging, config, manifest, summary, sources)
            local = config.local_dir
            plot_losses(os.path.join(local, METRICS_FILE), os.path.join(local, *PLOT_FILE.split("/")))
            copy_to_run_dir(local, config.run_dir, [METRICS_FILE, PLOT_FILE])
            save_config(config, config.run_path("config.resolved.yaml"))
            for name, seen in (summary["sources"] or {}).items():
                print(f"train: source {name}: {seen['samples']} samples ({seen['share']:.4f} of the stream, weight "
                      f"{seen['weight']:g}), {seen['tokens']} tokens, pass {seen['passes']}", flush=True)
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
