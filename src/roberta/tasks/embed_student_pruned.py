"""A new student cut from its teacher's layers, for `distill embed --new-student LxW --student-init pruned`.

Width and depth pruning as Minitron does it (Muralidharan et al. 2024): the student keeps the
teacher's last `L` layers, and within them the `W` residual channels, `W / head width` attention
heads and `4 W` FFN neurons most active on a sample of the transfer texts (mean |activation| of
every LayerNorm's output, the norm of each head's context vector, each neuron after GELU); its
embeddings are the teacher's word and position (+ token type 0) embeddings on those channels, and
its vector head puts each kept channel back at its place among the teacher's. With every layer,
channel, head and neuron kept the student is the teacher itself (tests/tasks/test_embed_student.py).

Against the static start (`tasks/embed_student.py`: the teacher's token vectors, random layers),
one epoch of issue #47's retrieval distillation reached SQuAD recall@10 78.1 against 67.7 and STS-B
81.7 against 77.4 (benchmarks/results/2026-11-28-retrieval.md). It reads the teacher's own weights,
so it takes BERT and RoBERTa bodies (all-MiniLM-L6-v2 is a BERT); `auto` falls back to the static
start for any other, or for a student deeper than its teacher.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import torch

from roberta.config import RobertaConfig
from roberta.errors import UserError
from roberta.model import EMBEDDING_HEAD, EmbeddingHead, RobertaModel
from roberta.similarity.pairs import read_pairs
from roberta.tasks.embed import EmbedData, read_sentences
from roberta.tasks.embed_student import FFN_RATIO, NewStudent, StudentShape
from roberta.train.config import JobConfig

BODIES = ("bert", "roberta")  # HF model types whose weights are read by name here
CALIBRATION_TEXTS = 512  # texts the teacher reads to rank its channels, heads and neurons


@dataclass
class Importance:
    """Mean |activation| of the teacher's residual channels [D], each layer's heads and FFN neurons."""

    channels: torch.Tensor
    heads: list[torch.Tensor]
    neurons: list[torch.Tensor]


def calibration_texts(data: EmbedData, count: int = CALIBRATION_TEXTS) -> list[str]:
    """The first `count` texts of the transfer set: --text's sentences, or --pairs' texts in turn."""
    if data.pairs is None:
        return read_sentences(data.text, count, progress=False)[:count]
    pairs = read_pairs(data.pairs, data.columns)[: (count + 1) // 2]
    return [text for pair in pairs for text in (pair.text, pair.pair)][:count]


def why_not_pruned(body, shape: StudentShape) -> str | None:
    """Why `shape` cannot be cut from the HF model `body`, or None when it can."""
    config = body.config
    head = config.hidden_size // config.num_attention_heads
    if config.model_type not in BODIES:
        return f"the teacher is a {config.model_type!r} model; pruning reads BERT and RoBERTa bodies"
    if shape.layers > config.num_hidden_layers:
        return f"{shape.layers} layers are more than the teacher's {config.num_hidden_layers}"
    if shape.width % head:
        return f"a width of {shape.width} does not split into the teacher's heads of {head}"
    if FFN_RATIO * shape.width > config.intermediate_size:
        return f"its FFN ({FFN_RATIO}x {shape.width}) is wider than the teacher's {config.intermediate_size}"
    return None


def importance(body, tokenizer, texts: list[str], max_length: int) -> Importance:
    """The teacher's activations on `texts`' real tokens, summed: LayerNorm outputs per channel,
    each head's context-vector norm, each FFN neuron after GELU."""
    config = body.config
    heads, head = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    sums: dict[str, torch.Tensor] = {}
    real: list[torch.Tensor] = []

    def hook(name: str, per_head: bool = False):
        def record(_module, _inputs, output) -> None:
            out = (output[0] if isinstance(output, tuple) else output)[real[0]]  # [N, width]
            value = out.view(len(out), heads, head).norm(dim=-1) if per_head else out.abs()
            sums[name] = sums.get(name, 0) + value.sum(0)

        return record

    handles = [body.embeddings.LayerNorm.register_forward_hook(hook("channels"))]
    for i, layer in enumerate(body.encoder.layer):
        handles += [
            layer.attention.self.register_forward_hook(hook(f"heads{i}", per_head=True)),
            layer.attention.output.LayerNorm.register_forward_hook(hook("channels")),
            layer.intermediate.register_forward_hook(hook(f"neurons{i}")),
            layer.output.LayerNorm.register_forward_hook(hook("channels")),
        ]
    try:
        with torch.inference_mode():
            for start in range(0, len(texts), 32):
                batch = tokenizer(
                    texts[start : start + 32], padding=True, truncation=True, max_length=max_length,
                    return_tensors="pt",
                )  # fmt: skip
                real[:] = [batch["attention_mask"].bool()]
                body(**batch)
    finally:
        for handle in handles:
            handle.remove()
    layers = range(config.num_hidden_layers)
    heads_found = [sums[f"heads{i}"] for i in layers]
    return Importance(sums["channels"], heads_found, [sums[f"neurons{i}"] for i in layers])


