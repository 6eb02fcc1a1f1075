"""SQuAD fine-tuning's speed paths keep its numbers: the layers compute the real tokens only
(`unpad`), which gives the padded forward's loss and gradients to float rounding, dropout
included (the masks are drawn for the padded batch and read at the real rows)."""

import pytest
import torch
import torch.nn.functional as F

from roberta.config import RobertaConfig
from roberta.model import RobertaModel, SpanHead
from roberta.qa.predict import window_logits
from roberta.tasks.squad import SquadTask, _loss

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("version", ["1.1", "2.0"])
def test_the_unpadded_squad_loss_is_the_padded_forwards_to_rounding(version):
    torch.manual_seed(0)
    config = RobertaConfig(
        vocab_size=300, hidden_size=64, num_layers=2, num_heads=4, ffn_size=128, max_positions=80
    )
    model = RobertaModel(config)
    task = SquadTask(version)
    model.add_head(task.name, SpanHead(config))
    if version == "2.0":
        model.add_classification_head(task.answerable, 2)
    model.train()
    lengths = [60, 23, 41, 7, 60, 35]
    tokens = torch.full((len(lengths), 60), config.padding_idx)
    for row, n in enumerate(lengths):
        tokens[row, :n] = torch.randint(4, 300, (n,))
    batch = {
        "tokens": tokens,
        "start_position": torch.tensor([3, 0, 10, 2, 40, 1]),
        "end_position": torch.tensor([5, 0, 12, 4, 44, 3]),
    }

    def padded_loss():  # the loss as the padded forward computes it
        hidden = model(tokens).last_hidden_state
        start, end = window_logits(model, task.name, hidden, tokens, config.padding_idx)
        total = (
            F.cross_entropy(start, batch["start_position"], reduction="sum")
            + F.cross_entropy(end, batch["end_position"], reduction="sum")
        ) / 2
        if version == "2.0":
            answerable = batch["start_position"].gt(0).long()
            logits = model.classify(task.answerable, hidden).float()
            total = total + F.cross_entropy(logits, answerable, reduction="sum")
        return total

    results = []
    for compute in (lambda: _loss(task, config.padding_idx, model, batch)["loss"], padded_loss):
        model.zero_grad()
        torch.manual_seed(1)  # the same dropout masks
        loss = compute()
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (ours, ours_grads), (padded, padded_grads) = results
    assert ours.item() == pytest.approx(padded.item(), rel=1e-5)
    assert len(ours_grads) == len(padded_grads)
    for a, b in zip(ours_grads, padded_grads):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
