"""The model's own properties, independent of any foreign implementation."""

import math

import pytest
import torch

from roberta import RobertaConfig, RobertaModel, UserError
from roberta.model import dropout, make_positions
from roberta.tasks.pretrain import sinusoidal_positions

MICRO = RobertaConfig(
    vocab_size=100, hidden_size=32, num_layers=2, num_heads=4, ffn_size=64, max_positions=34
)


def test_presets_have_the_published_shapes():
    shapes = {
        name: (c.num_layers, c.hidden_size, c.num_heads, c.ffn_size)
        for name in ("tiny", "medium", "base", "large")
        for c in [RobertaConfig.preset(name)]
    }
    assert shapes == {
        "tiny": (4, 512, 8, 2048),
        "medium": (8, 512, 8, 2048),
        "base": (12, 768, 12, 3072),
        "large": (24, 1024, 16, 4096),
    }
    base = RobertaConfig.preset("base")
    assert (base.vocab_size, base.max_positions, base.padding_idx, base.layer_norm_eps) == (
        50265,
        514,
        1,
        1e-5,
    )


def test_base_parameter_count_matches_the_paper():
    model = RobertaModel(RobertaConfig.preset("base"))
    assert round(model.num_parameters() / 1e6) == 125


def test_unknown_preset_and_bad_shape_are_user_errors():
    with pytest.raises(UserError, match="unknown model preset 'huge'"):
        RobertaConfig.preset("huge")
    with pytest.raises(UserError, match="not divisible"):
        RobertaConfig(hidden_size=30, num_heads=4)


def test_config_round_trips_through_json(tmp_path):
    MICRO.save(tmp_path / "config.json")
    assert RobertaConfig.load(tmp_path / "config.json") == MICRO
    (tmp_path / "bad.json").write_text('{"hidden_size": 32,\n "colour": 1}')
    with pytest.raises(UserError, match="unknown field"):
        RobertaConfig.load(tmp_path / "bad.json")


def test_positions_skip_padding_and_start_after_padding_idx():
    tokens = torch.tensor([[0, 5, 6, 2], [0, 7, 2, 1]])
    assert make_positions(tokens, padding_idx=1).tolist() == [[2, 3, 4, 5], [2, 3, 4, 1]]


def test_initialisation_zeroes_padding_rows_and_biases():
    model = RobertaModel(MICRO)
    assert model.embed_tokens.weight[1].abs().sum() == 0
    assert model.embed_positions.weight[1].abs().sum() == 0
    assert model.layers[0].fc1.bias.abs().sum() == 0
    assert 0.015 < model.layers[0].fc1.weight.std().item() < 0.025
    assert model.lm_head.weight is model.embed_tokens.weight


def test_sinusoidal_positions_start_the_table_as_sines_at_the_init_scale():
    weight = torch.randn(34, 64)
    sinusoidal_positions(weight, padding_idx=1, std=0.05)
    assert weight[:2].abs().sum() == 0  # the row before padding and padding's own: never addressed
    first = weight[2]  # position 0 (tokens' positions start after padding_idx)
    assert first[0::2].abs().max() == 0 and torch.allclose(first[1::2], torch.full((32,), 0.05 * 2**0.5))
    # position 5, the fastest frequency (1 radian per position) and the slowest (10000^(-62/64))
    assert weight[7, 0].item() == pytest.approx(0.05 * 2**0.5 * math.sin(5), rel=1e-5)
    assert weight[7, 63].item() == pytest.approx(0.05 * 2**0.5 * math.cos(5 * 10000 ** (-62 / 64)), rel=1e-5)
    assert weight[2:].pow(2).mean().sqrt().item() == pytest.approx(0.05, rel=0.02)
    distances = torch.cdist(weight[2:], weight[2:])
    assert distances[0, 1] < distances[0, 8] < distances[0, 31]  # near positions start near


def test_padding_does_not_change_real_tokens_outputs():
    model = RobertaModel(MICRO).eval()
    short = torch.tensor([[0, 5, 6, 2]])
    padded = torch.tensor([[0, 5, 6, 2, 1, 1]])
    a = model(short).last_hidden_state
    b = model(padded).last_hidden_state[:, :4]
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_all_hiddens_layout_ends_with_the_last_state():
    model = RobertaModel(MICRO).eval()
    out = model(torch.tensor([[0, 5, 6, 2]]), return_all_hiddens=True)
    assert len(out.hidden_states) == MICRO.num_layers + 1
    assert torch.equal(out.hidden_states[-1], out.last_hidden_state)
    assert model(torch.tensor([[0, 5, 6, 2]])).hidden_states is None


