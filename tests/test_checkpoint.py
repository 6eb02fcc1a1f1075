"""Our checkpoint directory: exact round trip, tied weights stored once, atomic writes, strict loads."""

import dataclasses
import json
import os

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from roberta import RobertaConfig, RobertaModel, UserError, checkpoint, cli
from roberta.model import SpanHead
from roberta.tokenizer import load_tokenizer

MICRO = RobertaConfig(vocab_size=60, hidden_size=32, num_layers=2, num_heads=4, ffn_size=64, max_positions=34)


def micro_model(seed=0) -> RobertaModel:
    torch.manual_seed(seed)
    model = RobertaModel(MICRO)
    model.add_classification_head("mnli", 3)
    model.add_classification_head("wide", 1, inner_dim=48)
    model.add_classification_head("sentiment", 2, labels=("negative", "positive"))
    model.add_head("squad", SpanHead(model.config))
    return model


def test_save_load_round_trip_is_exact_with_heads(tmp_path):
    model = micro_model()
    checkpoint.save(tmp_path / "ckpt", model)
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["config.json", "model.safetensors"]
    meta = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert meta["heads"] == {
        "mnli": {"kind": "classification", "num_classes": 3, "inner_dim": 32},
        "wide": {"kind": "classification", "num_classes": 1, "inner_dim": 48},
        "sentiment": {
            "kind": "classification",
            "num_classes": 2,
            "inner_dim": 32,
            "labels": ["negative", "positive"],
        },
        "squad": {"kind": "span"},
    }

    loaded, tokenizer = checkpoint.load(tmp_path / "ckpt")
    assert tokenizer is None and not loaded.training and loaded.config == MICRO
    ours, theirs = model.state_dict(), loaded.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert loaded.heads["sentiment"].labels == ("negative", "positive")
    assert isinstance(loaded.heads["squad"], SpanHead)
    # The LM projection is still the embedding, not a copy of it.
    assert loaded.lm_head.weight is loaded.embed_tokens.weight


