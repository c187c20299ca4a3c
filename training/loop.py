"""The training loop, top to bottom: precision, optimizer, schedule, train_step, evaluate, fit.

fit() owns the run's state (optimizer steps done); the data position (epoch, samples consumed in
it over all ranks) is the loader's (training.data.StatefulLoader), and both go into each checkpoint
with the model/optimizer/scheduler/scaler/RNG, so a killed run resumes exactly where it stopped, also
on another process count when the global batch (batch_size x processes x grad_accum_steps) is the same.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from pipeline import contract, storage
from pipeline.config import ShardlineConfig, TrainConfig
from pipeline.errors import ShardlineError
from training import checkpoint, mixture
from training.data import TASK_COLUMNS, Batch, ReaderSpec, StatefulLoader, iter_batches, split_spec
from training.distributed import Processes, every_rank, gather, sum_over_ranks, wait_for_main
from training.metrics import (METRICS_FILE, MetricsLog, copy_to_run_dir, describe_locations, drop_records_after,
                              fetch_if_missing, format_stall_report, stall_report)
from training.models import causal_targets

# Config keys that may change between a checkpoint and its resumption without changing the result.
RESUMABLE_CHANGES = {"epochs", "max_steps", "log_every", "eval_every", "checkpoint_every", "num_checkpoints_kept",
                     "resume", "num_reader_workers", "record_sample_ids", "device", "nproc", "compile", "deterministic",
                     "launcher", "torchrun", "distributor", "process_group_timeout_s", "eval_timeout_s",
                     "datasets"}  # a mixture's sources are in the identity by content; their weights may change
# Keys that matter only through their product with the process count, the global batch.
GLOBAL_BATCH_KEYS = {"batch_size", "grad_accum_steps"}
# Beside a fingerprint's checkpoints: what they were trained with, so another config can say what differs.
IDENTITY_FILE = "identity.json"
SAMPLES_DIR = "samples"


def resolve_precision(requested: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, or None for plain fp32."""
    if requested == "auto":
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if bf16 else None
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[requested]


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=0.9, weight_decay=cfg.weight_decay)
    return torch.optim.RMSprop(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig, total_steps: int):
    from transformers import get_scheduler

    name = "constant_with_warmup" if cfg.scheduler == "constant" else cfg.scheduler
    return get_scheduler(name, optimizer, num_warmup_steps=cfg.warmup_steps, num_training_steps=total_steps)


