# The Spark image: the official Apache Spark 4 image plus shardline's Spark-side Python stack, the
# current stack (constraints-current.txt: Spark 4, numpy 2, a current pyarrow; scripts/stack.sh).
# It runs the standalone master and worker of docker/compose.yaml and submits the preprocess job.
#   docker build -f docker/spark.Dockerfile -t shardline-spark:0.1.0 .
# SPARK_IMAGE's Spark version must equal constraints-current.txt's pyspark: the job's Python side
# (pip's pyspark) talks to this image's JVM, and executors unpickle what the driver pickled. The
# dataset it writes trains on either stack (README "Two stacks").
# The tag is the one apache/spark-docker gives every 4.x release (its versions.json lists
# <version>-scala2.13-java17-python3-ubuntu for 4.0.0 to 4.1.2 as of 2026-06; pyspark 4.3.0 is of
# 2026-10): not pulled here, as this machine has no Docker engine.
ARG SPARK_IMAGE=apache/spark:4.3.0-scala2.13-java17-python3-ubuntu
FROM ${SPARK_IMAGE}

# The base image runs as uid 185 (spark); installing needs root for a moment.
USER 0
WORKDIR /opt/shardline
COPY constraints-current.txt docker/requirements-spark.txt ./
RUN pip3 install --no-cache-dir -c constraints-current.txt -r requirements-spark.txt
COPY pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY spark_jobs ./spark_jobs
COPY training ./training
COPY configs ./configs
# --no-deps: the project's own code and `shardline` CLI, without torch (the Spark side never imports it).
RUN pip3 install --no-cache-dir --no-deps . \
    && mkdir -p /opt/shardline/runs \
    && chown -R 185:185 /opt/shardline
# Executors and the driver use the interpreter that has the packages above.
ENV PYSPARK_PYTHON=python3 \
    PYSPARK_DRIVER_PYTHON=python3
USER 185
