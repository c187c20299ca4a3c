"""Installing the project where there is no C compiler: setup.py's extensions are optional, so pip
still builds and installs it, the quality filters and MinHash run their Python (and numpy)
fallbacks and fasttext predicts the language; tests/unit/test_english_words.py,
test_text_filters.py, test_minhash.py and test_lid176.py hold those to the C's results."""
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
    probe = ("from spark_jobs import english_words, lid176, minhash, text_filters\n"
             "print(english_words.__file__, english_words._english_words_c, text_filters._word_ngrams_c,\n"
             "      text_filters._text_filters_c, minhash._minhash_c, lid176._lid176_c)\n"
             "print(english_words.spacy_english_words(\"Mr. Smith's well-known (e.g.) test.\"))\n"
             "from pipeline.config import LanguageConfig\n"
             "from spark_jobs import language\n"
             "found = language.LanguageIdentifier(LanguageConfig(keep=['de'])).identify('Der Bericht kommt im Mai.')\n"
             "print(type(language._model()).__name__, found[0])\n"
             "from pipeline.config import QualityConfig\n"
             "from spark_jobs.text_filters import TextFilters\n"
             "print(TextFilters(QualityConfig(gopher_quality={}, c4={})).removal_reason('Too short.'))")
    # -S: not this venv's site hooks, whose editable install would find the checkout's built modules;
    # its packages (numpy) as a plain directory after the installed wheel.
    path = os.pathsep.join([str(site), sysconfig.get_paths()["purelib"]])
    result = subprocess.run([sys.executable, "-S", "-c", probe], cwd=tmp_path, env={**os.environ, "PYTHONPATH": path},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    where, fallback, language, filtered = result.stdout.splitlines()
    assert where == f"{site / 'spark_jobs' / 'english_words.py'} None None None None None"
    assert fallback == str(["Mr.", "Smith", "'s", "well", "-", "known", "(", "e.g.", ")", "test", "."])
    assert language == "_FastTextPredictor de"
    assert filtered == "gopher_quality.short_doc"  # the rules in Python
