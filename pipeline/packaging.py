"""`shardline package`: the project's code as one zip for `spark-submit --py-files`.

Executors on a cluster import `spark_jobs` (the mapInArrow functions), `pipeline` (config, contract)
and, for completeness of the pipeline, `training`; the zip carries exactly those packages' .py files.
Entries are sorted and time-stamped with a fixed date, so the same sources give the same bytes.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pipeline", "spark_jobs", "training")
_FIXED_DATE = (2020, 1, 1, 0, 0, 0)  # zip timestamps: fixed, so the zip is reproducible


def build_package(output: str | Path, root: Path = REPO_ROOT) -> Path:
    """Write the zip to `output` (created or replaced) and return its path."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    sources = sorted(
        path for package in PACKAGES for path in (root / package).rglob("*.py") if "__pycache__" not in path.parts
    )
    missing = [p for p in PACKAGES if not (root / p / "__init__.py").exists()]
    if missing:
        raise FileNotFoundError(f"cannot package {missing}: no __init__.py under {root}")
    tmp = output.with_name(f".{output.name}.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sources:
            info = zipfile.ZipInfo(path.relative_to(root).as_posix(), date_time=_FIXED_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, path.read_bytes())
    tmp.replace(output)
    return output
