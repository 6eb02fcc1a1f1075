"""HF transformers models and inputs for the parity tests: random weights, a padded batch."""

import torch
import transformers


def hf_config(shape: dict, **extra) -> transformers.RobertaConfig:
    return transformers.RobertaConfig(
        vocab_size=1000, max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5, **shape, **extra
    )


def random_hf(cls, config: transformers.RobertaConfig, seed: int = 0):
    torch.manual_seed(seed)
    model = cls(config).eval()
    with torch.no_grad():
        # HF may start some of these at zero/one; random values make every mapping error visible.
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model


def padded_batch(vocab_size: int, lengths=(12, 7, 3), pad: int = 1, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.full((len(lengths), max(lengths)), pad)
    for row, n in enumerate(lengths):
        tokens[row, :n] = torch.randint(2, vocab_size, (n,), generator=generator)
        tokens[row, 0], tokens[row, n - 1] = 0, 2
    return tokens
