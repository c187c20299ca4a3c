"""train_step, evaluation metrics, precision and schedule, on tiny real models."""
import math

import pytest
import torch

from pipeline import contract
from pipeline.config import TrainConfig
from training.loop import build_optimizer, build_scheduler, macro_f1, resolve_precision, train_step
from training.models import MeanEmbeddingClassifier


def _model():
    torch.manual_seed(0)
    return MeanEmbeddingClassifier(vocab_size=30, embedding_dim=8, hidden_size=16, num_labels=3, pad_id=0)


def _batch(rows, seed):
    generator = torch.Generator().manual_seed(seed)
    return {
        contract.INPUT_IDS: torch.randint(1, 30, (rows, 6), generator=generator),
        contract.ATTENTION_MASK: torch.ones(rows, 6, dtype=torch.long),
        contract.LABEL: torch.randint(0, 3, (rows,), generator=generator),
    }


def _step(model, micro_batches, cfg, precision_dtype=None):
    optimizer = build_optimizer(model, cfg)
    scheduler = build_scheduler(optimizer, cfg, total_steps=10)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    return train_step(model, micro_batches, optimizer, scheduler, scaler, "classification", precision_dtype,
                      cfg.max_grad_norm, step=7)


def test_two_accumulated_half_batches_equal_one_full_batch():
    cfg = TrainConfig(optimizer="sgd", lr=0.1)
    whole = _batch(8, seed=1)
    halves = [{k: v[:4] for k, v in whole.items()}, {k: v[4:] for k, v in whole.items()}]
    one, two = _model(), _model()
    result_one, result_two = _step(one, [whole], cfg), _step(two, halves, cfg)
    assert result_one.loss == pytest.approx(result_two.loss, rel=1e-6)
    for a, b in zip(one.parameters(), two.parameters()):
        assert torch.allclose(a, b, atol=1e-6)


def test_clipping_bounds_the_update_and_reports_the_norm_before_clipping():
    cfg = TrainConfig(optimizer="sgd", lr=1.0, max_grad_norm=1e-3)
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    result = _step(model, [_batch(8, seed=2)], cfg)
    assert result.grad_norm > 1e-3
    moved = math.sqrt(sum(float(((p.detach() - b) ** 2).sum()) for p, b in zip(model.parameters(), before)))
    assert moved <= 1e-3 * 1.01  # SGD momentum is zero on the first step: the step is lr * clipped grad


def test_a_non_finite_loss_stops_the_run_naming_the_step():
    model = _model()
    with torch.no_grad():
        model.classifier[0].weight.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="training diverged at step 7"):
        _step(model, [_batch(4, seed=3)], TrainConfig())


def test_bf16_autocast_computes_in_bf16_on_cpu_and_stays_close_to_fp32():
    batch = _batch(4, seed=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _model()(batch[contract.INPUT_IDS], batch[contract.ATTENTION_MASK]).dtype == torch.bfloat16
    bf16 = _step(_model(), [batch], TrainConfig(), precision_dtype=torch.bfloat16)
    fp32 = _step(_model(), [batch], TrainConfig())
    assert bf16.loss != fp32.loss  # the step really ran in bf16 ...
    assert bf16.loss == pytest.approx(fp32.loss, rel=2e-2)  # ... to bf16's precision
    assert bf16.grad_norm == pytest.approx(fp32.grad_norm, rel=5e-2)


def test_precision_auto_is_fp32_on_cpu():
    assert resolve_precision("auto", torch.device("cpu")) is None
    assert resolve_precision("bf16", torch.device("cpu")) is torch.bfloat16
    assert resolve_precision("fp16", torch.device("cpu")) is torch.float16


@pytest.mark.parametrize("name, expected", [
    ("constant", [0.5, 1.0, 1.0, 1.0, 1.0]),
    ("linear", [0.5, 1.0, 0.75, 0.5, 0.25]),
])
def test_warmup_then_schedule(name, expected):
    cfg = TrainConfig(lr=1.0, scheduler=name, warmup_steps=2, optimizer="sgd")
    optimizer = build_optimizer(_model(), cfg)
    scheduler = build_scheduler(optimizer, cfg, total_steps=6)
    lrs = []
    for _ in range(5):
        optimizer.step()
        scheduler.step()
        lrs.append(scheduler.get_last_lr()[0])
    assert lrs == pytest.approx(expected)


def test_macro_f1_matches_a_hand_computed_value():
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    predicted = torch.tensor([0, 1, 1, 1, 0, 2])
    # class 0: tp1 fp1 fn1 -> 0.5; class 1: tp2 fp1 fn0 -> 0.8; class 2: tp1 fp0 fn1 -> 2/3
    assert macro_f1(labels, predicted) == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)


def test_fp16_step_goes_through_the_grad_scaler():
    model = _model()
    cfg = TrainConfig()
    optimizer = build_optimizer(model, cfg)
    scheduler = build_scheduler(optimizer, cfg, total_steps=10)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
    before = [p.detach().clone() for p in model.parameters()]
    result = train_step(model, [_batch(4, seed=5)], optimizer, scheduler, scaler, "classification", torch.float16, None, 1)
    assert math.isfinite(result.loss) and scaler.get_scale() == 2.0 ** 8  # finite grads: the scale is kept
    assert any(not torch.equal(p, b) for p, b in zip(model.parameters(), before))  # and the step was taken


def test_rng_states_survive_a_weights_only_checkpoint():
    import io
    import random

    import numpy as np

    from training.loop import _rng_state, _set_rng_state

    random.seed(3), np.random.seed(4), torch.manual_seed(5)
    random.gauss(0, 1), np.random.standard_normal()  # leaves a cached Gaussian in both generators' state
    buffer = io.BytesIO()
    torch.save({"rng": [_rng_state()]}, buffer)
    expected = (random.gauss(0, 1), random.random(), np.random.standard_normal(), np.random.rand(), torch.rand(2))
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    _set_rng_state(torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)["rng"][0])
    got = (random.gauss(0, 1), random.random(), np.random.standard_normal(), np.random.rand(), torch.rand(2))
    assert got[:4] == expected[:4] and torch.equal(got[4], expected[4])
