"""HF and fairseq import/export, safe unpickling, and the checked `roberta convert` verb."""

import argparse
import dataclasses
import datetime
import json
import os
import pickle
import sys
import types

import pytest
import torch
import transformers

from hf_fixtures import hf_config, padded_batch, random_hf
from roberta import RobertaConfig, RobertaModel, UserError, checkpoint, cli
from roberta.convert import convert, export_fairseq, export_hf, load_any, read_fairseq, read_hf
from roberta.convert.verify import max_difference
from roberta.model import SpanHead
from roberta.tokenizer import load_tokenizer

MICRO = RobertaConfig(vocab_size=60, hidden_size=32, num_layers=2, num_heads=4, ffn_size=64, max_positions=34)
# Narrow, one layer, with the real 50265-id vocabulary: for tests that need a real tokenizer.
FULL_VOCAB = RobertaConfig(
    vocab_size=50265, hidden_size=32, num_layers=1, num_heads=4, ffn_size=64, max_positions=66
)
SMALL_HF = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128)


def micro_model(heads=(("mnli", 3),), seed=0) -> RobertaModel:
    torch.manual_seed(seed)
    model = RobertaModel(MICRO)
    for name, n in heads:
        model.add_classification_head(name, n)
    return model.eval()


@torch.no_grad()
def classify(model, tokens, head):
    return model.classify(head, model(tokens).last_hidden_state)


# --- HF sequence classification and bare encoder --------------------------------------------


@pytest.mark.parametrize("num_labels", [3, 1])
def test_hf_sequence_classification_round_trip(num_labels, tmp_path):
    hf = random_hf(transformers.RobertaForSequenceClassification, hf_config(SMALL_HF, num_labels=num_labels))
    hf.save_pretrained(tmp_path / "hf")
    tokens = padded_batch(1000)
    with torch.no_grad():
        expected = hf(input_ids=tokens, attention_mask=tokens.ne(1).long()).logits

    model, _ = read_hf(tmp_path / "hf")
    assert list(model.heads) == ["classification"]
    assert (classify(model, tokens, "classification") - expected).abs().max() <= 1e-5

    export_hf(tmp_path / "back", model)
    reloaded = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "back").eval()
    assert reloaded.config.num_labels == num_labels
    with torch.no_grad():
        again = reloaded(input_ids=tokens, attention_mask=tokens.ne(1).long()).logits
    assert (again - expected).abs().max() <= 1e-5
    # The same directory is a masked-LM checkpoint too, and our import keeps the head's name.
    transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "back")
    assert list(read_hf(tmp_path / "back")[0].heads) == ["classification"]


def test_hf_bare_encoder_imports_without_lm_head_or_pooler(tmp_path):
    hf = random_hf(transformers.RobertaModel, hf_config(SMALL_HF))
    hf.save_pretrained(tmp_path / "hf")
    tokens = padded_batch(1000)
    with torch.no_grad():
        expected = hf(input_ids=tokens, attention_mask=tokens.ne(1).long()).last_hidden_state
        got = read_hf(tmp_path / "hf")[0](tokens).last_hidden_state
    assert (got - expected).abs().max() <= 1e-5


def test_hf_pytorch_model_bin_with_tied_copies_imports(tmp_path):
    """The older layout: a pickled state dict that repeats the tied decoder weight and bias."""
    hf = random_hf(transformers.RobertaForMaskedLM, hf_config(SMALL_HF))
    hf.config.save_pretrained(tmp_path)
    state = dict(hf.state_dict())
    state["lm_head.decoder.weight"] = state["roberta.embeddings.word_embeddings.weight"]
    state["lm_head.decoder.bias"] = state["lm_head.bias"]
    state["roberta.embeddings.position_ids"] = torch.arange(514)[None]
    torch.save(state, tmp_path / "pytorch_model.bin")
    tokens = padded_batch(1000)
    with torch.no_grad():
        expected = hf(input_ids=tokens, attention_mask=tokens.ne(1).long()).logits
        model = read_hf(tmp_path)[0]
        assert (model.lm_logits(model(tokens).last_hidden_state) - expected).abs().max() <= 1e-5
    state["lm_head.decoder.weight"] = state["lm_head.decoder.weight"] + 1
    torch.save(state, tmp_path / "pytorch_model.bin")
    with pytest.raises(UserError, match="'lm_head.decoder.weight' differs from its tied tensor"):
        read_hf(tmp_path)


