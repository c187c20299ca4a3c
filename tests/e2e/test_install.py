"""Installing the project where there is no C compiler: setup.py's two extensions are optional, so
pip still builds and installs it, and the quality filters run their Python (and numpy) fallbacks,
which tests/unit/test_english_words.py and test_text_filters.py hold to the C's results."""
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_project_installs_without_a_c_compiler_and_filters_with_the_python(tmp_path):
    source = tmp_path / "source"  # a copy of what git tracks: no built modules, no venvs
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (REPO_ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, source / name)
    env = {**os.environ, "CC": "false"}  # every compile fails at once
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "wheels"), str(source)],
                   env=env, check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "wheels").glob("shardline-*.whl")
    assert [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith((".so", ".pyd"))] == []

    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    probe = ("from spark_jobs import english_words, text_filters\n"
             "print(english_words.__file__, english_words._english_words_c, text_filters._word_ngrams_c)\n"
             "print(english_words.spacy_english_words(\"Mr. Smith's well-known (e.g.) test.\"))")
    # -S: not this venv's site hooks, whose editable install would find the checkout's built modules;
    # its packages (numpy) as a plain directory after the installed wheel.
    path = os.pathsep.join([str(site), sysconfig.get_paths()["purelib"]])
    result = subprocess.run([sys.executable, "-S", "-c", probe], cwd=tmp_path, env={**os.environ, "PYTHONPATH": path},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    where, fallback = result.stdout.splitlines()
    assert where == f"{site / 'spark_jobs' / 'english_words.py'} None None"
    assert fallback == str(["Mr.", "Smith", "'s", "well", "-", "known", "(", "e.g.", ")", "test", "."])
