# The Spark image: the official Apache Spark 4 image plus shardline's Spark-side Python stack, the
# current stack (constraints-current.txt: Spark 4, numpy 2, a current pyarrow; scripts/stack.sh).
# It runs the standalone master and worker of docker/compose.yaml and submits the preprocess job.
#   docker build -f docker/spark.Dockerfile -t shardline-spark:0.1.0 .
# SPARK_IMAGE's Spark version must equal the pyspark constraints-current.txt pins for PYTHON_VERSION:
# the job's Python side (pip's pyspark) talks to this image's JVM, and executors unpickle what the
# driver pickled. The dataset it writes trains on either stack (README "Two stacks").
# The tag is the one apache/spark-docker gives every 4.x release (its versions.json lists
# <version>-scala2.13-java17-python3-ubuntu for 4.0.0 to 4.1.2 as of 2026-06; pyspark 4.3.0 is of
# 2026-10): not pulled here, as this machine has no Docker engine.
# The Python is not the base image's: apache/spark-docker builds every 4.x image on
# eclipse-temurin:<java>-jammy, whose python3 is Ubuntu 22.04's 3.10, and pyspark 4.3 needs 3.11
# (on 3.10 the pins fall back to Spark 4.2.1, which would not match this JVM). uv installs
# PYTHON_VERSION (a python-build-standalone build) into a venv the driver and executors use.
ARG SPARK_IMAGE=apache/spark:4.3.0-scala2.13-java17-python3-ubuntu
FROM ghcr.io/astral-sh/uv:0.13.8 AS uv
FROM ${SPARK_IMAGE}
ARG PYTHON_VERSION=3.12

# The base image runs as uid 185 (spark); installing needs root for a moment.
USER 0
WORKDIR /opt/shardline
COPY --from=uv /uv /usr/local/bin/uv
ENV UV_PYTHON_INSTALL_DIR=/opt/python \
    UV_NO_CACHE=1 \
    VIRTUAL_ENV=/opt/shardline/venv \
    PATH=/opt/shardline/venv/bin:$PATH
COPY constraints-current.txt docker/requirements-spark.txt ./
RUN uv venv --python-preference only-managed --python "$PYTHON_VERSION" "$VIRTUAL_ENV" \
    && uv pip install -c constraints-current.txt -r requirements-spark.txt
COPY pyproject.toml setup.py README.md ./
COPY pipeline ./pipeline
COPY spark_jobs ./spark_jobs
COPY training ./training
COPY configs ./configs
# --no-deps: the project's own code and `shardline` CLI, without torch (the Spark side never imports it).
# gcc builds setup.py's C extensions, the quality stage's hot loops. pip treats them as optional, so
# without a compiler the image would run their Python fallbacks, the same results several times
# slower (README "Corpus quality"): the import below fails the build instead. CC and LDSHARED name
# gcc, whatever compiler the managed Python's sysconfig recorded at its own build. gcc stays: the
# base image may have installed it itself (with python3-pip's recommends), and removing it could take
# its packages along. Its version is the base image's Ubuntu release's, hence no pin.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && CC=gcc LDSHARED="gcc -shared" uv pip install --no-deps . \
    && python -c "from spark_jobs import _english_words_c, _word_ngrams_c, _text_filters_c, _minhash_c, _lid176_c" \
    && rm -rf /var/lib/apt/lists/* \
    && python -c "import pyspark, sys; print('python', sys.version.split()[0], 'pyspark', pyspark.__version__)" \
    && mkdir -p /opt/shardline/runs \
    && chown -R 185:185 /opt/shardline
# Executors and the driver use the venv's interpreter, which has the packages above.
ENV PYSPARK_PYTHON=/opt/shardline/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/shardline/venv/bin/python
USER 185