def test_tied_weight_is_stored_once(tmp_path):
    checkpoint.save(tmp_path / "ckpt", micro_model())
    with safe_open(tmp_path / "ckpt" / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert "embed_tokens.weight" in keys and "lm_head.weight" not in keys


def test_save_replaces_an_existing_checkpoint_atomically(tmp_path):
    checkpoint.save(tmp_path / "ckpt", micro_model(seed=0))
    (tmp_path / "ckpt" / "stale.txt").write_text("from the old checkpoint")
    new = micro_model(seed=1)
    checkpoint.save(tmp_path / "ckpt", new)
    assert not (tmp_path / "ckpt" / "stale.txt").exists()
    assert torch.equal(checkpoint.load(tmp_path / "ckpt")[0].embed_tokens.weight, new.embed_tokens.weight)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no temporary directories left behind


def test_save_refuses_to_replace_a_directory_that_is_not_a_checkpoint(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep me")
    with pytest.raises(UserError, match="refusing to replace a non-empty directory"):
        checkpoint.save(tmp_path / "notes", micro_model())
    assert (tmp_path / "notes" / "todo.txt").read_text() == "keep me"


def test_failed_save_leaves_the_old_checkpoint(tmp_path):
    checkpoint.save(tmp_path / "ckpt", micro_model(seed=0))
    before = (tmp_path / "ckpt" / "model.safetensors").read_bytes()
    model = micro_model(seed=1)
    model.add_head("span", torch.nn.Linear(32, 2))  # a bare module has no spec(): cannot be saved
    with pytest.raises(UserError, match="head 'span' is a Linear"):
        checkpoint.save(tmp_path / "ckpt", model)
    assert (tmp_path / "ckpt" / "model.safetensors").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def _edit_weights(directory, edit) -> None:
    path = directory / "model.safetensors"
    state = load_file(path)
    edit(state)
    save_file(state, path)


def test_shape_mismatch_names_the_key_and_both_shapes(tmp_path):
    checkpoint.save(tmp_path / "ckpt", micro_model())
    _edit_weights(tmp_path / "ckpt", lambda s: s.update({"layers.1.fc1.weight": torch.zeros(65, 32)}))
    expected = (
        r"model.safetensors: key 'layers.1.fc1.weight' has shape \[65, 32\], the config expects \[64, 32\]"
    )
    with pytest.raises(UserError, match=expected):
        checkpoint.load(tmp_path / "ckpt")


def test_missing_and_unexpected_keys_are_named(tmp_path):
    checkpoint.save(tmp_path / "ckpt", micro_model())
    _edit_weights(tmp_path / "ckpt", lambda s: s.pop("heads.mnli.out_proj.bias"))
    with pytest.raises(UserError, match="missing key.*'heads.mnli.out_proj.bias'"):
        checkpoint.load(tmp_path / "ckpt")
    checkpoint.save(tmp_path / "ckpt", micro_model())
    _edit_weights(tmp_path / "ckpt", lambda s: s.update({"pooler.weight": torch.zeros(2)}))
    with pytest.raises(UserError, match="unexpected key.*'pooler.weight'"):
        checkpoint.load(tmp_path / "ckpt")


def test_truncated_safetensors_is_a_user_error_and_the_cli_says_one_line(tmp_path, capsys):
    checkpoint.save(tmp_path / "ckpt", micro_model())
    path = tmp_path / "ckpt" / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-1000])
    with pytest.raises(
        UserError, match="model.safetensors: unreadable safetensors file, truncated or corrupt"
    ):
        checkpoint.load(tmp_path / "ckpt")
    assert cli.main(["convert", str(tmp_path / "ckpt"), str(tmp_path / "out"), "--to", "hf"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("roberta: error: ") and "model.safetensors" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_nothing_is_copied_when_the_state_dict_does_not_fit():
    model = micro_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = {k: torch.zeros_like(v) for k, v in before.items() if k != "lm_head.weight"}
    state["layers.1.fc2.bias"] = torch.zeros(33)  # the last check to fail, after every other key fits
    with pytest.raises(UserError, match="layers.1.fc2.bias"):
        checkpoint.load_weights(model, state, "test")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_tokenizer_travels_with_the_checkpoint(shared_data, tmp_path):
    tokenizer = load_tokenizer(shared_data / "gpt2_bpe")
    model = RobertaModel(dataclasses.replace(MICRO, vocab_size=50265))
    checkpoint.save(tmp_path / "ckpt", model, tokenizer)
    _, loaded = checkpoint.load(tmp_path / "ckpt")
    assert loaded.fingerprint() == tokenizer.fingerprint()
    assert loaded.encode("Hello world!") == [0, 31414, 232, 328, 2]


def test_vocabulary_that_does_not_fit_the_embedding_is_refused(shared_data, tmp_path):
    tokenizer = load_tokenizer(shared_data / "gpt2_bpe")
    with pytest.raises(
        UserError, match=r"tokenizer has 50265 tokens but the embedding has 60 rows \(shape \[60, 32\]\)"
    ):
        checkpoint.save(tmp_path / "ckpt", micro_model(), tokenizer)
    assert not (tmp_path / "ckpt").exists()
    # A directory assembled by hand (a small model next to a big vocabulary) is refused on load.
    checkpoint.save(tmp_path / "ckpt", micro_model())
    tokenizer.save(tmp_path / "ckpt")
    with pytest.raises(UserError, match="tokenizer has 50265 tokens but the embedding has 60 rows"):
        checkpoint.load(tmp_path / "ckpt")


def test_bad_config_json_names_file_and_line(tmp_path):
    checkpoint.save(tmp_path / "ckpt", micro_model())
    (tmp_path / "ckpt" / "config.json").write_text('{"format": "roberta",\n "config": {,}}')
    with pytest.raises(UserError, match=r"config.json:2: invalid JSON"):
        checkpoint.load(tmp_path / "ckpt")


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_checkpoint_and_tokenizer_files_get_the_users_umask(tmp_path, umask):
    from data_fixtures import write_byte_tokenizer
    from roberta.tokenizer import train_tokenizer

    text = tmp_path / "text.txt"
    text.write_text("the river city and the king of the north\n" * 50)
    old = os.umask(umask)
    try:
        tokenizer = load_tokenizer(write_byte_tokenizer(tmp_path / "tok"))
        checkpoint.save(
            tmp_path / "ckpt", RobertaModel(dataclasses.replace(MICRO, vocab_size=266)), tokenizer
        )
        train_tokenizer([text], tmp_path / "trained", 300, progress=False)
    finally:
        os.umask(old)
    written = [tmp_path / "ckpt", tmp_path / "trained"]
    written += [p for d in written for p in d.iterdir()]
    assert {p.name for p in written} >= {"config.json", "model.safetensors", "vocab.json", "merges.txt"}
    for path in written:
        expected = (0o777 if path.is_dir() else 0o666) & ~umask
        assert oct(path.stat().st_mode & 0o777) == oct(expected), path
