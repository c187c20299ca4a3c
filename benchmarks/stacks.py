"""One benchmark, run once in each stack's environment, its figures printed side by side.

A benchmark that takes `--stacks petastorm,current` re-runs itself with each stack's interpreter
(`.venv/` and `.venv-current/`, made by `scripts/setup.sh STACK`) and `--figures-out FILE`; the child
prints its usual lines, prefixed `[stack]`, and writes the figures it `record`ed to FILE as JSON.
The two stacks run one after the other, never at once, so they do not share the cores.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENVIRONMENTS = {"petastorm": ROOT / ".venv", "current": ROOT / ".venv-current"}

FIGURES: dict[str, float | str] = {}  # this run's named figures, for a parent comparing stacks


def record(name: str, value: float | str) -> float | str:
    FIGURES[name] = value
    return value


def write_figures(path: str | None) -> None:
    if path:
        Path(path).write_text(json.dumps(FIGURES))


def parse_stacks(text: str) -> list[str]:
    stacks = [s for s in text.split(",") if s]
    unknown = [s for s in stacks if s not in ENVIRONMENTS]
    if unknown:
        raise SystemExit(f"unknown stack(s) {unknown}; the stacks are {sorted(ENVIRONMENTS)}")
    missing = [s for s in stacks if not (ENVIRONMENTS[s] / "bin" / "python").exists()]
    if missing:
        raise SystemExit(f"no environment for stack(s) {missing}: run scripts/setup.sh {missing[0]} first")
    return stacks


def without_stacks(argv: list[str]) -> list[str]:
    """argv less its `--stacks X` / `--stacks=X`: what each stack's run is given."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--stacks":
            skip = True
        elif not arg.startswith("--stacks="):
            kept.append(arg)
    return kept


def run_on_stacks(script: str, argv: list[str], stacks: list[str]) -> dict[str, dict[str, float | str]]:
    """Runs `script argv --figures-out F` in each stack's environment, streaming its output with a
    `[stack]` prefix; returns each stack's figures. A failing run stops the comparison."""
    figures = {}
    for stack in stacks:
        python = ENVIRONMENTS[stack] / "bin" / "python"
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            # The child's own venv/bin first, so `shardline` and spark-submit are that stack's.
            env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}",
                   "PYSPARK_PYTHON": str(python)}
            env.pop("VIRTUAL_ENV", None)
            process = subprocess.Popen([str(python), script, *argv, "--figures-out", out.name], env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for line in process.stdout:
                print(f"[{stack}] {line}", end="", flush=True)
            if process.wait():
                raise SystemExit(f"{Path(script).name} failed on the {stack} stack (rc {process.returncode})")
            figures[stack] = json.loads(Path(out.name).read_text())
    return figures


def print_side_by_side(title: str, figures: dict[str, dict[str, float | str]]) -> None:
    stacks = list(figures)
    names = list(dict.fromkeys(name for stack in stacks for name in figures[stack]))
    width = max(len(n) for n in names) if names else 10
    print(f"\n{title}")
    print(f"  {'':{width}s}  " + "  ".join(f"{s:>12s}" for s in stacks))
    for name in names:
        cells = []
        for stack in stacks:
            value = figures[stack].get(name, "-")
            if not isinstance(value, float):
                cells.append(f"{value!s:>12s}")
            else:
                cells.append(f"{value:12,.0f}" if abs(value) >= 1000 else f"{value:12.3f}" if abs(value) < 10 else f"{value:12.1f}")
        print(f"  {name:{width}s}  " + "  ".join(cells))
    sys.stdout.flush()
