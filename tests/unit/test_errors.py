"""The error taxonomy: a ShardlineError is one line and exit 2; anything else keeps its traceback,
and a stage that crashes is reported with the end of its log and the log's path."""
import sys

import pytest

from pipeline import cli, contract, driver
from pipeline.config import ConfigError
from pipeline.inputs import InputError
from training.models import DatasetMismatchError


@pytest.mark.parametrize("error", [ConfigError, InputError, contract.DatasetNotReadyError, contract.DatasetConflictError,
                                   driver.StageOrderError, DatasetMismatchError], ids=lambda e: e.__name__)
def test_every_user_error_reaches_the_user_as_one_line_and_exit_2(error, capsys):
    def fail():
        raise error("what went wrong, and what to do")

    assert cli._guarded("run", fail) == 2
    assert capsys.readouterr().err == "shardline run: error: what went wrong, and what to do\n"


def test_a_user_error_is_one_line_and_exit_2(capsys):
    def fail():
        raise ConfigError("config key train.lr: must be positive")

    assert cli._guarded("train", fail) == 2
    assert capsys.readouterr().err == "shardline train: error: config key train.lr: must be positive\n"


@pytest.mark.parametrize("error", [ValueError("a library's bug"), KeyError("x"), RuntimeError("boom")])
def test_other_exceptions_keep_their_traceback(error):
    def fail():
        raise error

    with pytest.raises(type(error)):  # not swallowed into a one-line message: the traceback shows
        cli._guarded("train", fail)


def test_a_crashing_stage_shows_its_log_tail_and_path(tmp_path, capsys):
    log = tmp_path / "logs" / "train.log"
    command = [sys.executable, "-c", "import json; json.loads('{broken')"]
    with pytest.raises(driver.StageFailed) as raised:
        driver.run_logged("train", command, log)
    assert raised.value.code == 1
    assert str(raised.value) == f"train failed with exit code 1; full log: {log}"
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "json.decoder.JSONDecodeError" in err
    assert "Traceback (most recent call last)" in log.read_text()


def test_a_stage_user_error_is_not_repeated_as_a_log_tail(tmp_path, capsys):
    log = tmp_path / "logs" / "preprocess.log"
    command = [sys.executable, "-c", "import sys; print('preprocess: error: data.input x matches no files', "
                                     "file=sys.stderr); sys.exit(2)"]
    with pytest.raises(driver.StageFailed) as raised:
        driver.run_logged("preprocess", command, log)
    assert str(raised.value) == f"preprocess stopped on the error above; full log: {log}"
    assert capsys.readouterr().err == "preprocess: error: data.input x matches no files\n"  # shown once