def test_lm_logits_on_selected_positions_equal_the_full_logits_there():
    model = RobertaModel(MICRO).eval()
    tokens = torch.tensor([[0, 5, 6, 7, 2], [0, 8, 9, 2, 1]])
    hidden = model(tokens).last_hidden_state
    selected = torch.tensor([[False, True, False, True, False], [False, False, True, False, False]])
    torch.testing.assert_close(model.lm_logits(hidden, selected), model.lm_logits(hidden)[selected])
    assert model.lm_logits(hidden, selected).shape == (3, MICRO.vocab_size)


def test_selecting_first_gives_the_full_forwards_first_position_dropout_and_gradients_included():
    """A classification head reads `<s>` only; the last layer computing nothing else must give the
    same logits and gradients, in training (dropout on: the same random stream) as in eval."""
    torch.manual_seed(0)
    model = RobertaModel(MICRO)
    model.add_classification_head("cls", num_classes=3)
    tokens = torch.tensor([[0, 5, 6, 7, 8, 2], [0, 9, 2, 1, 1, 1]])

    def run(first: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        model.zero_grad(set_to_none=True)
        torch.manual_seed(1)
        hidden = model(tokens, select="first" if first else None).last_hidden_state
        logits = model.classify("cls", hidden)
        logits.square().sum().backward()
        grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
        return logits.detach(), grads, torch.rand(4)  # the stream after the step

    for training in (True, False):
        model.train(training)
        full, first = run(False), run(True)
        torch.testing.assert_close(first[0], full[0], atol=1e-6, rtol=1e-5)
        assert first[1].keys() == full[1].keys()
        for name in full[1]:
            torch.testing.assert_close(first[1][name], full[1][name], atol=1e-6, rtol=1e-5, msg=name)
        assert torch.equal(first[2], full[2])
    assert model(tokens, select="first").last_hidden_state.shape == (2, 1, MICRO.hidden_size)
    with pytest.raises(UserError, match="select='last'"):
        model(tokens, select="last")


def test_select_gives_the_full_forwards_selected_positions_dropout_and_gradients_included():
    """The masked-LM loss reads the masked positions only; the last layer computing nothing else
    must give the same logits and gradients, in training (dropout on: the same random stream) as
    in eval, with sequences selecting different numbers of positions, padded or unpadded."""
    torch.manual_seed(0)
    model = RobertaModel(MICRO)
    tokens = torch.tensor([[0, 5, 6, 7, 8, 2], [0, 9, 10, 11, 2, 1]])
    select = torch.tensor(
        [[False, True, False, True, True, False], [False, False, True, False, False, False]]
    )
    targets = torch.tensor([3, 4, 5, 6])

    def run(
        selecting: bool, unpad: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        model.zero_grad(set_to_none=True)
        torch.manual_seed(1)
        if selecting:
            hidden = model(tokens, select=select, unpad=unpad).last_hidden_state
        else:
            hidden = model(tokens).last_hidden_state[select]
        logits = model.lm_logits(hidden)
        torch.nn.functional.cross_entropy(logits, targets).backward()
        grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
        return logits.detach(), grads, torch.rand(4)  # the stream after the step

    for training, unpad in ((True, False), (True, True), (False, False), (False, True)):
        model.train(training)
        full, part = run(False), run(True, unpad)
        assert part[0].shape == (4, MICRO.vocab_size)
        torch.testing.assert_close(part[0], full[0], atol=1e-6, rtol=1e-5)
        assert part[1].keys() == full[1].keys()
        for name in full[1]:
            torch.testing.assert_close(part[1][name], full[1][name], atol=1e-6, rtol=1e-5, msg=name)
        assert torch.equal(part[2], full[2])
    with pytest.raises(UserError, match="only real"):
        model(tokens, select=tokens.eq(1), unpad=True)


@pytest.mark.parametrize("training", [False, True], ids=["eval", "training"])
def test_unpad_gives_the_padded_forwards_real_positions_zeros_at_padding_and_the_same_gradients(training):
    """`unpad` computes the real tokens only: every layer's output (and the first-only output, and
    the gradients of a loss on real positions) must be the padded forward's, in training too
    (dropout on: the masks drawn for the padded batch, so the random stream is the same)."""
    torch.manual_seed(0)
    model = RobertaModel(MICRO).train(training)
    model.add_classification_head("cls", num_classes=3)
    tokens = torch.tensor([[0, 5, 6, 7, 8, 2], [0, 9, 2, 1, 1, 1], [0, 2, 1, 1, 1, 1]])
    real = tokens.ne(MICRO.padding_idx)
    direction = torch.randn(MICRO.hidden_size)  # a LayerNorm output's square sum would be flat

    def run(unpad: bool) -> tuple[list[torch.Tensor], torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        model.zero_grad(set_to_none=True)
        torch.manual_seed(1)
        out = model(tokens, return_all_hiddens=True, unpad=unpad)
        first = model(tokens, select="first", unpad=unpad).last_hidden_state
        (
            (out.last_hidden_state[real] @ direction).square().sum()
            + model.classify("cls", first).square().sum()
        ).backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        return (
            [h.detach() for h in out.hidden_states],
            first.detach(),
            grads,
            torch.rand(4),
        )  # the stream after

    padded, unpadded = run(False), run(True)
    assert len(unpadded[0]) == MICRO.num_layers + 1
    for full, part in zip(padded[0], unpadded[0]):
        assert part.shape == full.shape
        torch.testing.assert_close(part[real], full[real], atol=1e-6, rtol=1e-5)
    assert all(h[~real].eq(0).all() for h in unpadded[0][1:])  # the layers never computed padding
    torch.testing.assert_close(unpadded[1], padded[1], atol=1e-6, rtol=1e-5)
    assert unpadded[2].keys() == padded[2].keys()
    for name, grad in padded[2].items():
        scale = grad.abs().max().item()  # rounding grows with it; the sums are orders apart in size
        torch.testing.assert_close(
            unpadded[2][name], grad, atol=1e-6 * scale, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}"
        )
    assert torch.equal(unpadded[3], padded[3])
    torch.manual_seed(2)
    unpadded_only = model(tokens[:1], unpad=True).last_hidden_state  # no padding: the plain forward
    torch.manual_seed(2)
    assert torch.equal(unpadded_only, model(tokens[:1]).last_hidden_state)


def test_heads_are_added_used_and_removed_by_name():
    model = RobertaModel(MICRO).eval()
    model.add_classification_head("sst2", num_classes=2)
    hidden = model(torch.tensor([[0, 5, 2]])).last_hidden_state
    assert model.classify("sst2", hidden).shape == (1, 2)
    model.remove_head("sst2")
    with pytest.raises(UserError, match="unknown head 'sst2'"):
        model.classify("sst2", hidden)


def test_too_long_input_is_refused_with_the_limit():
    model = RobertaModel(MICRO)
    with pytest.raises(UserError, match="exceeds the model's 32 positions"):
        model(torch.zeros(1, 33, dtype=torch.long))


def test_bf16_dropout_masks_drop_p_of_each_half_keep_the_rest_scaled_and_follow_the_seed():
    """Under CPU autocast the masks come from two 15-bit integers per 31-bit draw: each half must drop
    at p' = round(p x 32768) / 32768 (within 5 sigma over a million positions), what it keeps must be
    exactly x / (1 - p'), and a seed must give the same masks."""
    x = torch.ones(2000, 500)
    module = torch.nn.Dropout(0.1).train()
    p_prime = round(0.1 * 32768) / 32768
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.manual_seed(3)
        y = dropout(x, module)
        torch.manual_seed(3)
        again = dropout(x, module)
    assert y.dtype == torch.float32
    assert torch.equal(y, again)
    assert set(y.unique().tolist()) == {0.0, torch.tensor(1 / (1 - p_prime)).item()}  # in fp32
    sigma = math.sqrt(p_prime * (1 - p_prime) / (x.numel() / 2))
    for half in (y.view(-1)[0::2], y.view(-1)[1::2]):
        assert abs(half.eq(0).float().mean().item() - p_prime) < 5 * sigma
    assert not torch.equal(dropout(x, module), y)  # the stream moved on
    assert torch.equal(dropout(x, module.eval()), x)


def test_bf16_select_and_unpad_give_the_full_forwards_numbers_and_stream_in_training():
    """Under CPU autocast (the bf16 sampler, attention written out) the masked-LM path (the last
    layer at the selected positions, real tokens only) must still read the full padded forward's
    masks: the same logits to bf16 rounding and the same random stream after."""
    torch.manual_seed(0)
    model = RobertaModel(MICRO).train()
    tokens = torch.tensor([[0, 5, 6, 7, 8, 2], [0, 9, 10, 11, 2, 1]])
    select = torch.tensor(
        [[False, True, False, True, True, False], [False, False, True, False, False, False]]
    )

    def run(selecting: bool) -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            if selecting:
                hidden = model(tokens, select=select, unpad=True).last_hidden_state
            else:
                hidden = model(tokens).last_hidden_state[select]
            logits = model.lm_logits(hidden).float()
        return logits.detach(), torch.rand(4)

    full, part = run(False), run(True)
    torch.testing.assert_close(part[0], full[0], atol=1e-3, rtol=1e-3)  # another seed moves them by 0.3
    assert torch.equal(part[1], full[1])
    torch.manual_seed(1)
    other = model(tokens).last_hidden_state[select]  # fp32: torch's sampler, other masks
    assert not torch.allclose(model.lm_logits(other), full[0], atol=0.1)
