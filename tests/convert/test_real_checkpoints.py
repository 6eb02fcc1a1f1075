"""Checkpoints as others write them: sapiens' fairseq RoBERTa (a dict.txt of amino-acid symbols, no
BPE), an HF directory saved by transformers 5.x (tokenizer.json only), HF models without an LM head,
label names and file modes through export.

The sapiens weights are compared with an independent mapping to HF transformers, written here key
by key, and its ids with fairseq's Dictionary as sapiens calls it (`encode_line` on the letters
joined by spaces)."""

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers

from roberta import RobertaConfig, RobertaModel, checkpoint, cli, load
from roberta.convert import convert, export_fairseq, export_hf, load_any
from roberta.convert.fairseq import load_pickle
from roberta.tokenizer import Tokenizer, load_tokenizer

# A heavy chain (VH) and a light chain (VL) variable region, as sapiens' examples give them.
VH = (
    "QVQLVQSGVEVKKPGASVKVSCKASGYTFTNYYMYWVRQAPGQGLEWMGGINPSNGGTNFNEKF"
    "KNRVTLTTDSSTTTAYMELKSLQFDDTAVYYCARRDYRFDMGFDYWGQGTTVTVSS"
)
VL = (
    "DIQMTQSPSSLSASVGDRVTITCRASQSISSYLNWYQQKPGKAPKLLIYAASSLQSGVPSRFSG"
    "SGSGTDFTLTISSLQPEDFATYYCQQSYSTPLTFGQGTKVEIK"
)


@pytest.fixture(scope="module", autouse=True)
def _small_models_on_one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def sapiens() -> Path:
    """The directory of sapiens' v1 checkpoints (checkpoint_vh.pt, checkpoint_vl.pt, dict.txt).
    Located without importing sapiens, whose __init__ imports fairseq."""
    spec = importlib.util.find_spec("sapiens")
    if spec is None or not spec.submodule_search_locations:
        message = "sapiens==1.0.5 is not installed (`make install` adds it with --no-deps)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return Path(next(iter(spec.submodule_search_locations))) / "models" / "v1"


# --- fairseq's ids and an HF model mapped by hand ------------------------------------------------


def fairseq_dictionary(dict_txt: Path) -> dict[str, int]:
    """fairseq's Dictionary for RoBERTa's masked_lm task: four specials, dict.txt in order, <mask>."""
    symbols = ["<s>", "<pad>", "</s>", "<unk>"]
    symbols += [line.rsplit(" ", 1)[0] for line in dict_txt.read_text().splitlines()]
    return {s: i for i, s in enumerate([*symbols, "<mask>"])}


def sapiens_ids(sequence: str, dictionary: dict[str, int]) -> list[int]:
    """sapiens' `seq2tokens`: '<s> ' + letters joined by spaces ('X' and '*' as <mask>) + ' </s>',
    then fairseq's `encode_line` (split at whitespace, unknown words <unk>)."""
    sentence = "<s> " + " ".join(sequence).replace("X", "<mask>").replace("*", "<mask>") + " </s>"
    return [dictionary.get(word, dictionary["<unk>"]) for word in sentence.split()]