def _autocast(device: torch.device, dtype: torch.dtype | None):
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def to_device(batch: Batch, device: torch.device) -> Batch:
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def forward_loss(model: nn.Module, batch: Batch, task: str, reduction: str = "mean") -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, logits) for one batch; causal LM losses skip padding and document starts."""
    if task == "classification":
        logits = model(input_ids=batch[contract.INPUT_IDS], attention_mask=batch[contract.ATTENTION_MASK])
        return F.cross_entropy(logits.float(), batch[contract.LABEL], reduction=reduction), logits
    logits = model(**{name: batch[name] for name in TASK_COLUMNS["causal_lm"]})
    targets = causal_targets(batch[contract.INPUT_IDS], batch[contract.POSITION_IDS], batch[contract.SEGMENT_IDS])
    shifted = logits[:, :-1].float()
    loss = F.cross_entropy(shifted.reshape(-1, shifted.shape[-1]), targets.reshape(-1).long(), ignore_index=-100,
                           reduction=reduction)
    return loss, logits


@dataclass
class StepResult:
    loss: float  # the mean over every rank's loss
    grad_norm: float


class TrainingDiverged(ShardlineError, FloatingPointError):
    """A non-finite loss (or gradient norm): raised on every rank with the same message."""


def train_step(model: nn.Module, micro_batches: list[Batch], optimizer, scheduler, scaler, task: str,
               autocast_dtype: torch.dtype | None, max_grad_norm: float | None, step: int) -> StepResult:
    """One optimizer step over one or more micro-batches (gradient accumulation); under DDP the
    gradients are all-reduced once, on the last micro-batch, and so is every rank's loss: the
    result is the global mean, and a non-finite loss on any rank stops every rank alike."""
    model.train()
    device = next(model.parameters()).device
    total = 0.0
    for index, batch in enumerate(micro_batches):
        last = index == len(micro_batches) - 1
        sync = contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()
        with sync:
            with _autocast(device, autocast_dtype):
                loss, _ = forward_loss(model, batch, task)
            scaler.scale(loss / len(micro_batches)).backward()
        total += loss.item() / len(micro_batches)
    # Every rank's loss on every rank, so the check below decides the same everywhere: a rank that
    # raised alone would leave the others waiting in their next collective until the timeout.
    losses = every_rank(total)
    bad_ranks = [rank for rank, value in enumerate(losses) if not math.isfinite(value)]
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm or math.inf).item()
    # After the all-reduce the grad norm is the same on every rank, so all ranks stop together.
    # Under fp16 an overflow is the scaler's business (it skips the step); only the loss says "diverged".
    if bad_ranks or (not scaler.is_enabled() and not math.isfinite(grad_norm)):
        where = f" on rank {', '.join(map(str, bad_ranks))} of {len(losses)}" if bad_ranks and len(losses) > 1 else ""
        shown = losses[bad_ranks[0]] if bad_ranks else sum(losses) / len(losses)
        raise TrainingDiverged(
            f"training diverged at step {step}: loss {shown}{where}, grad norm {grad_norm}; "
            "lower train.lr, set train.max_grad_norm, or use train.precision fp32"
        )
    total = sum(losses) / len(losses)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return StepResult(total, grad_norm)


@torch.no_grad()
def evaluate(model: nn.Module, spec: ReaderSpec, device: torch.device, task: str,
             autocast_dtype: torch.dtype | None = None, progress: Callable[[Iterator], Iterator] | None = None,
             processes: Processes | None = None, num_classes: int | None = None) -> dict[str, Any]:
    """Classification: loss, accuracy, macro-F1. Causal LM: loss and perplexity per predicted token.
    progress, when given, wraps the batch iterator (to show a bar).

    With processes of W > 1 ranks, every rank calls it on the same unshuffled spec: rank r evaluates
    batches k with k % W == r, and the sums (loss, counts, the confusion matrix of num_classes, which
    classification then needs) are all-reduced on the eval group, so every rank returns the same
    metrics as one process evaluating every batch."""
    model.eval()
    rank, world = (processes.rank, processes.world_size) if processes else (0, 1)
    if task == "classification" and num_classes is None and world > 1:
        raise ValueError("evaluate on several ranks needs num_classes (the confusion matrix is reduced)")
    total_loss, examples, tokens = 0.0, 0, 0
    confusion = None if num_classes is None else torch.zeros(num_classes * num_classes, dtype=torch.float64)
    batches = iter_batches(spec)
    for index, batch in enumerate(progress(batches) if progress else batches):
        if index % world != rank:
            continue
        batch = to_device(batch, device)
        with _autocast(device, autocast_dtype):
            loss, logits = forward_loss(model, batch, task, reduction="sum")
        total_loss += loss.item()
        examples += batch[contract.INPUT_IDS].shape[0]
        if task == "classification":
            classes = num_classes or logits.shape[-1]
            if confusion is None:
                confusion = torch.zeros(classes * classes, dtype=torch.float64)
            pairs = batch[contract.LABEL].cpu().long() * classes + logits.argmax(dim=-1).cpu()
            confusion += torch.bincount(pairs, minlength=classes * classes).double()
        else:
            targets = causal_targets(batch[contract.INPUT_IDS], batch[contract.POSITION_IDS], batch[contract.SEGMENT_IDS])
            tokens += int((targets != -100).sum())
    # float64 holds the counts exactly (below 2**53) and the loss sum as the one process would.
    sums = torch.tensor([total_loss, examples, tokens], dtype=torch.float64)
    if confusion is not None:
        sums = torch.cat([sums, confusion])
    sums = sum_over_ranks(sums, processes)
    total_loss, examples, tokens = sums[0].item(), int(sums[1]), int(sums[2])
    if task == "classification":
        if examples == 0:
            return {"examples": 0, "loss": math.nan, "accuracy": math.nan, "macro_f1": math.nan}
        classes = math.isqrt(len(sums) - 3)
        matrix = sums[3:].long().reshape(classes, classes)
        return {"examples": examples, "loss": total_loss / examples,
                "accuracy": int(matrix.trace()) / examples, "macro_f1": macro_f1_of_confusion(matrix)}
    loss = total_loss / tokens if tokens else math.nan
    return {"examples": examples, "tokens": tokens, "loss": loss, "perplexity": math.exp(loss) if tokens else math.nan}


def macro_f1(labels: torch.Tensor, predicted: torch.Tensor) -> float:
    """Mean F1 over the classes that occur in labels or predictions (scikit-learn's default)."""
    classes = int(max(labels.max(), predicted.max())) + 1
    pairs = labels.long() * classes + predicted.long()
    return macro_f1_of_confusion(torch.bincount(pairs, minlength=classes * classes).reshape(classes, classes))


def macro_f1_of_confusion(matrix: torch.Tensor) -> float:
    """macro_f1 from a confusion matrix (rows: labels, columns: predictions)."""
    scores = []
    for cls in range(matrix.shape[0]):
        tp = int(matrix[cls, cls])
        fp, fn = int(matrix[:, cls].sum()) - tp, int(matrix[cls, :].sum()) - tp
        if tp + fp + fn:  # the class occurs in labels or predictions
            scores.append(2 * tp / (2 * tp + fp + fn))
    return sum(scores) / len(scores)


@dataclass
class RunState:
    """Where the run is: optimizer steps done, and (from the loader) the epoch and the samples of it
    consumed over all ranks."""

    step: int = 0
    epoch: int = 0
    samples: int = 0


def global_batch_terms(cfg: TrainConfig, world_size: int) -> dict[str, int]:
    """The global batch and what makes it up (identity.json keeps the terms, for messages)."""
    return {"global_batch": cfg.batch_size * world_size * cfg.grad_accum_steps, "batch_size": cfg.batch_size,
            "processes": world_size, "grad_accum_steps": cfg.grad_accum_steps}


def run_identity(config: ShardlineConfig, manifest: contract.Manifest, world_size: int,
                 sources: list[mixture.Source] | None = None) -> dict[str, Any]:
    """What a checkpoint must have been trained with to be resumed by this config: the train keys
    that change the result, the dataset's identity and the global batch (not the process count, nor
    batch_size or grad_accum_steps alone: the data order is in samples, so 6 x 2 processes resumes
    as 12 x 1 or 4 x 3)."""
    train = {k: v for k, v in config.to_dict()["train"].items() if k not in RESUMABLE_CHANGES | GLOBAL_BATCH_KEYS}
    # The dataset's own fingerprint, not the manifest file's hash: a --force rebuild of the same
    # content rewrites the manifest (timings) but is the same dataset, so its checkpoints still resume.
    def fingerprint(dataset_dir: str, manifest: contract.Manifest) -> str:
        return manifest.dataset_fingerprint or contract.file_sha256(storage.join(dataset_dir, contract.MANIFEST_FILE))

    if sources is None:
        dataset: str | dict[str, str] = fingerprint(config.dataset_dir, manifest)
    else:  # a mixture: which sources, by content (not their weights, which may change)
        dataset = {source.name: fingerprint(source.dataset_dir, source.manifest) for source in sources}
    return {"train": train, "dataset": dataset, "global_batch": global_batch_terms(config.train, world_size)["global_batch"]}


def _describe_global_batch(terms: dict[str, Any]) -> str:
    return (f"{terms['global_batch']} = batch_size {terms['batch_size']} x {terms['processes']} processes x "
            f"grad_accum_steps {terms['grad_accum_steps']}")


def run_fingerprint(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def identity_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What makes one run identity another, in words: ["train.lr 0.001 -> 0.002", ...]."""
    found = [f"train.{key} {old['train'].get(key)!r} -> {new['train'].get(key)!r}"
             for key in sorted(set(old.get("train", {})) | set(new["train"]))
             if old.get("train", {}).get(key) != new["train"].get(key)]
    if old.get("dataset") != new["dataset"]:
        found.append("the dataset (another dataset_fingerprint)")
    if old.get("global_batch") != new["global_batch"]:
        if "global_batch_terms" in old and "global_batch_terms" in new:
            found.append(f"global batch {_describe_global_batch(old['global_batch_terms'])} -> "
                         f"{_describe_global_batch(new['global_batch_terms'])}; to resume, make batch_size x processes "
                         f"x grad_accum_steps {old['global_batch']} again")
        else:  # an identity written before the global batch replaced the process count
            found.append(f"global batch {old.get('global_batch', 'unknown (an older trainer)')} -> {new['global_batch']}")
    return found


def _rng_state() -> dict[str, Any]:
    """Every generator's state as tensors and plain lists, so checkpoints load with weights_only."""
    name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [str(name), keys.tolist(), int(position), int(has_gauss), float(cached_gaussian)],
        "python": [version, list(internal), gauss_next],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, position, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached_gaussian))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _reseed(seed: int, step: int, rank: int) -> None:
    """Fresh generators for a rank whose saved state belongs to another process count."""
    value = int.from_bytes(hashlib.sha256(f"{seed}/{step}/{rank}".encode()).digest()[:8], "little")
    torch.manual_seed(value)
    np.random.seed(value % 2**32)
    random.seed(value)


