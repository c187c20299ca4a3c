"""GPU throughput: a BERT-base-size classifier (12 layers, hidden 768, 12 heads) at sequence length
128 in bf16, trained through the real reader and loop. One run; prints samples/s, tokens/s, model
FLOPs utilization (MFU) and the input-stall fraction. Needs a CUDA device; not part of the tests.

    python benchmarks/bench_gpu_bert.py [--rows 200000] [--batch-size 128] [--peak-tflops 989] [--deterministic]

MFU = achieved model FLOPs / peak: per token, 6 x parameters (forward + backward of the matmuls)
plus 12 x layers x hidden x sequence length (attention scores and weighted sum), as in the PaLM paper.
--peak-tflops is the device's dense bf16 peak (H100/H200 SXM: 989; A100: 312).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(Path(__file__).resolve().parent)]

from bench_stall import train_on_synthetic  # noqa: E402

BERT_BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--deterministic", action="store_true", help="train.deterministic: its cost")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_gpu_bert.py needs a CUDA device; none is visible")
    with tempfile.TemporaryDirectory() as tmp:
        summary, seconds, parameters = train_on_synthetic(Path(tmp), args.rows, args.seq, {
            "model": "bert", "model_config": BERT_BASE, "batch_size": args.batch_size, "precision": "bf16",
            "optimizer": "adamw", "lr": 1e-4, "device": "cuda", "num_reader_workers": args.workers,
            "compile": args.compile, "deterministic": args.deterministic}, device="cuda", vocab_size=30522, files=16)
    samples = summary["steps"] * args.batch_size
    tokens_per_s = samples * args.seq / seconds
    flops_per_token = 6 * parameters + 12 * BERT_BASE["num_hidden_layers"] * BERT_BASE["hidden_size"] * args.seq
    mfu = tokens_per_s * flops_per_token / (args.peak_tflops * 1e12)
    stall = summary["input_stall"]
    kernels = "deterministic kernels" if args.deterministic else "default kernels"
    print(f"{torch.cuda.get_device_name()}: BERT-base ({parameters / 1e6:.1f} M params), seq {args.seq}, bf16, "
          f"{kernels}, batch {args.batch_size}: {summary['steps']} steps in {seconds:.1f} s (first steps included)")
    print(f"{samples / seconds:,.0f} samples/s, {tokens_per_s:,.0f} tokens/s, MFU {100 * mfu:.1f} % of "
          f"{args.peak_tflops:g} TFLOP/s; input wait {100 * stall['input_wait_fraction']:.2f} % ({stall['verdict']})")


if __name__ == "__main__":
    main()
