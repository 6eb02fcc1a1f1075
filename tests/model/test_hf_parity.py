"""Model-level parity with HF transformers (the test oracle): every hidden state and the LM logits.

A randomly initialised HF RobertaForMaskedLM is imported into ours and ours is exported back into
HF; both directions must agree within 1e-5 in fp32 eval mode on a padded batch of unequal
lengths. HF runs its default attention (sdpa) and, for the tiny shape, also eager.
"""

import pytest
import torch
import transformers

from hf_fixtures import hf_config, padded_batch, random_hf
from roberta.convert import export_hf, read_hf

TOLERANCE = 1e-5
SHAPES = {
    "tiny": dict(num_hidden_layers=4, hidden_size=512, num_attention_heads=8, intermediate_size=2048),
    "base-width-2-layers": dict(
        num_hidden_layers=2, hidden_size=768, num_attention_heads=12, intermediate_size=3072
    ),
}


@torch.no_grad()
def hf_outputs(hf, tokens: torch.Tensor) -> list[torch.Tensor]:
    out = hf(input_ids=tokens, attention_mask=tokens.ne(1).long(), output_hidden_states=True)
    return [*out.hidden_states, out.logits]


@torch.no_grad()
def our_outputs(model, tokens: torch.Tensor) -> list[torch.Tensor]:
    out = model(tokens, return_all_hiddens=True)
    return [*out.hidden_states, model.lm_logits(out.last_hidden_state)]


def assert_close(ours: list[torch.Tensor], theirs: list[torch.Tensor]) -> None:
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape, i
        assert (a - b).abs().max().item() <= TOLERANCE, f"output {i} differs by {(a - b).abs().max().item()}"


@pytest.mark.parametrize("shape", SHAPES)
def test_hf_masked_lm_import_and_export_match_transformers(shape, tmp_path):
    hf = random_hf(transformers.RobertaForMaskedLM, hf_config(SHAPES[shape]))
    hf.save_pretrained(tmp_path / "hf")
    tokens = padded_batch(1000)
    expected = hf_outputs(hf, tokens)
    assert len(expected) == SHAPES[shape]["num_hidden_layers"] + 2

    model, tokenizer = read_hf(tmp_path / "hf")
    assert tokenizer is None and not model.training
    assert_close(our_outputs(model, tokens), expected)

    export_hf(tmp_path / "back", model)
    reloaded = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "back").eval()
    assert type(reloaded).__name__ == "RobertaForMaskedLM"
    assert_close(hf_outputs(reloaded, tokens), expected)


def test_tiny_parity_holds_with_eager_attention(tmp_path):
    hf = random_hf(transformers.RobertaForMaskedLM, hf_config(SHAPES["tiny"], attn_implementation="eager"))
    hf.save_pretrained(tmp_path / "hf")
    tokens = padded_batch(1000, lengths=(9, 16, 1))
    assert_close(our_outputs(read_hf(tmp_path / "hf")[0], tokens), hf_outputs(hf, tokens))


def test_in_training_dropout_gives_hfs_step(tmp_path):
    """Dropout on, the same seed: our training forward and its gradients are HF's to rounding
    (the same random stream: another mask moves the logits by O(1))."""
    dropout = dict(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    hf = random_hf(transformers.RobertaForMaskedLM, hf_config(SHAPES["tiny"], **dropout))
    hf.save_pretrained(tmp_path / "hf")
    model, _ = read_hf(tmp_path / "hf")
    model.train(), hf.train()
    tokens = padded_batch(1000, lengths=(12, 12, 12))  # no padding: both run attention unmasked
    logits = []
    for run in (
        lambda: model.lm_logits(model(tokens).last_hidden_state),
        lambda: hf(input_ids=tokens).logits,
    ):
        torch.manual_seed(7)
        logits.append(run())
        logits[-1].square().mean().backward()
    ours_grad, hf_grad = (
        model.layers[0].fc1.weight.grad,
        hf.roberta.encoder.layer[0].intermediate.dense.weight.grad,
    )
    assert_close([logits[0]], [logits[1]])
    torch.testing.assert_close(ours_grad, hf_grad, rtol=1e-4, atol=1e-7)
    torch.manual_seed(8)  # another seed, another mask: the check above could not pass by accident
    assert (model.lm_logits(model(tokens).last_hidden_state) - logits[1]).abs().max() > 0.1