def test_hf_export_fill_mask_pipeline_runs_offline(shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = load_tokenizer(shared_data / "roberta_base_tokenizer")
    torch.manual_seed(0)
    model = RobertaModel(FULL_VOCAB)
    export_hf(tmp_path / "hf", model, tokenizer)
    fill = transformers.pipeline("fill-mask", model=str(tmp_path / "hf"), tokenizer=str(tmp_path / "hf"))
    results = fill("Hello <mask> world!", top_k=3)
    assert len(results) == 3 and all(r["sequence"].startswith("Hello") for r in results)
    # HF's tokenizer reads our files and gives our ids.
    assert (
        fill.tokenizer("Hello world!")["input_ids"]
        == tokenizer.encode("Hello world!")
        == [0, 31414, 232, 328, 2]
    )
    # And the top prediction is the argmax of our own LM logits at the mask.
    ids = torch.tensor(
        [tokenizer.encode("Hello world!")[:2] + [tokenizer.mask_id] + tokenizer.encode("Hello world!")[2:]]
    )
    with torch.no_grad():
        ours = model.eval().lm_logits(model(ids).last_hidden_state)[0, 2]
    assert results[0]["token"] == ours.argmax().item()


def test_hf_export_with_wordpiece_tokenizer_and_padding_id_0(tmp_path, monkeypatch, capsys):
    """RoBERTa-shaped models trained with BERT's WordPiece pad with id 0; positions start at 1."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "wp").mkdir()
    (tmp_path / "wp" / "vocab.txt").write_text(
        "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n!\n##s\nthe\n"
    )
    tokenizer = load_tokenizer(tmp_path / "wp")
    torch.manual_seed(0)
    model = RobertaModel(dataclasses.replace(MICRO, vocab_size=10, padding_idx=0))
    checkpoint.save(tmp_path / "ours", model, tokenizer)
    assert convert(tmp_path / "ours", tmp_path / "hf", to="hf") <= 1e-5
    assert "read back by transformers" in capsys.readouterr().out
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert type(hf_tokenizer).__name__ == "BertTokenizer"
    assert (
        hf_tokenizer("hello worlds!")["input_ids"] == tokenizer.encode("hello worlds!") == [2, 5, 6, 8, 7, 3]
    )


# --- fairseq ----------------------------------------------------------------------------------


def random_fairseq_state(config: RobertaConfig, heads: dict[str, int], prefix="encoder.", seed=0) -> dict:
    """A state dict with fairseq RoBERTa's key names and random values."""
    g = torch.Generator().manual_seed(seed)
    h, f, v = config.hidden_size, config.ffn_size, config.vocab_size
    s = prefix + "sentence_encoder."

    def linear(name, out, inp):
        return {
            f"{name}.weight": torch.randn(out, inp, generator=g) * 0.1,
            f"{name}.bias": torch.randn(out, generator=g) * 0.1,
        }

    state = {
        s + "embed_tokens.weight": torch.randn(v, h, generator=g) * 0.1,
        s + "embed_positions.weight": torch.randn(config.max_positions, h, generator=g) * 0.1,
    }
    state |= linear(s + "emb_layer_norm", h, 1) | {
        s + "emb_layer_norm.weight": 1 + torch.randn(h, generator=g) * 0.1
    }
    for i in range(config.num_layers):
        layer = f"{s}layers.{i}."
        for name, out, inp in (
            ("self_attn.q_proj", h, h),
            ("self_attn.k_proj", h, h),
            ("self_attn.v_proj", h, h),
            ("self_attn.out_proj", h, h),
            ("fc1", f, h),
            ("fc2", h, f),
        ):
            state |= linear(layer + name, out, inp)
        for norm in ("self_attn_layer_norm", "final_layer_norm"):
            state |= {
                f"{layer}{norm}.weight": 1 + torch.randn(h, generator=g) * 0.1,
                f"{layer}{norm}.bias": torch.randn(h, generator=g) * 0.1,
            }
    state |= linear(prefix + "lm_head.dense", h, h)
    state |= {
        prefix + "lm_head.layer_norm.weight": 1 + torch.randn(h, generator=g) * 0.1,
        prefix + "lm_head.layer_norm.bias": torch.randn(h, generator=g) * 0.1,
        prefix + "lm_head.weight": state[s + "embed_tokens.weight"],
        prefix + "lm_head.bias": torch.randn(v, generator=g) * 0.1,
    }
    for name, n in heads.items():
        state |= linear(f"classification_heads.{name}.dense", h, h) | linear(
            f"classification_heads.{name}.out_proj", n, h
        )
    return state


def hand_mapped(state: dict, config: RobertaConfig, heads: dict[str, int], prefix="encoder.") -> RobertaModel:
    """Our model with the same weights, mapped key by key here (independently of convert.py)."""
    s = prefix + "sentence_encoder."
    model = RobertaModel(config)
    for name, n in heads.items():
        model.add_classification_head(name, n)
    with torch.no_grad():
        model.embed_tokens.weight.copy_(state[s + "embed_tokens.weight"])
        model.embed_positions.weight.copy_(state[s + "embed_positions.weight"])
        model.embed_layer_norm.weight.copy_(state[s + "emb_layer_norm.weight"])
        model.embed_layer_norm.bias.copy_(state[s + "emb_layer_norm.bias"])
        for i, layer in enumerate(model.layers):
            p = f"{s}layers.{i}."
            for part in ("weight", "bias"):
                qkv = [state[f"{p}self_attn.{x}_proj.{part}"] for x in "qkv"]
                getattr(layer.attention.qkv, part).copy_(torch.cat(qkv))
                getattr(layer.attention.out_proj, part).copy_(state[f"{p}self_attn.out_proj.{part}"])
                getattr(layer.attention_layer_norm, part).copy_(state[f"{p}self_attn_layer_norm.{part}"])
                getattr(layer.fc1, part).copy_(state[f"{p}fc1.{part}"])
                getattr(layer.fc2, part).copy_(state[f"{p}fc2.{part}"])
                getattr(layer.ffn_layer_norm, part).copy_(state[f"{p}final_layer_norm.{part}"])
                getattr(model.lm_head.dense, part).copy_(state[f"{prefix}lm_head.dense.{part}"])
                getattr(model.lm_head.layer_norm, part).copy_(state[f"{prefix}lm_head.layer_norm.{part}"])
                for name in heads:
                    getattr(model.heads[name].dense, part).copy_(
                        state[f"classification_heads.{name}.dense.{part}"]
                    )
                    getattr(model.heads[name].out_proj, part).copy_(
                        state[f"classification_heads.{name}.out_proj.{part}"]
                    )
        model.lm_head.bias.copy_(state[prefix + "lm_head.bias"])
    return model.eval()


def fairseq_args(config: RobertaConfig) -> argparse.Namespace:
    shape = {"encoder_layers": config.num_layers, "encoder_embed_dim": config.hidden_size}
    shape |= {"encoder_ffn_embed_dim": config.ffn_size, "encoder_attention_heads": config.num_heads}
    dropouts = {"dropout": 0.1, "attention_dropout": 0.1, "activation_dropout": 0.0, "pooler_dropout": 0.0}
    return argparse.Namespace(
        arch="roberta_base",
        task="masked_lm",
        **shape,
        max_positions=config.max_seq_len,
        **dropouts,
        activation_fn="gelu",
        encoder_normalize_before=False,
    )


@torch.no_grad()
def all_outputs(model, tokens):
    out = model(tokens, return_all_hiddens=True)
    heads = [model.classify(name, out.last_hidden_state) for name in model.heads]
    return [*out.hidden_states, model.lm_logits(out.last_hidden_state), *heads]


HEADS = {"mnli": 3, "stsb": 1}


@pytest.mark.parametrize("prefix", ["encoder.", "decoder."])
def test_fairseq_import_matches_hand_mapped_weights(prefix, tmp_path):
    # 2 heads of width 16: a head count the shapes alone would get wrong (32 // 64 → 1).
    config = dataclasses.replace(MICRO, num_heads=2, classifier_dropout=0.0)
    state = random_fairseq_state(config, HEADS, prefix)
    version = "encoder.sentence_encoder.version" if prefix == "encoder." else "decoder.version"
    state[version] = torch.tensor([2.0])
    ckpt = {"args": fairseq_args(config), "model": state, "optimizer_history": [], "extra_state": {}}
    torch.save(ckpt, tmp_path / "model.pt")

    model, tokenizer = read_fairseq(tmp_path / "model.pt")
    assert tokenizer is None and model.config == config and sorted(model.heads) == sorted(HEADS)
    expected = hand_mapped(state, config, HEADS, prefix)
    tokens = padded_batch(60)
    for got, want in zip(all_outputs(model, tokens), all_outputs(expected, tokens), strict=True):
        assert torch.equal(got, want)


def test_fairseq_older_names_in_proj_and_layernorm_embedding(tmp_path):
    state = random_fairseq_state(MICRO, {})
    expected = hand_mapped(state, MICRO, {})
    s = "encoder.sentence_encoder."
    for i in range(MICRO.num_layers):
        for part in ("weight", "bias"):
            qkv = [state.pop(f"{s}layers.{i}.self_attn.{x}_proj.{part}") for x in "qkv"]
            state[f"{s}layers.{i}.self_attn.in_proj_{part}"] = torch.cat(qkv)
    for part in ("weight", "bias"):
        state[f"{s}layernorm_embedding.{part}"] = state.pop(f"{s}emb_layer_norm.{part}")
    torch.save({"args": fairseq_args(MICRO), "model": state}, tmp_path / "model.pt")
    tokens = padded_batch(60)
    got = all_outputs(read_fairseq(tmp_path)[0], tokens)
    assert all(torch.equal(a, b) for a, b in zip(got, all_outputs(expected, tokens), strict=True))


def test_fairseq_export_then_import_is_bitwise_exact(tmp_path):
    model = micro_model(heads=(("mnli", 3), ("stsb", 1)))
    export_fairseq(tmp_path / "fs", model)
    with torch.serialization.safe_globals([argparse.Namespace]):
        ckpt = torch.load(tmp_path / "fs" / "model.pt", weights_only=True, map_location="cpu")
    assert isinstance(ckpt["args"], argparse.Namespace) and ckpt["args"].encoder_layers == 2
    assert "encoder.sentence_encoder.layers.1.self_attn.v_proj.weight" in ckpt["model"]
    assert "classification_heads.stsb.out_proj.bias" in ckpt["model"]
    assert torch.equal(ckpt["model"]["encoder.lm_head.weight"], model.embed_tokens.weight)
    back, _ = read_fairseq(tmp_path / "fs")
    assert back.config == model.config
    ours, theirs = model.state_dict(), back.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_fairseq_export_with_hf_tokenizer_keeps_ids(shared_data, tmp_path):
    tokenizer = load_tokenizer(shared_data / "roberta_base_tokenizer")
    model = RobertaModel(FULL_VOCAB)
    export_fairseq(tmp_path / "fs", model, tokenizer)
    assert sorted(os.listdir(tmp_path / "fs")) == ["dict.txt", "encoder.json", "model.pt", "vocab.bpe"]
    _, back = load_any(tmp_path / "fs" / "model.pt")
    assert back.kind == "gpt2" and back.fingerprint() == tokenizer.fingerprint()
    text = "Héllo wörld! 日本語 🙂"
    assert back.encode(text) == tokenizer.encode(text)


def test_fairseq_cfg_pickled_as_omegaconf_is_read_without_omegaconf(tmp_path, monkeypatch):
    """fairseq >= 0.10 may store `cfg` as an omegaconf DictConfig. We rebuild the pickled form
    (class names and __getstate__ layout of omegaconf 2.x) with stand-in modules, save it, and
    read it back with those modules gone: hyperparameters must come out of it."""
    fake = {"omegaconf": types.ModuleType("omegaconf")}
    classes = {
        "omegaconf.dictconfig": ["DictConfig"],
        "omegaconf.nodes": ["AnyNode"],
        "omegaconf.base": ["ContainerMetadata", "Metadata"],
    }
    for module, names in classes.items():
        fake[module] = types.ModuleType(module)
        for name in names:
            cls = type(name, (), {"__module__": module, "__getstate__": lambda self: self.__dict__})
            setattr(fake[module], name, cls)
    for module, value in fake.items():
        monkeypatch.setitem(sys.modules, module, value)
    D, N = fake["omegaconf.dictconfig"].DictConfig, fake["omegaconf.nodes"].AnyNode
    meta = fake["omegaconf.base"].ContainerMetadata()
    meta.__dict__.update(ref_type=None, object_type=dict, optional=True, key=None, flags={})

    def node(value):
        n = N()
        n.__dict__.update(_metadata=fake["omegaconf.base"].Metadata(), _parent=None, _val=value)
        return n

    def container(content):
        d = D()
        d.__dict__.update(_metadata=meta, _parent=None, _content=content)
        return d

    config = dataclasses.replace(MICRO, num_heads=2, dropout=0.2)
    hyper = {
        "_name": node("roberta"),
        "encoder_attention_heads": node(2),
        "dropout": node(0.2),
        "encoder_layers": node(2),
    }
    cfg = container({"model": container(hyper), "task": container({"_name": node("masked_lm")})})
    torch.save({"args": None, "cfg": cfg, "model": random_fairseq_state(config, {})}, tmp_path / "model.pt")
    for module in fake:
        monkeypatch.delitem(sys.modules, module)

    model, _ = read_fairseq(tmp_path / "model.pt")
    assert model.config.num_heads == 2 and model.config.dropout == 0.2


class Payload:
    """Unpickling this would run a shell command that creates a marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("layout", ["fairseq", "hf-bin"])
def test_pickled_code_payload_is_refused_and_never_runs(layout, tmp_path, capsys):
    marker = tmp_path / "payload-ran"
    src = tmp_path / "ckpt"
    src.mkdir()
    if layout == "fairseq":
        torch.save({"args": Payload(marker), "model": random_fairseq_state(MICRO, {})}, src / "model.pt")
    else:
        hf_config(SMALL_HF).save_pretrained(src)
        state = {"roberta.embeddings.word_embeddings.weight": torch.zeros(2, 2), "evil": Payload(marker)}
        torch.save(state, src / "pytorch_model.bin")
    with pytest.raises(UserError, match="refused to unpickle .*posix.system"):
        load_any(src)
    assert cli.main(["convert", str(src), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("roberta: error: ") and "refused to unpickle" in err and err.count("\n") == 1
    assert not marker.exists() and not (tmp_path / "out").exists()
    # The payload is real: an unrestricted unpickler would have run it.
    pickle.loads(pickle.dumps(Payload(marker)))
    assert marker.exists()


def test_refused_global_outside_the_allow_list_is_one_line_naming_file_and_global(tmp_path, capsys):
    """torch's advice for a global that is merely not allow-listed spans several lines; ours is one."""
    state = random_fairseq_state(MICRO, {})
    torch.save({"args": datetime.date(2020, 1, 1), "model": state}, tmp_path / "model.pt")
    assert cli.main(["convert", str(tmp_path / "model.pt"), str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"roberta: error: {tmp_path / 'model.pt'}: refused to unpickle datetime.date "
        "(only tensors and plain metadata are loaded)\n"
    )


def test_fairseq_args_that_contradict_the_weights_are_refused(tmp_path):
    args = fairseq_args(dataclasses.replace(MICRO, num_layers=3))
    torch.save({"args": args, "model": random_fairseq_state(MICRO, {})}, tmp_path / "model.pt")
    with pytest.raises(UserError, match=r"model.pt: args.encoder_layers is 3, the weights say 2$"):
        read_fairseq(tmp_path / "model.pt")


def test_fairseq_shape_mismatch_names_key_and_both_shapes(tmp_path):
    state = random_fairseq_state(MICRO, {})
    state["encoder.sentence_encoder.layers.1.fc2.weight"] = torch.zeros(32, 65)
    torch.save({"args": fairseq_args(MICRO), "model": state}, tmp_path / "model.pt")
    expected = r"key 'encoder.sentence_encoder.layers.1.fc2.weight' has shape \[32, 65\], expected \[32, 64\]"
    with pytest.raises(UserError, match=expected):
        read_fairseq(tmp_path / "model.pt")


def test_fairseq_unknown_key_is_refused(tmp_path):
    state = random_fairseq_state(MICRO, {}) | {
        "encoder.sentence_encoder.layers.0.adapter.weight": torch.zeros(2)
    }
    torch.save({"args": fairseq_args(MICRO), "model": state}, tmp_path / "model.pt")
    with pytest.raises(UserError, match="unexpected key.*adapter.weight"):
        read_fairseq(tmp_path / "model.pt")


def test_truncated_fairseq_file_is_a_user_error(tmp_path):
    torch.save({"args": fairseq_args(MICRO), "model": random_fairseq_state(MICRO, {})}, tmp_path / "model.pt")
    data = (tmp_path / "model.pt").read_bytes()
    (tmp_path / "model.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="model.pt: unreadable checkpoint, truncated or corrupt"):
        read_fairseq(tmp_path / "model.pt")


# --- the config tables, both ways ------------------------------------------------------------


@pytest.mark.parametrize("export, read", [(export_hf, read_hf), (export_fairseq, read_fairseq)])
def test_config_survives_export_then_import(export, read, tmp_path):
    config = dataclasses.replace(
        MICRO, num_heads=2, dropout=0.2, attention_dropout=0.15, classifier_dropout=0.05
    )
    torch.manual_seed(0)
    export(tmp_path / "out", RobertaModel(config))
    assert read(tmp_path / "out")[0].config == config


def test_hf_null_classifier_dropout_means_hidden_dropout(tmp_path):
    torch.manual_seed(0)
    export_hf(tmp_path / "hf", RobertaModel(dataclasses.replace(MICRO, dropout=0.2)))
    path = tmp_path / "hf" / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"classifier_dropout": None}))
    assert read_hf(tmp_path / "hf")[0].config.classifier_dropout == 0.2


