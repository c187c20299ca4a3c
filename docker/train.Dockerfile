# The CUDA training image: an official PyTorch CUDA runtime image plus the pinned stack and shardline.
#   docker build -f docker/train.Dockerfile -t shardline-train:0.1.0 .
# PYTORCH_IMAGE's torch must equal constraints.txt's torch (pip then keeps the image's CUDA build:
# `torch==2.13.0` is satisfied by `2.13.0+cu128`).
ARG PYTORCH_IMAGE=pytorch/pytorch:2.13.0-cuda12.8-cudnn9-runtime
FROM ${PYTORCH_IMAGE}

# No JRE: training reads the Parquet shards through Petastorm without a JVM.
WORKDIR /opt/shardline
COPY constraints.txt pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY spark_jobs ./spark_jobs
COPY training ./training
COPY configs ./configs
RUN pip install --no-cache-dir -c constraints.txt . \
    && python -c "import torch, petastorm, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda)" \
    && useradd --create-home --uid 185 shardline \
    && mkdir -p /opt/shardline/runs \
    && chown -R 185:185 /opt/shardline
# uid 185, as in the Spark image: both write into the same run_dir on the shared volume.
USER 185
ENTRYPOINT ["shardline"]
CMD ["--help"]
