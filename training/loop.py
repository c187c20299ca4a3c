"""The training loop, top to bottom: optimizer, train_step, evaluate, fit."""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from pipeline import contract
from pipeline.config import TrainConfig
from training.data import ReaderSpec, iter_batches


def pick_device(requested: str) -> torch.device:
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device is cuda but no CUDA device is visible; use auto or cpu")
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=0.9, weight_decay=cfg.weight_decay)
    return torch.optim.RMSprop(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def _to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor]) -> float:
    model.train()
    logits = model(batch[contract.INPUT_IDS], batch[contract.ATTENTION_MASK])
    loss = F.cross_entropy(logits, batch[contract.LABEL])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


@dataclass
class EvalResult:
    examples: int
    loss: float
    accuracy: float


@torch.no_grad()
def evaluate(model: nn.Module, spec: ReaderSpec, device: torch.device) -> EvalResult:
    model.eval()
    total_loss, correct, examples = 0.0, 0, 0
    for batch in iter_batches(spec):
        batch = _to_device(batch, device)
        logits = model(batch[contract.INPUT_IDS], batch[contract.ATTENTION_MASK])
        labels = batch[contract.LABEL]
        total_loss += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(dim=-1) == labels).sum().item()
        examples += labels.numel()
    if examples == 0:
        return EvalResult(0, math.nan, math.nan)
    return EvalResult(examples, total_loss / examples, correct / examples)


def fit(model: nn.Module, cfg: TrainConfig, dataset_dir: Path, metrics_path: Path, device: torch.device) -> int:
    """Train for cfg.epochs (or cfg.max_steps); append a JSON line per logged step. Returns steps run."""
    optimizer = build_optimizer(model, cfg)
    spec = ReaderSpec(
        contract.split_dir(dataset_dir, "train"), cfg.batch_size, shuffle=True, seed=cfg.seed,
        num_workers=cfg.num_reader_workers,
    )
    step, window_samples, window_start = 0, 0, time.perf_counter()
    with open(metrics_path, "a", encoding="utf-8") as metrics:
        for epoch in range(cfg.epochs):
            for batch in iter_batches(spec, epoch):
                loss = train_step(model, optimizer, _to_device(batch, device))
                if not math.isfinite(loss):
                    raise FloatingPointError(f"loss became {loss} at step {step + 1}; lower train.lr")
                step += 1
                window_samples += batch[contract.LABEL].numel()
                if step % cfg.log_every == 0:
                    elapsed = time.perf_counter() - window_start
                    record = {
                        "step": step, "epoch": epoch, "loss": round(loss, 6),
                        "lr": optimizer.param_groups[0]["lr"],
                        "samples_per_s": round(window_samples / max(elapsed, 1e-9), 1),
                    }
                    metrics.write(json.dumps(record) + "\n")
                    metrics.flush()
                    print(f"train: step {step} epoch {epoch} loss {loss:.4f}", flush=True)
                    window_samples, window_start = 0, time.perf_counter()
                if cfg.max_steps is not None and step >= cfg.max_steps:
                    return step
    return step
