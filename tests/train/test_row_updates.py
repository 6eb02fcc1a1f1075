"""The token embedding updated by rows (`optim.AdamW` with a sparse gradient) against torch's
fused AdamW on the dense gradient: the same parameters and state to the last bit, across steps
whose rows come and go, a learning rate that changes, and a state_dict saved and loaded between
steps (the rows with state read back from it)."""

import pytest
import torch

from roberta.train.config import OptimSection
from roberta.train.optim import AdamW, row_updates

pytestmark = pytest.mark.usefixtures("one_thread")


def embedding_model(weight: torch.Tensor, sparse: bool) -> torch.nn.Module:
    model = torch.nn.Sequential(torch.nn.Embedding(*weight.shape, padding_idx=1, sparse=sparse))
    model[0].weight.data.copy_(weight)
    return model


def optimizer(model: torch.nn.Module) -> AdamW:
    return AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.1, fused=True)


def test_row_updates_equal_the_dense_fused_update_across_steps_and_a_reload():
    torch.manual_seed(0)
    weight = torch.randn(997, 48) * 0.05
    dense, rows = embedding_model(weight, False), embedding_model(weight, True)
    dense_opt, rows_opt = optimizer(dense), optimizer(rows)
    for step in range(7):
        # Batches look up a growing range of ids, with repeats and padding (id 1).
        tokens = torch.randint(0, 50 + 60 * step, (6, 11))
        tokens[:, -2:] = 1
        upstream = torch.randn(6, 11, 48)
        for model, opt in ((dense, dense_opt), (rows, rows_opt)):
            for group in opt.param_groups:
                group["lr"] = 1e-3 * (step + 1) / 7
            (model(tokens) * upstream).sum().backward()
            assert model[0].weight.grad.is_sparse == (model is rows)
            opt.step()
            opt.zero_grad(set_to_none=True)
        if step == 3:  # as a resumed run starts: a new optimizer from the saved state
            saved = rows_opt.state_dict()
            rows_opt = optimizer(rows)
            rows_opt.load_state_dict(saved)
        a, b = dense_opt.state[dense[0].weight], rows_opt.state[rows[0].weight]
        assert torch.equal(dense[0].weight, rows[0].weight)
        assert all(torch.equal(a[k], b[k]) for k in ("step", "exp_avg", "exp_avg_sq"))
    assert not torch.equal(dense[0].weight, weight)


def test_row_updates_only_where_the_dense_update_would_sum_the_same():
    fused = OptimSection()
    assert row_updates(True, fused, 1, "fp32") and row_updates(True, fused, 1, "bf16")
    assert not row_updates(False, fused, 1, "fp32")  # the loss reads the tied masked-LM head
    assert not row_updates(True, fused, 2, "fp32")  # DDP/FSDP reduce dense gradients
    assert not row_updates(True, OptimSection(clip_norm=1.0), 1, "fp32")
    assert not row_updates(True, fused, 1, "fp16")
    assert not row_updates(True, OptimSection(implementation="foreach"), 1, "fp32")
    assert not row_updates(True, fused, 1, "bf16", "cuda")  # its kernel's decay not checked to the bit