def hf_from_fairseq(pt: Path) -> transformers.RobertaForMaskedLM:
    """HF's RobertaForMaskedLM holding the fairseq weights, mapped here name by name."""
    ckpt = load_pickle(pt)
    args, state = ckpt["args"], ckpt["model"]
    vocab, hidden = state["decoder.sentence_encoder.embed_tokens.weight"].shape
    config = transformers.RobertaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=args.encoder_layers,
        num_attention_heads=args.encoder_attention_heads,
        intermediate_size=args.encoder_ffn_embed_dim,
        max_position_embeddings=state["decoder.sentence_encoder.embed_positions.weight"].shape[0],
        type_vocab_size=1,
        layer_norm_eps=1e-5,
        pad_token_id=1,
    )
    s = "decoder.sentence_encoder."
    ours = {
        "roberta.embeddings.word_embeddings.weight": state[s + "embed_tokens.weight"],
        "roberta.embeddings.position_embeddings.weight": state[s + "embed_positions.weight"],
        "roberta.embeddings.token_type_embeddings.weight": torch.zeros(1, hidden),
        "roberta.embeddings.LayerNorm.weight": state[s + "emb_layer_norm.weight"],
        "roberta.embeddings.LayerNorm.bias": state[s + "emb_layer_norm.bias"],
        "lm_head.dense.weight": state["decoder.lm_head.dense.weight"],
        "lm_head.dense.bias": state["decoder.lm_head.dense.bias"],
        "lm_head.layer_norm.weight": state["decoder.lm_head.layer_norm.weight"],
        "lm_head.layer_norm.bias": state["decoder.lm_head.layer_norm.bias"],
        "lm_head.decoder.weight": state["decoder.lm_head.weight"],
        "lm_head.bias": state["decoder.lm_head.bias"],
    }
    for i in range(args.encoder_layers):
        fs, hf = f"{s}layers.{i}.", f"roberta.encoder.layer.{i}."
        for theirs, mine in (
            ("self_attn.q_proj", "attention.self.query"),
            ("self_attn.k_proj", "attention.self.key"),
            ("self_attn.v_proj", "attention.self.value"),
            ("self_attn.out_proj", "attention.output.dense"),
            ("self_attn_layer_norm", "attention.output.LayerNorm"),
            ("fc1", "intermediate.dense"),
            ("fc2", "output.dense"),
            ("final_layer_norm", "output.LayerNorm"),
        ):
            for part in ("weight", "bias"):
                ours[f"{hf}{mine}.{part}"] = state[f"{fs}{theirs}.{part}"]
    model = transformers.RobertaForMaskedLM(config).eval()
    missing, unexpected = model.load_state_dict(ours, strict=False)
    assert not unexpected and all(
        k in ("lm_head.decoder.bias", "roberta.embeddings.position_ids") for k in missing
    )
    return model


@pytest.mark.parametrize("chain, sequence", [("vh", VH), ("vl", VL)])
def test_sapiens_ids_features_and_fill_mask_equal_fairseq_ids_and_an_independent_hf_model(
    sapiens, chain, sequence
):
    pt = sapiens / f"checkpoint_{chain}.pt"
    roberta = load(sapiens, f"checkpoint_{chain}.pt")
    dictionary = fairseq_dictionary(sapiens / "dict.txt")
    assert roberta.tokenizer.kind == "symbols" and roberta.tokenizer.vocab_size == len(dictionary) == 25
    masked = sequence[:30] + "X" + sequence[31:]
    for text in (sequence, masked, "EVQLZ*B"):  # Z and B are no symbol: <unk>, as in fairseq
        ours = roberta.tokenizer.encode(text.replace("X", "<mask>").replace("*", "<mask>"))
        assert ours == sapiens_ids(text, dictionary)
    # Letters separated by spaces (fairseq's own input) give the same ids.
    assert roberta.tokenizer.encode(" ".join(sequence)) == roberta.tokenizer.encode(sequence)

    hf = hf_from_fairseq(pt)
    ids = torch.tensor([sapiens_ids(masked, dictionary)])
    with torch.no_grad():
        expected = hf(input_ids=ids, output_hidden_states=True)
    features = roberta.extract_features(ids)
    assert (features - expected.hidden_states[-1]).abs().max() <= 1e-5
    at = ids[0].tolist().index(dictionary["<mask>"])
    text = sequence[:30] + "<mask>" + sequence[31:]
    assert (roberta.mask_logits(text) - expected.logits[0, at]).abs().max() <= 1e-5
    (filled, score, token), *_ = roberta.fill_mask(text, topk=3)
    assert token == roberta.tokenizer.id_to_token(expected.logits[0, at].argmax().item())
    assert filled == sequence[:30] + token + sequence[31:]
    assert score == pytest.approx(expected.logits[0, at].softmax(-1).max().item(), abs=1e-5)


