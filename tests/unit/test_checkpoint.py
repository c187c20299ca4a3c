import io
import json
import pickle

import pytest
import torch

from pipeline import storage
from training import checkpoint


def _state(step):
    return {"step": step, "weights": torch.full((3,), float(step))}


def _names(directory):
    return sorted(storage.basename(e.uri) for e in storage.list_files(directory))


def test_keeps_the_newest_k_and_loads_them_back(tmp_path):
    directory = str(tmp_path)
    for step in (2, 4, 6, 8):
        checkpoint.save(directory, step, _state(step), num_kept=2)
    assert _names(directory) == ["step-00000006.pt", "step-00000006.sha256", "step-00000008.pt", "step-00000008.sha256"]
    uri, state = checkpoint.latest_valid(directory)
    assert storage.basename(uri) == "step-00000008.pt" and state["step"] == 8
    assert torch.equal(state["weights"], torch.full((3,), 8.0))


def test_checkpoints_on_an_object_store_are_committed_by_their_checksum(s3_bucket):
    directory = f"{s3_bucket}/run/checkpoints/abc"
    for step in (1, 2, 3):
        checkpoint.save(directory, step, _state(step), num_kept=2)
    assert _names(directory) == ["step-00000002.pt", "step-00000002.sha256", "step-00000003.pt", "step-00000003.sha256"]
    storage.delete(f"{directory}/step-00000003.sha256")  # as if the run died between the two writes
    uri, state = checkpoint.latest_valid(directory)
    assert uri == f"{directory}/step-00000002.pt" and state["step"] == 2


def test_a_truncated_checkpoint_is_skipped_with_a_warning(tmp_path, capsys):
    checkpoint.save(str(tmp_path), 1, _state(1), num_kept=3)
    newest = checkpoint.save(str(tmp_path), 2, _state(2), num_kept=3)
    storage.write_bytes(newest, storage.read_bytes(newest)[:100])
    uri, state = checkpoint.latest_valid(str(tmp_path))
    assert storage.basename(uri) == "step-00000001.pt" and state["step"] == 1
    warning = capsys.readouterr().err
    assert "skipping checkpoint" in warning and "step-00000002.pt does not match its sha256" in warning


def test_a_checkpoint_without_its_checksum_was_not_finished(tmp_path, capsys):
    checkpoint.save(str(tmp_path), 1, _state(1), num_kept=3)
    unfinished = checkpoint.save(str(tmp_path), 2, _state(2), num_kept=3)
    storage.delete(checkpoint.sidecar(unfinished))
    assert checkpoint.latest_valid(str(tmp_path))[1]["step"] == 1
    assert "write did not finish" in capsys.readouterr().err
    assert checkpoint.latest_valid(str(tmp_path / "absent")) is None


class _CreatesAFile:
    """What an attacker would put in a pickle: unpickling it calls open(path, "w")."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("writer", ["torch.save", "pickle.dumps"])
def test_a_crafted_pickle_with_a_valid_checksum_is_refused_and_never_run(tmp_path, writer):
    marker = tmp_path / "the-pickle-ran"
    directory = str(tmp_path / "checkpoints")
    checkpoint.save(directory, 1, _state(1), num_kept=3)
    payload = {"run_state": {"step": 2}, "model": _CreatesAFile(str(marker))}
    if writer == "torch.save":
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        data = buffer.getvalue()
    else:
        data = pickle.dumps(payload)
    crafted = storage.join(directory, "step-00000002.pt")
    storage.write_bytes(crafted, data)
    import hashlib

    storage.write_text(checkpoint.sidecar(crafted), json.dumps(
        {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "step": 2}))

    with pytest.raises(checkpoint.UnsafeCheckpointError) as refused:
        checkpoint.latest_valid(directory)  # no quiet fall back to step 1 either: the file must be looked at
    message = str(refused.value)
    assert f"checkpoint {crafted} refused" in message and "could run code" in message
    assert "train.resume=never" in message and "weights_only=False" not in message
    assert not marker.exists()


def test_delete_all_removes_only_checkpoints(tmp_path):
    directory = str(tmp_path)
    for step in (1, 2):
        checkpoint.save(directory, step, _state(step), num_kept=3)
    storage.write_text(storage.join(directory, "identity.json"), "{}")
    assert checkpoint.delete_all(directory) == 2
    assert _names(directory) == ["identity.json"]
