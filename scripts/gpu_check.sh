#!/usr/bin/env bash
# The GPU machine's checks, one run (not part of CI; CI has no GPU). The machine is training-only, as
# a cluster's GPU image is: Python 3.12, a CUDA torch, numpy 2, a current pyarrow, no Spark, no
# Petastorm. Before the run, here:
#   .whl/  wheels for what that machine lacks (pydantic and its parts), built for its Python;
#   .gpu/  dataset/, tokenizer/ and config.resolved.yaml of a run built on the CPU machine by Spark
#          (e.g. `python -m pipeline.demo --run-dir runs/gpu-src`, then copy those three).
# It runs (1) the unit tier, where `train.device: auto` means CUDA, (2) that Spark-built dataset
# trained on CUDA by a BERT classifier in bf16: two straight runs and one stopped and resumed, compared
# bitwise, with default and with deterministic kernels, and (3) bench_gpu_bert.py with each.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import sys, torch, pyarrow, numpy, transformers, pydantic
print('python', sys.version.split()[0], 'torch', torch.__version__, 'pyarrow', pyarrow.__version__, 'numpy',
      numpy.__version__, 'transformers', transformers.__version__, 'pydantic', pydantic.__version__,
      torch.cuda.get_device_name())"

echo "== 1. unit tier (train.device auto = cuda here)"
start=$SECONDS
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 8 -rf tests/unit > "$OUT/unit.log" 2>&1
echo "unit tier: exit $? in $((SECONDS - start)) s"; tail -40 "$OUT/unit.log"

echo "== 2. a Spark-built dataset on CUDA: BERT classifier, bf16; two straight runs, and a run stopped at"
echo "   step 40 and resumed, with default kernels and with train.deterministic"
bert=(--config .gpu/config.resolved.yaml --set train.device=cuda --set train.model=bert
      --set 'train.model_config={"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 1024}'
      --set train.optimizer=adamw --set train.lr=0.0003 --set train.epochs=3 --set train.checkpoint_every=20)
compare() {
  python3 -c "import sys; from safetensors.torch import load_file
a, b = (load_file(f'{d}/model/model.safetensors') for d in sys.argv[1:3])
diff = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
print(f'{sys.argv[1]} vs {sys.argv[2]}: {sum(bool((a[k] == b[k]).all()) for k in a)} of {len(a)} tensors equal, max abs diff {diff:.3g}')" "$@"
}
start=$SECONDS
for kernels in default deterministic; do
  flag=(--set "train.deterministic=$([ $kernels = deterministic ] && echo true || echo false)")
  for run in straight-1 straight-2 resumed; do
    dir=/tmp/gpu-$kernels-$run; rm -rf "$dir"; mkdir -p "$dir"; cp -r .gpu/dataset .gpu/tokenizer "$dir/"
  done
  timeout 90 python3 -m training.train "${bert[@]}" "${flag[@]}" --set run_dir=/tmp/gpu-$kernels-straight-1 2>&1 | tail -2
  timeout 90 python3 -m training.train "${bert[@]}" "${flag[@]}" --set run_dir=/tmp/gpu-$kernels-straight-2 2>&1 | tail -1
  timeout 90 python3 -m training.train "${bert[@]}" "${flag[@]}" --set run_dir=/tmp/gpu-$kernels-resumed --set train.max_steps=40 2>&1 | tail -1
  timeout 90 python3 -m training.train "${bert[@]}" "${flag[@]}" --set run_dir=/tmp/gpu-$kernels-resumed 2>&1 | grep -E "resumed from|steps, final"
  compare /tmp/gpu-$kernels-straight-1 /tmp/gpu-$kernels-straight-2
  compare /tmp/gpu-$kernels-straight-1 /tmp/gpu-$kernels-resumed
done
timeout 60 python3 -m training.evaluate "${bert[@]}" --set run_dir=/tmp/gpu-deterministic-resumed 2>&1 | tail -2
echo "bert on cuda: $((SECONDS - start)) s"

echo "== 3. bench_gpu_bert.py, default kernels, then deterministic ones"
timeout 100 python3 benchmarks/bench_gpu_bert.py --rows 60000 2>&1 | tail -2
timeout 100 python3 benchmarks/bench_gpu_bert.py --rows 60000 --deterministic 2>&1 | tail -2