def test_sapiens_converts_both_ways_keeping_its_dictionary_config_and_umask(sapiens, tmp_path, capsys):
    pt = sapiens / "checkpoint_vh.pt"
    original = load_any(pt)[0]
    old = os.umask(0o027)
    try:
        assert cli.main(["convert", str(pt), str(tmp_path / "hf"), "--to", "hf"]) == 0
        assert cli.main(["convert", str(tmp_path / "hf"), str(tmp_path / "fs"), "--to", "fairseq"]) == 0
        assert cli.main(["convert", str(tmp_path / "fs"), str(tmp_path / "ours")]) == 0
    finally:
        os.umask(old)
    out = capsys.readouterr().out
    assert "read back by transformers: 0" in out
    # Every file as `open` would create it under the umask: safetensors alone would make 0600.
    for directory in ("hf", "fs", "ours"):
        for path in (tmp_path / directory).iterdir():
            assert path.stat().st_mode & 0o777 == 0o640, path
        assert (tmp_path / directory / "dict.txt").read_bytes() == (sapiens / "dict.txt").read_bytes()
    # fairseq's args say there is no BPE: the dictionary is the whole tokenizer.
    args = load_pickle(tmp_path / "fs" / "model.pt")["args"]
    assert isinstance(args, argparse.Namespace) and args.bpe is None and args.max_positions == 144
    # config.json records the model built: 4 x 128, 8 heads, 144 positions (+2 rows fairseq keeps).
    recorded = json.loads((tmp_path / "ours" / "config.json").read_text())["config"]
    assert (
        recorded["num_layers"],
        recorded["hidden_size"],
        recorded["num_heads"],
        recorded["max_positions"],
    ) == (4, 128, 8, 146)
    # transformers reads no dict.txt: the export adds a tokenizer.json that gives fairseq's ids.
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    dictionary = fairseq_dictionary(sapiens / "dict.txt")
    assert hf_tokenizer(VH)["input_ids"] == sapiens_ids(VH, dictionary)
    assert hf_tokenizer(VH[:20], VL[:20])["input_ids"] == load_any(tmp_path / "hf")[1].encode(
        VH[:20], VL[:20]
    )
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf_config["max_position_embeddings"] == 146 and hf_config["architectures"] == [
        "RobertaForMaskedLM"
    ]
    back, tokenizer = load_any(tmp_path / "ours")
    assert tokenizer.fingerprint() == Tokenizer.from_fairseq_dict(sapiens / "dict.txt").fingerprint()
    ours, theirs = original.state_dict(), back.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


