"""Fault injection for the distributed-training tests (test_launchers.py), loaded by every Python
process started with this directory on PYTHONPATH. Product code has no hook: this wraps training.loop's functions from
outside, only in the training process whose RANK (set by torchrun) is SHARDLINE_FAULT_RANK.

SHARDLINE_FAULT=slow-eval: that rank's validation pass starts SHARDLINE_FAULT_SLEEP_S seconds late
(longer than train.process_group_timeout_s in the test); slow-save: its checkpoint saves take that
much longer (rank 0 is the one that saves); several modes are comma-separated. nan-loss: that rank's
training loss becomes NaN from its SHARDLINE_FAULT_STEP-th training forward pass on.
SHARDLINE_FAULT_LOG names a file that gets a line each time a fault fires.
"""
import os

_MODES = set(os.environ.get("SHARDLINE_FAULT", "").split(","))

if _MODES & {"slow-eval", "slow-save", "nan-loss"} and os.environ.get("RANK") == os.environ.get("SHARDLINE_FAULT_RANK", "0"):
    import time

    from training import checkpoint, loop

    def _note(line: str) -> None:
        with open(os.environ["SHARDLINE_FAULT_LOG"], "a") as log:
            log.write(line + "\n")

    def _delayed(function, what: str):
        def delayed(*args, **kwargs):
            seconds = float(os.environ["SHARDLINE_FAULT_SLEEP_S"])
            _note(f"rank {os.environ['RANK']}: {what} delayed {seconds} s")
            time.sleep(seconds)
            return function(*args, **kwargs)

        return delayed

    if "slow-save" in _MODES:
        checkpoint.save = _delayed(checkpoint.save, "checkpoint save")
    if "slow-eval" in _MODES:
        loop.evaluate = _delayed(loop.evaluate, "evaluation")
    if "nan-loss" in _MODES:
        _forward_loss = loop.forward_loss
        _calls = [0]

        def forward_loss(model, batch, task, reduction="mean"):
            loss, logits = _forward_loss(model, batch, task, reduction)
            if model.training:
                _calls[0] += 1
                if _calls[0] >= int(os.environ["SHARDLINE_FAULT_STEP"]):
                    _note(f"rank {os.environ['RANK']}: loss made NaN at training forward {_calls[0]}")
                    loss = loss * float("nan")
            return loss, logits

        loop.forward_loss = forward_loss