# --- the checked conversion ------------------------------------------------------------------


@pytest.mark.parametrize("to", ["roberta", "hf", "fairseq"])
def test_convert_cli_end_to_end_prints_the_difference(to, tmp_path, capsys):
    model = micro_model(heads=(("mnli", 3),))
    export_fairseq(tmp_path / "src", model)
    assert cli.main(["convert", str(tmp_path / "src"), str(tmp_path / "dst"), "--to", to]) == 0
    out = capsys.readouterr().out
    assert "largest difference on a probe batch" in out
    assert float(out.strip().rsplit(" ", 1)[1]) <= 1e-5
    back, _ = load_any(tmp_path / "dst")
    tokens = padded_batch(60)
    for got, want in zip(all_outputs(back, tokens), all_outputs(model, tokens), strict=True):
        assert (got - want).abs().max() <= 1e-5
    if to == "hf":
        assert "read back by transformers" in out


def test_convert_that_fails_its_check_leaves_nothing(tmp_path, capsys, monkeypatch):
    model = micro_model()
    export_hf(tmp_path / "src", model)
    # A written model that reads back far from the source: the check must fail and clean up.
    monkeypatch.setattr("roberta.convert.verify.max_difference", lambda *_: 0.5)
    argv = ["convert", str(tmp_path / "src"), str(tmp_path / "dst"), "--to", "fairseq"]
    assert cli.main(argv) == 2
    assert "conversion check failed" in capsys.readouterr().err
    assert not (tmp_path / "dst").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["src"]