@pytest.mark.slow
def test_sapiens_fine_tunes_a_classifier_through_the_cli_and_a_killed_run_resumes(sapiens, tmp_path, capsys):
    # Made-up task: is a piece of sequence from a heavy or a light chain?
    rows = [(VH[i : i + 60], "heavy") for i in range(0, 40, 8)] + [
        (VL[i : i + 60], "light") for i in range(0, 40, 8)
    ]
    (tmp_path / "train.csv").write_text("sequence,chain\n" + "".join(f"{s},{y}\n" for s, y in rows))

    def args(out: str) -> list[str]:
        train, init = str(tmp_path / "train.csv"), str(sapiens / "checkpoint_vh.pt")
        command = ["finetune", "classify", "--train", train, "--dev", train]
        command += [*"--text-column sequence --label-column chain".split(), "--init", init]
        steps = "--train.max_steps=4 --train.eval_every=2 --train.checkpoint_every=2".split()
        return [*command, "--out", str(tmp_path / out), "--batch-size", "4", *steps]

    assert cli.main(args("whole")) == 0
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ROBERTA_FAULT": "step-3:micro-batch-0"}
    killed = subprocess.run(
        [sys.executable, "-m", "roberta.cli", *args("killed")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert cli.main([*args("killed"), "--resume"]) == 0
    final = "checkpoints/step-00000004/model.safetensors"
    whole, resumed = (checkpoint.read_safetensors(tmp_path / run / final) for run in ("whole", "killed"))
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)
    best, tokenizer = checkpoint.load(tmp_path / "whole" / "best")
    assert best.heads["classifier"].labels == ("heavy", "light") and tokenizer.kind == "symbols"
    assert best.config == load_any(sapiens / "checkpoint_vh.pt")[0].config
    # Its HF export names the labels.
    capsys.readouterr()
    assert cli.main(["convert", str(tmp_path / "whole" / "best"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["id2label"] == {"0": "heavy", "1": "light"} and config["label2id"] == {
        "heavy": 0,
        "light": 1,
    }
    classifier = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf")
    assert classifier.config.id2label == {0: "heavy", 1: "light"}


# --- symbol vocabularies -------------------------------------------------------------------------


def test_word_symbols_split_at_whitespace_as_fairseq_encode_line(tmp_path):
    # fairseq strips a line's trailing whitespace (and a CR) before it splits off the count.
    (tmp_path / "dict.txt").write_text("the 9\ncat 5 \r\nsat 4\t\n<mask> 1\nmadeupword0000 0\n")
    tokenizer = load_tokenizer(tmp_path)
    # <mask> listed in dict.txt keeps its place: fairseq's add_symbol returns the existing id.
    assert [tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size)] == [
        "<s>",
        "<pad>",
        "</s>",
        "<unk>",
        "the",
        "cat",
        "sat",
        "<mask>",
        "madeupword0000",
    ]
    assert tokenizer.mask_id == 7
    # Python's \s (fairseq's SPACE_NORMALIZER) includes \x1c and U+3000; 'dog' and 'thecat' are <unk>.
    assert tokenizer.tokenize_ids("the\x1ccat\u3000sat dog thecat <mask>") == [4, 5, 6, 3, 3, 7]
    assert tokenizer.decode([0, 4, 5, 2]) == "the cat" and tokenizer.word_start([4, 5, 6]).all()
    tokenizer.save(tmp_path / "copy")
    assert (tmp_path / "copy" / "dict.txt").read_bytes() == (tmp_path / "dict.txt").read_bytes()
    assert load_tokenizer(tmp_path / "copy").fingerprint() == tokenizer.fingerprint()


def test_character_symbols_read_unseparated_text_and_a_model_round_trips(tmp_path):
    (tmp_path / "dict.txt").write_text(
        "".join(f"{c} 1\n" for c in "ACDEFGHIKLMNPQRSTVWY") + "madeupword0000 0\n"
    )
    tokenizer = load_tokenizer(tmp_path)
    assert (
        tokenizer.tokenize_ids("AC D<mask>Z") == tokenizer.tokenize_ids("A C D <mask> Z") == [4, 5, 6, 25, 3]
    )
    assert tokenizer.tokenize_with_offsets("AC D")[1] == [(0, 1), (1, 2), (3, 4)]
    assert tokenizer.decode(tokenizer.encode("ACD")) == "ACD"
    torch.manual_seed(0)
    sizes = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "ffn_size": 64, "max_positions": 34}
    model = RobertaModel(RobertaConfig(vocab_size=tokenizer.vocab_size, **sizes))
    export_fairseq(tmp_path / "fs", model, tokenizer)
    assert load_pickle(tmp_path / "fs" / "model.pt")["args"].bpe is None
    assert load_any(tmp_path / "fs")[1].fingerprint() == tokenizer.fingerprint()


# --- HF directories: transformers 5.x layout, no LM head, label names -------------------------------

# A one-layer, 32-wide HF RoBERTa: no token types, RoBERTa's layer-norm epsilon.
TINY_HF = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
TINY_HF |= {"type_vocab_size": 1, "layer_norm_eps": 1e-5}


def test_hf_directory_with_tokenizer_json_only_is_read(shared_data, tmp_path):
    hf_tokenizer = transformers.RobertaTokenizer.from_pretrained(shared_data / "roberta_base_tokenizer")
    hf_tokenizer.save_pretrained(tmp_path / "hf")
    config = transformers.RobertaConfig(vocab_size=50265, max_position_embeddings=66, **TINY_HF)
    transformers.RobertaForMaskedLM(config).save_pretrained(tmp_path / "hf")
    assert not {"vocab.json", "merges.txt"} & set(os.listdir(tmp_path / "hf"))
    roberta = load(tmp_path / "hf")
    reference = load_tokenizer(shared_data / "roberta_base_tokenizer")
    assert roberta.tokenizer.fingerprint() == reference.fingerprint()
    for text in ("Hello world!", "Héllo wörld! 日本語 🙂", "  two  spaces"):
        assert roberta.tokenizer.encode(text) == hf_tokenizer(text)["input_ids"] == reference.encode(text)
    # Exported to fairseq, the merges come from tokenizer.json: the same ids again.
    export_fairseq(tmp_path / "fs", roberta.model, roberta.tokenizer)
    assert load_any(tmp_path / "fs")[1].encode("Héllo wörld!") == reference.encode("Héllo wörld!")


def headless_hf(directory: Path, cls=transformers.RobertaModel, **extra) -> Path:
    """A small HF model of `cls` (no LM head) over a 20-letter symbol dict.txt."""
    config = transformers.RobertaConfig(vocab_size=25, max_position_embeddings=34, **TINY_HF, **extra)
    torch.manual_seed(0)
    cls(config).save_pretrained(directory)
    (directory / "dict.txt").write_text("".join(f"{c} 1\n" for c in "ACDEFGHIKLMNPQRSTVWY"))
    return directory


def test_checkpoint_without_lm_head_is_never_given_a_random_one(tmp_path, capsys):
    src = headless_hf(tmp_path / "body")
    capsys.readouterr()  # transformers' progress bar while saving
    assert cli.main(["fill-mask", str(src), "AC<mask>D"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"roberta: error: {src}: holds no masked-LM head (an HF RobertaModel or classifier checkpoint, "
        "a student made by distill embed --new-student); fill-mask needs a checkpoint with one\n"
    )
    # Ours keeps the mark (and no LM head tensors); features still work.
    assert cli.main(["convert", str(src), str(tmp_path / "ours")]) == 0
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["lm_head"] is False
    assert cli.main(["fill-mask", str(tmp_path / "ours"), "AC<mask>D"]) == 2
    assert "holds no masked-LM head" in capsys.readouterr().err
    roberta = load(tmp_path / "ours")
    assert roberta.extract_features(roberta.encode("ACD")).shape == (1, 5, 32)
    # HF: the body alone, with a warning once written; fairseq, whose RoBERTa always has one: refused.
    assert cli.main(["convert", str(tmp_path / "ours"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    captured = capsys.readouterr()
    assert (
        captured.err.count("\n") == 1
        and captured.err.startswith("roberta: warning: ")
        and "holds no masked-LM head" in captured.err
    )
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["RobertaModel"]
    assert not [
        k
        for k in checkpoint.read_safetensors(tmp_path / "hf" / "model.safetensors")
        if k.startswith("lm_head.")
    ]
    assert cli.main(["convert", str(tmp_path / "hf"), str(tmp_path / "fs"), "--to", "fairseq"]) == 2
    assert "a fairseq RoBERTa checkpoint must have one" in capsys.readouterr().err
    assert not (tmp_path / "fs").exists()


def test_hf_classifier_label_names_survive_import_and_export(tmp_path):
    src = headless_hf(
        tmp_path / "clf",
        transformers.RobertaForSequenceClassification,
        num_labels=2,
        id2label={0: "binder", 1: "non-binder"},
        label2id={"binder": 0, "non-binder": 1},
    )
    model, _ = load_any(src)
    assert model.heads["classification"].labels == ("binder", "non-binder")
    assert checkpoint.without_lm_head(model) == str(src)
    export_hf(tmp_path / "back", model)
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["id2label"] == {"0": "binder", "1": "non-binder"}
    assert config["architectures"] == ["RobertaForSequenceClassification"]
    # HF's placeholders (LABEL_0, ...) are no names.
    plain = headless_hf(tmp_path / "plain", transformers.RobertaForSequenceClassification, num_labels=3)
    assert load_any(plain)[0].heads["classification"].labels == ()
    with pytest.warns(UserWarning, match="holds no masked-LM head"):
        assert 0 <= convert(src, tmp_path / "again", to="hf") <= 1e-5
