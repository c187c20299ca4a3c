import torch

from training import checkpoint


def _state(step):
    return {"step": step, "weights": torch.full((3,), float(step))}


def test_keeps_the_newest_k_and_loads_them_back(tmp_path):
    for step in (2, 4, 6, 8):
        checkpoint.save(tmp_path, step, _state(step), num_kept=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step-00000006.pt", "step-00000006.sha256", "step-00000008.pt", "step-00000008.sha256"]
    path, state = checkpoint.latest_valid(tmp_path)
    assert path.name == "step-00000008.pt" and state["step"] == 8
    assert torch.equal(state["weights"], torch.full((3,), 8.0))


def test_a_truncated_checkpoint_is_skipped_with_a_warning(tmp_path, capsys):
    checkpoint.save(tmp_path, 1, _state(1), num_kept=3)
    newest = checkpoint.save(tmp_path, 2, _state(2), num_kept=3)
    newest.write_bytes(newest.read_bytes()[:100])
    path, state = checkpoint.latest_valid(tmp_path)
    assert path.name == "step-00000001.pt" and state["step"] == 1
    warning = capsys.readouterr().err
    assert "skipping checkpoint" in warning and "step-00000002.pt does not match its sha256" in warning


def test_a_checkpoint_without_its_checksum_was_not_finished(tmp_path, capsys):
    checkpoint.save(tmp_path, 1, _state(1), num_kept=3)
    unfinished = checkpoint.save(tmp_path, 2, _state(2), num_kept=3)
    unfinished.with_suffix(".sha256").unlink()
    assert checkpoint.latest_valid(tmp_path)[1]["step"] == 1
    assert "write did not finish" in capsys.readouterr().err
    assert checkpoint.latest_valid(tmp_path / "absent") is None