def top(scores: torch.Tensor, k: int) -> torch.Tensor:
    """The `k` highest-scoring indices, in their original order."""
    return scores.topk(k).indices.sort().values


def pruned_weights(
    config: RobertaConfig, body, found: Importance
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The body of a student of `config` (L layers of W, heads as wide as the teacher's) cut from the
    HF `body` by `found`, from its last L layers, by parameter name; and the residual channels kept,
    in order."""
    teacher = body.config
    head = teacher.hidden_size // teacher.num_attention_heads
    c = top(found.channels, config.hidden_size)
    sd = {k: v.detach().float() for k, v in body.state_dict().items()}
    emb, pad = "embeddings.", config.padding_idx
    out = {
        "embed_tokens.weight": sd[emb + "word_embeddings.weight"][:, c],
        "embed_layer_norm.weight": sd[emb + "LayerNorm.weight"][c],
        "embed_layer_norm.bias": sd[emb + "LayerNorm.bias"][c],
    }
    # RoBERTa numbers positions from padding_idx + 1, as the student does; BERT from 0.
    table = sd[emb + "position_embeddings.weight"] + sd[emb + "token_type_embeddings.weight"][0]
    table = table[pad + 1 :] if teacher.model_type == "roberta" else table
    positions = torch.zeros(config.max_positions, config.hidden_size)
    positions[pad + 1 :] = table[: len(positions) - pad - 1, c]
    out["embed_positions.weight"] = positions
    first = teacher.num_hidden_layers - config.num_layers
    for i in range(config.num_layers):
        t, dst = f"encoder.layer.{first + i}.", f"layers.{i}."
        kept = top(found.heads[first + i], config.num_heads).tolist()
        dims = torch.cat([torch.arange(h * head, (h + 1) * head) for h in kept])
        n = top(found.neurons[first + i], config.ffn_size)
        a = t + "attention."
        projections = [f"{a}self.{p}." for p in ("query", "key", "value")]
        out[dst + "attention.qkv.weight"] = torch.cat([sd[p + "weight"][dims][:, c] for p in projections])
        out[dst + "attention.qkv.bias"] = torch.cat([sd[p + "bias"][dims] for p in projections])
        out[dst + "attention.out_proj.weight"] = sd[a + "output.dense.weight"][c][:, dims]
        out[dst + "attention.out_proj.bias"] = sd[a + "output.dense.bias"][c]
        out[dst + "fc1.weight"] = sd[t + "intermediate.dense.weight"][n][:, c]
        out[dst + "fc1.bias"] = sd[t + "intermediate.dense.bias"][n]
        out[dst + "fc2.weight"] = sd[t + "output.dense.weight"][c][:, n]
        out[dst + "fc2.bias"] = sd[t + "output.dense.bias"][c]
        norms = {"attention_layer_norm": a + "output.LayerNorm", "ffn_layer_norm": t + "output.LayerNorm"}
        for ours, theirs in norms.items():
            out[f"{dst}{ours}.weight"] = sd[theirs + ".weight"][c]
            out[f"{dst}{ours}.bias"] = sd[theirs + ".bias"][c]
    return out, c


@dataclass
class PrunedStudent(NewStudent):
    """`NewStudent`'s vocabulary and shape, its weights cut from the teacher ranked on `texts()`
    (the transfer texts' first CALIBRATION_TEXTS), once per command; with `fallback`, the static
    start where the teacher cannot be pruned to the shape, said once in the log and in `source`."""

    texts: Callable[[], list[str]] = list
    pool: str = "mean"
    fallback: bool = False
    # (why the teacher cannot be pruned to the shape, else None; the cut weights; the channels kept)
    _cut: tuple[str | None, dict, torch.Tensor | None] | None = field(default=None, repr=False)

    @property
    def source(self) -> str:
        if self._cut is not None and self._cut[0] is not None:
            return super().source
        return f"a {self.shape.layers}x{self.shape.width} student pruned from {self.teacher}"

    def load(self, job: JobConfig) -> tuple[RobertaModel, object]:
        first = self._cut is None
        if first:
            self._cut = self._cut_from_teacher()
        why, weights, channels = self._cut
        model, tokenizer = super().load(job)
        if why is not None:
            if first:
                print(f"student: the static start ({why})", flush=True)
            return model, tokenizer
        with torch.no_grad():
            for name, value in weights.items():
                model.get_parameter(name).copy_(value)
        dim = self._tokens[1].shape[1]  # the teacher's vectors' width
        vector = EmbeddingHead(model.config, self.pool, None if len(channels) == dim else dim)
        model.add_head(EMBEDDING_HEAD, vector)
        if vector.proj is not None:  # at the start: the teacher's mean-pooled last layer on the kept channels
            with torch.no_grad():
                vector.proj.weight.zero_()
                vector.proj.bias.zero_()
                vector.proj.weight[channels, torch.arange(len(channels))] = 1.0
        return model.train(), tokenizer

    def _cut_from_teacher(self) -> tuple[str | None, dict, torch.Tensor | None]:
        """The teacher read once: its vocabulary's vectors (`NewStudent.tokens`), then, where its
        body allows the shape, the student's weights cut from it (the shape given its heads)."""
        from roberta.convert.sentence_transformers import SentenceEncoder

        encoder = SentenceEncoder.load(self.teacher)
        body, hf_tokenizer = encoder.model[0].auto_model.float().eval(), encoder.model[0].tokenizer
        why = why_not_pruned(body, self.shape)
        if why is not None and not self.fallback:  # before the teacher reads its vocabulary
            raise UserError(f"--student-init pruned: {why}; give --student-init static")
        self.tokens(encoder)  # refuses what the static start refuses
        if why is not None:
            return why, {}, None
        self.shape = dataclasses.replace(
            self.shape, head_width=body.config.hidden_size // body.config.num_attention_heads
        )
        found = importance(body, hf_tokenizer, self.texts()[:CALIBRATION_TEXTS], encoder.max_length)
        tokenizer, _, max_length = self._tokens
        config = self.shape.config(tokenizer.vocab_size, tokenizer.pad_id, max_length)
        return (None, *pruned_weights(config, body, found))


def student_start(
    teacher: str, shape: StudentShape, init: str, data: EmbedData, pool: str = "mean"
) -> NewStudent:
    """`--new-student`'s start by `--student-init`: static (`NewStudent`), else cut from the
    teacher on `data`'s first texts, `auto` falling back to the static start where it cannot be."""
    if init == "static":
        return NewStudent(teacher, shape)
    texts = partial(calibration_texts, data)
    return PrunedStudent(teacher, shape, texts=texts, pool=pool, fallback=init == "auto")
