# The CUDA training image: an official PyTorch CUDA runtime image plus one of shardline's stacks.
#   docker build -f docker/train.Dockerfile -t shardline-train:0.1.0 .
#   docker build -f docker/train.Dockerfile --build-arg STACK=petastorm -t shardline-train:0.1.0 .
# STACK=current (the default: numpy 2, a current pyarrow, reader.backend pyarrow) or petastorm
# (Petastorm the default reader; numpy 1.26, pyarrow 14; the image's Python must be 3.10-3.12).
# PYTORCH_IMAGE's torch must equal both constraints files' torch (pip then keeps the image's CUDA
# build: `torch==2.13.0` is satisfied by `2.13.0+cu128`).
ARG PYTORCH_IMAGE=pytorch/pytorch:2.13.0-cuda12.8-cudnn9-runtime
FROM ${PYTORCH_IMAGE}
ARG STACK=current

# No JRE: training reads the Parquet shards without a JVM, on either stack.
WORKDIR /opt/shardline
COPY constraints.txt constraints-current.txt pyproject.toml setup.py README.md ./
COPY pipeline ./pipeline
COPY spark_jobs ./spark_jobs
COPY training ./training
COPY configs ./configs
RUN if [ "$STACK" = petastorm ]; then pip install --no-cache-dir -c constraints.txt ".[petastorm]"; \
    else pip install --no-cache-dir -c constraints-current.txt .; fi \
    && python -c "import torch, transformers, training.backends as b; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'reader', b.resolve_backend('auto'))" \
    && useradd --create-home --uid 185 shardline \
    && mkdir -p /opt/shardline/runs \
    && chown -R 185:185 /opt/shardline
# uid 185, as in the Spark image: both write into the same run_dir on the shared volume.
USER 185
ENTRYPOINT ["shardline"]
CMD ["--help"]
