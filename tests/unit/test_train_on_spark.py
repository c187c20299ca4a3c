"""The Spark launcher's retry of a rendezvous whose port another process took first."""
import pytest

from spark_jobs.train_on_spark import ERROR_PREFIX, retry_taken_ports

# The tail of TorchDistributor's error when torchrun could not bind the port it was given (CI, Spark 3.5).
PORT_TAKEN_OUTPUT = ("TorchDistributor failed during training. torch.distributed.DistNetworkError: The server socket "
                     "has failed to listen on any local network address. port: 56799, useIpv6: false, code: -98, "
                     "name: EADDRINUSE, message: address already in use")


def _attempts(*outcomes):
    """A run() that raises or returns each outcome in turn, counting its calls."""
    calls = []

    def run():
        outcome = outcomes[len(calls)]
        calls.append(outcome)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome
    return run, calls


def test_a_taken_port_is_retried_and_said(capsys):
    run, calls = _attempts(RuntimeError(PORT_TAKEN_OUTPUT), RuntimeError(PORT_TAKEN_OUTPUT), "runs/model")
    assert retry_taken_ports(run) == "runs/model" and len(calls) == 3
    assert capsys.readouterr().out.count("the rendezvous port was taken before torchrun bound it") == 2


def test_other_failures_and_user_errors_are_not_retried():
    run, calls = _attempts(RuntimeError("TorchDistributor failed during training. ValueError: boom"), "unused")
    with pytest.raises(RuntimeError, match="boom"):
        retry_taken_ports(run)
    user_error = RuntimeError(f"{PORT_TAKEN_OUTPUT}\n{ERROR_PREFIX}training diverged at step 3")
    run, calls = _attempts(user_error, "unused")
    with pytest.raises(RuntimeError, match="diverged"):
        retry_taken_ports(run)
    assert len(calls) == 1


def test_the_last_attempt_s_failure_is_raised():
    run, calls = _attempts(*[RuntimeError(PORT_TAKEN_OUTPUT)] * 3)
    with pytest.raises(RuntimeError, match="EADDRINUSE"):
        retry_taken_ports(run, attempts=3)
    assert len(calls) == 3
