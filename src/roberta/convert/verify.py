"""The check behind every conversion: both models score one probe batch, output by output.

Outputs are compared in fp32 eval mode, padding positions included (they match too). A
non-finite value anywhere fails the check: NaN compares false with everything, so a largest
difference taken over it would silently read as 0.
"""

from __future__ import annotations

from pathlib import Path

import torch

from roberta.checkpoint import without_lm_head
from roberta.config import RobertaConfig
from roberta.errors import UserError
from roberta.io import read_json
from roberta.model import EMBEDDING_HEAD, RobertaModel


def probe_batch(config: RobertaConfig, seed: int = 0) -> torch.Tensor:
    """Three sequences of unequal length, right-padded: exercises the padding mask and positions."""
    generator = torch.Generator().manual_seed(seed)
    lengths = [min(n, config.max_seq_len) for n in (13, 8, 3)]
    tokens = torch.full((len(lengths), max(lengths)), config.padding_idx)
    for row, n in enumerate(lengths):
        ids = torch.randint(0, config.vocab_size - 1, (n,), generator=generator)
        tokens[row, :n] = ids + (ids >= config.padding_idx).long()  # every id but padding
    return tokens


@torch.no_grad()
def model_outputs(model: RobertaModel, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every hidden state, the LM logits (of a model that has an LM head) and each head's logits, by name."""
    out = model(tokens, return_all_hiddens=True)
    outputs = {f"hidden_states[{i}]": h for i, h in enumerate(out.hidden_states)}
    if without_lm_head(model) is None:
        outputs["lm_logits"] = model.lm_logits(out.last_hidden_state)
    for name, head in model.heads.items():
        if name == EMBEDDING_HEAD:
            outputs[f"heads.{name}"] = head(out.last_hidden_state, tokens.ne(model.config.padding_idx))
            continue
        logits = model.classify(name, out.last_hidden_state)
        # A span head scores (start, end) per token.
        outputs[f"heads.{name}"] = torch.stack(logits) if isinstance(logits, tuple) else logits
    return outputs


@torch.no_grad()
def transformers_outputs(
    directory: Path, tokens: torch.Tensor, padding_idx: int, heads: list[str], lm_head: bool = True
) -> dict[str, torch.Tensor]:
    """The same outputs as `model_outputs`, computed by HF transformers from an exported directory
    (by its bare `AutoModel` where the export holds no LM head)."""
    import transformers

    from roberta.convert.sentence_transformers import quiet_transformers

    mask = tokens.ne(padding_idx).long()
    # Loading a classifier checkpoint as a masked LM warns about the unused head: expected here.
    with quiet_transformers():
        body = transformers.AutoModelForMaskedLM if lm_head else transformers.AutoModel
        out = (
            body.from_pretrained(directory)
            .float()
            .eval()(input_ids=tokens, attention_mask=mask, output_hidden_states=True)
        )
        outputs = {f"hidden_states[{i}]": h for i, h in enumerate(out.hidden_states)}
        if lm_head:
            outputs["lm_logits"] = out.logits
        for name in heads:
            if name == EMBEDDING_HEAD:
                outputs[f"heads.{name}"] = sentence_vectors(directory, tokens, mask, out.hidden_states[-1])
                continue
            # A tagging head's directory is a RobertaForTokenClassification: logits per token.
            tagging = "RobertaForTokenClassification" in read_json(directory / "config.json")["architectures"]
            auto = "AutoModelForTokenClassification" if tagging else "AutoModelForSequenceClassification"
            classifier = getattr(transformers, auto).from_pretrained(directory).float().eval()
            outputs[f"heads.{name}"] = classifier(input_ids=tokens, attention_mask=mask).logits
    return outputs


def sentence_vectors(
    directory: Path, tokens: torch.Tensor, mask: torch.Tensor, hidden: torch.Tensor
) -> torch.Tensor:
    """A sentence-transformers export's vectors: by that library where it is installed, else by the
    pooling and map its module files describe, over HF's last hidden state."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        from roberta.convert.hf import read_hf_config
        from roberta.convert.sentence_transformers import read_embedding_head

        head = read_embedding_head(
            directory, read_hf_config(read_json(directory / "config.json"), str(directory))
        )
        return head(hidden, mask.bool())
    model = SentenceTransformer(str(directory), device="cpu", local_files_only=True).eval()
    return model({"input_ids": tokens, "attention_mask": mask})["sentence_embedding"]


def require_finite(outputs: dict[str, torch.Tensor], whose: str) -> None:
    """A UserError naming the first output holding NaN or ±Inf, and how many such values it holds."""
    for name, tensor in outputs.items():
        nan, inf = tensor.isnan().sum().item(), tensor.isinf().sum().item()
        if nan or inf:
            raise UserError(
                f"conversion check failed: {whose} {name} holds {nan} NaN and {inf} infinite "
                f"value(s) of {tensor.numel()}"
            )


def max_difference(reference: dict[str, torch.Tensor], candidate: dict[str, torch.Tensor]) -> float:
    """Largest absolute difference over all outputs; every output and difference must be finite."""
    if reference.keys() != candidate.keys():
        raise UserError(f"converted model has outputs {sorted(candidate)}, expected {sorted(reference)}")
    require_finite(reference, "the source model's")
    require_finite(candidate, "the converted model's")
    # Finite outputs can still differ by more than float32 holds.
    differences = {k: (reference[k].float() - candidate[k].float()).abs() for k in reference}
    require_finite(differences, "the difference in")
    return max(d.max().item() for d in differences.values())