def test_convert_python_api_returns_the_difference(tmp_path):
    export_hf(tmp_path / "src", micro_model())
    assert 0 <= convert(tmp_path / "src", tmp_path / "dst", to="roberta") <= 1e-5
    assert (tmp_path / "dst" / "model.safetensors").is_file()


def test_load_any_refuses_an_unknown_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(UserError, match="not a roberta, HF transformers or fairseq checkpoint"):
        load_any(tmp_path)


def test_convert_refuses_a_source_with_nan_in_a_later_layer(tmp_path, capsys):
    """NaN compares false with everything: a largest difference taken over it used to read 0."""
    model = micro_model()
    with torch.no_grad():
        model.layers[1].fc2.weight[0, 0] = float("nan")
    checkpoint.save(tmp_path / "src", model)
    assert cli.main(["convert", str(tmp_path / "src"), str(tmp_path / "dst"), "--to", "hf"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "roberta: error: conversion check failed: the source model's hidden_states[2] holds "
    )
    assert "NaN" in err and err.count("\n") == 1
    assert [p.name for p in tmp_path.iterdir()] == ["src"]


def test_max_difference_fails_on_any_non_finite_output_or_difference():
    finite = {"hidden_states[0]": torch.zeros(2, 3), "lm_logits": torch.zeros(2, 3)}
    later_nan = {**finite, "lm_logits": torch.tensor([[0.0, float("nan"), 0.0], [0.0, 0.0, 0.0]])}
    with pytest.raises(
        UserError, match=r"the converted model's lm_logits holds 1 NaN and 0 infinite value\(s\) of 6"
    ):
        max_difference(finite, later_nan)
    with pytest.raises(UserError, match="the source model's lm_logits holds 1 NaN"):
        max_difference(later_nan, finite)
    # Each side finite, the difference not: float32 overflows.
    big = {**finite, "lm_logits": torch.full((2, 3), 3e38)}
    with pytest.raises(UserError, match="the difference in lm_logits holds 0 NaN and 6 infinite"):
        max_difference(big, {**finite, "lm_logits": -big["lm_logits"]})
    assert max_difference(finite, {**finite, "lm_logits": torch.full((2, 3), 0.5)}) == 0.5


def test_span_head_converts_to_ours_and_is_refused_by_hf_and_fairseq(tmp_path):
    model = micro_model(heads=())
    model.add_head("squad", SpanHead(MICRO))
    checkpoint.save(tmp_path / "src", model)
    assert 0 <= convert(tmp_path / "src", tmp_path / "dst") <= 1e-5
    for export in (export_hf, export_fairseq):
        with pytest.raises(
            UserError, match=r"head 'squad' is a span head; \w+ checkpoints hold classification heads only"
        ):
            export(tmp_path / "out", model)
    assert not (tmp_path / "out").exists()