def weights_sha256(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


class Trainer:
    """fit() and what it needs: the model (raw and wrapped), optimizer, schedule, scaler, state."""

    def __init__(self, model: nn.Module, config: ShardlineConfig, manifest: contract.Manifest, processes: Processes,
                 sources: list[mixture.Source] | None = None):
        cfg = self.cfg = config.train
        self.config, self.manifest, self.processes, self.model = config, manifest, processes, model
        self.sources = sources  # a mixture (train.datasets), or None: run_dir/dataset alone
        self.run_dir, self.task, self.device = config.run_dir, manifest.task, processes.device
        self.local_dir = config.local_dir  # appended files (metrics, samples, TensorBoard) live here
        self.autocast_dtype = resolve_precision(cfg.precision, self.device)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=cfg.precision == "fp16")
        columns = TASK_COLUMNS[self.task] + ((contract.ID_COLUMN,) if cfg.record_sample_ids else ())
        reading = dict(batch_size=cfg.batch_size, columns=columns, seed=cfg.seed, rank=processes.rank,
                       world_size=processes.world_size, grad_accum_steps=cfg.grad_accum_steps,
                       num_workers=cfg.num_reader_workers, num_shuffle_row_groups=cfg.num_shuffle_row_groups,
                       pin_memory=self.device.type == "cuda", backend=config.reader.backend,
                       verify_checksums=config.reader.verify_checksums)
        self.loader: StatefulLoader | mixture.MixtureLoader
        if sources is None:
            self.spec = split_spec(config.dataset_dir, manifest, "train", shuffle=True, drop_last=True, **reading)
            self.loader = StatefulLoader(self.spec, num_epochs=cfg.epochs)  # reads nothing past the run's last epoch
        else:
            self.loader = mixture.MixtureLoader(mixture.build_plan(sources, on_exhausted=cfg.on_exhausted, **reading),
                                                num_epochs=cfg.epochs)
            self.spec = self.loader.plan.specs[0]  # backend and checksum settings, for validation
        self.source_tokens = [0] * len(sources or ())  # tokens trained on per source, over all ranks (mixtures)
        self._rank_source_tokens = torch.zeros(len(sources or ()), dtype=torch.float64)  # this rank's, not yet summed
        self._passes_logged = [0] * len(sources or ())
        self.batches_per_epoch = self.loader.num_batches  # the same every epoch and on every rank
        steps_per_epoch = self.batches_per_epoch // cfg.grad_accum_steps  # whole global batches
        self.total_steps = min(cfg.epochs * steps_per_epoch, cfg.max_steps or math.inf)
        self.optimizer = build_optimizer(model, cfg)
        self.scheduler = build_scheduler(self.optimizer, cfg, self.total_steps)
        self.state = RunState()
        self.identity = run_identity(config, manifest, processes.world_size, sources)
        self.fingerprint = run_fingerprint(self.identity)
        self.global_batch_terms = global_batch_terms(cfg, processes.world_size)
        # One folder per fingerprint: a run with another train config, dataset or global batch
        # starts fresh beside the old checkpoints (saying what differs), which stay resumable by
        # their own config. That is what lets `shardline run` retrain after a train key changed.
        self.checkpoints_root = storage.join(self.run_dir, checkpoint.CHECKPOINT_DIR)
        self.checkpoint_dir = storage.join(self.checkpoints_root, self.fingerprint[:16])
        self._identity_written = False
        wrapped = model
        if processes.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            wrapped = DistributedDataParallel(model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self.ddp = wrapped
        self.train_model = torch.compile(wrapped) if cfg.compile else wrapped
        self.loop_seconds = 0.0
        self.last_loss = math.nan

    # -- checkpoints ------------------------------------------------------------------------------
    def save_checkpoint(self) -> None:
        # Logs first: a resumed run drops their records past its checkpoint, never misses earlier ones.
        self._copy_logs_to_run_dir()
        self._reduce_source_tokens()  # collective, like the gather below
        rng = gather(_rng_state(), self.processes)  # collective: every rank calls it
        if self.processes.is_main:
            if not self._identity_written:
                contract.write_json_atomic(storage.join(self.checkpoint_dir, IDENTITY_FILE),
                                           {**self.identity, "global_batch_terms": self.global_batch_terms})
                self._identity_written = True
            state = {
                "fingerprint": self.fingerprint, "run_state": asdict(self.state), "loader": self.loader.state_dict(),
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(), "rng": rng, "last_loss": self.last_loss,
                "source_tokens": list(self.source_tokens),
            }
            checkpoint.save(self.checkpoint_dir, self.state.step, state, self.cfg.num_checkpoints_kept)
        wait_for_main(self.processes)

    def resume(self) -> None:
        """train.resume auto: continue from this config's newest valid checkpoint, if any;
        never: delete this config's checkpoints and start from step 0."""
        if self.cfg.resume == "never":
            if self.processes.is_main:
                deleted = checkpoint.delete_all(self.checkpoint_dir)
                if deleted:
                    print(f"train: train.resume=never: deleted {deleted} checkpoint(s) in {self.checkpoint_dir}; "
                          "starting from step 0", flush=True)
            wait_for_main(self.processes)
            return
        found = checkpoint.latest_valid(self.checkpoint_dir) if self.processes.is_main else None
        wait_for_main(self.processes)
        chosen = gather(found[0] if found else None, self.processes)[0]  # every rank resumes rank 0's pick
        if chosen is None:
            if self.processes.is_main:
                self._report_other_checkpoints()
            return
        state = found[1] if found else checkpoint.load_verified(chosen)
        if state["fingerprint"] != self.fingerprint:
            raise ShardlineError(
                f"checkpoint {chosen} was written by a run with a different train config, dataset or global batch "
                f"than its folder says; delete {self.checkpoint_dir} or set train.resume=never to start over"
            )
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.loader.load_state_dict(state["loader"])
        self.state = RunState(state["run_state"]["step"], self.loader.epoch, self.loader.samples)
        self.last_loss = state["last_loss"]
        self.source_tokens = list(state.get("source_tokens", self.source_tokens))
        changes = getattr(self.loader, "changes", [])
        if changes and self.cfg.on_exhausted == "stop":
            raise ShardlineError("train.on_exhausted stop fixes the epoch's length from the weights the run started "
                                 "with, so they cannot change on resume; keep them, or use on_exhausted repeat")
        if changes and self.processes.is_main:
            named = ", ".join(f"{s.name}" for s in self.sources)
            print(f"train: mixture ({named}) {changes[0]} (step {state['run_state']['step']}): the new mix applies from "
                  "this step on; every source continues its pass where it was", flush=True)
        saved_world = state["loader"]["world_size"]
        if saved_world == self.processes.world_size:
            _set_rng_state(state["rng"][self.processes.rank])
        else:  # N ranks' generators cannot become M ranks': each rank draws fresh ones from (seed, step, rank)
            _reseed(self.cfg.seed, self.state.step, self.processes.rank)
        if self.processes.is_main:
            changed = "" if saved_world == self.processes.world_size else (
                f"; written by {saved_world} processes, continued by {self.processes.world_size} with the same global "
                f"batch of {self.loader.global_batch}: random generators reseeded from (seed, step, rank)")
            print(f"train: resumed from {chosen} (step {self.state.step}, epoch {self.state.epoch}, "
                  f"{self.state.samples} of its samples done{changed})", flush=True)

    def _report_other_checkpoints(self) -> None:
        """Starting fresh beside checkpoints of another config: say which, and what differs."""
        for entry in storage.list_files(self.checkpoints_root):
            folder = storage.parent(entry.uri)
            if storage.basename(entry.uri) != IDENTITY_FILE or folder == storage.normalize(self.checkpoint_dir):
                continue
            if not checkpoint.candidates(folder):
                continue
            try:
                differences = identity_differences(json.loads(storage.read_text(entry.uri)),
                                                   {**self.identity, "global_batch_terms": self.global_batch_terms})
            except (ValueError, KeyError, TypeError, AttributeError):
                differences = ["an unreadable identity.json"]
            print(f"train: starting fresh: the checkpoints in {folder} are from another setup "
                  f"({'; '.join(differences) or 'unknown'}; theirs -> this run's); they are kept, and resume "
                  "when that setup runs again", flush=True)

    # -- logs on local disk, copied to an object-store run_dir ------------------------------------
    def _samples_name(self) -> str:
        return f"{SAMPLES_DIR}/rank-{self.processes.rank}.jsonl"

    def _copy_logs_to_run_dir(self) -> None:
        names = [self._samples_name()] if self.cfg.record_sample_ids else []
        if self.processes.is_main:
            names.append(METRICS_FILE)
        copy_to_run_dir(self.local_dir, self.run_dir, names)

    # -- the loop ---------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        cfg = self.cfg
        self.resume()
        self.loader.start()  # its cold start overlaps the logs' set-up below
        if self.processes.is_main:
            where = describe_locations(self.local_dir, self.run_dir, cfg.record_sample_ids)
            if where:
                print(where, flush=True)
        metrics = MetricsLog(self.local_dir, self.run_dir, self.total_steps, self.state.step, self.processes.is_main)
        samples = self._open_samples_log()
        if self.sources is not None:
            taken = self.loader.taken()
            self._passes_logged = [-(-int(n) // s.manifest.splits["train"].rows) for n, s in zip(taken, self.sources)]
            if self.processes.is_main and self.state.step == 0:
                mix = ", ".join(f"{s.name} {s.weight:g} ({s.manifest.splits['train'].rows} rows)" for s in self.sources)
                print(f"train: mixture of {mix}: epochs of {self.loader.plan.epoch_rows} samples in global batches of "
                      f"{self.loader.global_batch}; a used-up source {'starts another pass' if cfg.on_exhausted == 'repeat' else 'ends the epoch'}",
                      flush=True)
        elif self.processes.is_main and self.state.step == 0 and self.loader.left_out:
            print(f"train: each epoch trains on {self.loader.rows - self.loader.left_out} of {self.loader.rows} "
                  f"samples, whole global batches of {self.loader.global_batch}; its last {self.loader.left_out} "
                  "(other ones each epoch, the order being shuffled) are left out", flush=True)
        window = {"start": time.perf_counter(), "samples": 0, "tokens": 0, "wait": self.loader.wait_seconds}
        try:
            while self.state.step < self.total_steps:
                stream = iter(self.loader)  # the epoch's remaining batches; the reads behind it run on
                started = time.perf_counter()
                try:
                    epoch_ended = False
                    while self.state.step < self.total_steps and not epoch_ended:
                        host_batches = [next(stream) for _ in range(cfg.grad_accum_steps)]
                        micro = [to_device(b, self.device) for b in host_batches]
                        result = train_step(self.train_model, micro, self.optimizer, self.scheduler, self.scaler,
                                            self.task, self.autocast_dtype, cfg.max_grad_norm, self.state.step + 1)
                        self.last_loss = result.loss
                        epoch_ended = self.loader.batch == 0
                        self.state = RunState(self.state.step + 1, self.loader.epoch, self.loader.samples)
                        if samples is not None:
                            samples.write(json.dumps(self._sample_record(host_batches)) + "\n")
                            samples.flush()
                        if self.sources is not None:
                            self._count_source_tokens(host_batches)
                        window["samples"] += sum(b[contract.INPUT_IDS].shape[0] for b in host_batches)
                        window["tokens"] += sum(int(b[contract.ATTENTION_MASK].sum()) for b in host_batches)
                        self._after_step(result, metrics, window, epoch_ended)
                finally:
                    self.loop_seconds += time.perf_counter() - started
            val = self._evaluate_val()
            if val is not None:
                metrics.log({"step": self.state.step, **{f"val_{k}": v for k, v in val.items()}})
        finally:
            self.loader.close()
            metrics.close()
            if samples is not None:
                samples.close()
        report = stall_report(self.loader.wait_seconds, self.loop_seconds)
        if self.processes.is_main:
            print(format_stall_report(report), flush=True)
        return {"steps": self.state.step, "final_loss": self.last_loss, "input_stall": report,
                "weights_sha256_per_rank": gather(weights_sha256(self.model), self.processes),
                "sources": self.mixture_summary()}

    def _after_step(self, result: StepResult, metrics: MetricsLog, window: dict, epoch_ended: bool) -> None:
        cfg, step = self.cfg, self.state.step
        metrics.advance()
        last = step == self.total_steps
        if step % cfg.log_every == 0 or last:
            now = time.perf_counter()
            elapsed = max(now - window["start"], 1e-9)
            world = self.processes.world_size
            record = {
                "step": step, "epoch": self.state.epoch - (1 if epoch_ended else 0), "loss": round(result.loss, 6),
                "lr": self.scheduler.get_last_lr()[0], "grad_norm": round(result.grad_norm, 6),
                "samples_per_s": round(world * window["samples"] / elapsed, 1),
                "tokens_per_s": round(world * window["tokens"] / elapsed, 1),
                "input_wait_fraction": round((self.loader.wait_seconds - window["wait"]) / elapsed, 4),
            }
            if self.sources is not None:
                record.update(self._mixture_record())
            metrics.log(record, console=True)
            window.update(start=now, samples=0, tokens=0, wait=self.loader.wait_seconds)
        if cfg.eval_every and step % cfg.eval_every == 0 and not last:
            val = self._evaluate_val()
            if val is not None:
                metrics.log({"step": step, **{f"val_{k}": v for k, v in val.items()}})
        if (cfg.checkpoint_every and step % cfg.checkpoint_every == 0) or epoch_ended or last:
            self.save_checkpoint()

    # -- mixtures ---------------------------------------------------------------------------------
    def _sample_record(self, host_batches: list[Batch]) -> dict[str, Any]:
        record = {"step": self.state.step, "ids": [i for b in host_batches for i in b[contract.ID_COLUMN]]}
        if self.sources is not None:
            record["sources"] = [self.sources[int(k)].name for b in host_batches for k in b[mixture.SOURCE_COLUMN]]
        return record

    def _count_source_tokens(self, host_batches: list[Batch]) -> None:
        """This rank's tokens per source; summed over the ranks when they are logged or saved."""
        for batch in host_batches:
            per_row = batch[contract.ATTENTION_MASK].sum(dim=1, dtype=torch.int64)
            found = torch.bincount(batch[mixture.SOURCE_COLUMN], weights=per_row.double(), minlength=len(self.sources))
            self._rank_source_tokens += found

    def _reduce_source_tokens(self) -> None:
        """Collective (every rank calls it at the same steps): fold every rank's new counts in."""
        if self.sources is None:
            return
        summed = sum_over_ranks(self._rank_source_tokens.clone(), self.processes)
        self.source_tokens = [a + int(b) for a, b in zip(self.source_tokens, summed.tolist())]
        self._rank_source_tokens.zero_()

    def _mixture_record(self) -> dict[str, Any]:
        """Samples, tokens and the pass each source is on, over all ranks, since the run's start; a
        source starting another pass is said on the console."""
        self._reduce_source_tokens()
        taken = self.loader.taken()
        record = {}
        for number, source in enumerate(self.sources):
            rows = source.manifest.splits["train"].rows
            passes = -(-int(taken[number]) // rows)  # passes begun
            if passes > self._passes_logged[number] and self.processes.is_main and self._passes_logged[number]:
                print(f"train: source {source.name} started pass {passes} (its {rows} rows are used up "
                      f"{passes - 1} time(s) by step {self.state.step})", flush=True)
            self._passes_logged[number] = max(self._passes_logged[number], passes)
            record.update({f"samples_{source.name}": int(taken[number]), f"tokens_{source.name}": self.source_tokens[number],
                           f"pass_{source.name}": passes})
        return record

    def mixture_summary(self) -> dict[str, Any] | None:
        if self.sources is None:
            return None
        record = self._mixture_record()
        return {source.name: {"weight": source.weight, "samples": record[f"samples_{source.name}"],
                              "tokens": record[f"tokens_{source.name}"], "passes": record[f"pass_{source.name}"],
                              "share": record[f"samples_{source.name}"] / max(1, self.loader.position)}
                for source in self.sources}

    def _evaluate_val(self) -> dict[str, Any] | None:
        """Validation, sharded over every rank by batch index and reduced (see evaluate); the
        metrics are returned on the main process, which logs them. A mixture validates each source
        on its own val split (keys <name>_loss, ...) and reports their weighted whole as loss, ..."""
        if self.sources is None:
            datasets = [(None, self.config.dataset_dir, self.manifest)]
        else:
            datasets = [(s.name, s.dataset_dir, s.manifest) for s in self.sources]
        found: dict[str, dict[str, Any]] = {}
        for name, dataset_dir, manifest in datasets:
            if manifest.splits["val"].rows == 0:
                continue
            spec = split_spec(dataset_dir, manifest, "val", batch_size=self.config.eval.batch_size,
                              columns=TASK_COLUMNS[self.task], shuffle=False, backend=self.spec.backend,
                              verify_checksums=self.spec.verify_checksums)
            num_classes = manifest.num_labels if self.task == "classification" else None
            found[name] = evaluate(self.model, spec, self.device, self.task, self.autocast_dtype,
                                   processes=self.processes, num_classes=num_classes)
        if not found or not self.processes.is_main:
            return None
        if self.sources is None:
            return found[None]
        whole = mixture.weighted_whole(found, {s.name: s.weight for s in self.sources})
        return {**whole, **{f"{name}_{key}": value for name, result in found.items() for key, value in result.items()}}

    def _open_samples_log(self):
        """samples/rank-N.jsonl on local disk (appended), trimmed to the resumed step; the main
        process also trims the logs of ranks this run does not have (it resumed on fewer processes),
        so that every log, read together, says what trained up to this step."""
        if not self.cfg.record_sample_ids:
            return None
        if self.processes.is_main:
            self._trim_samples_of_absent_ranks()
        name = self._samples_name()
        fetch_if_missing(self.run_dir, self.local_dir, name)
        path = os.path.join(self.local_dir, *name.split("/"))
        drop_records_after(path, self.state.step)
        return open(path, "a", encoding="utf-8")

    def _trim_samples_of_absent_ranks(self) -> None:
        listed = [storage.basename(e.uri) for root in {storage.normalize(self.local_dir), storage.normalize(self.run_dir)}
                  for e in storage.list_files(storage.join(root, SAMPLES_DIR), recursive=False)]
        ranks = {int(m.group(1)) for m in map(re.compile(r"^rank-(\d+)\.jsonl$").match, listed) if m}
        for rank in sorted(r for r in ranks if r >= self.processes.world_size):
            name = f"{SAMPLES_DIR}/rank-{rank}.jsonl"
            fetch_if_missing(self.run_dir, self.local_dir, name)
            drop_records_after(os.path.join(self.local_dir, *name.split("/")), self.state.step)
            copy_to_run_dir(self.local_dir, self.run_dir, [name])
