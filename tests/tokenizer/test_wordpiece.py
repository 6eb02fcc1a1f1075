"""A WordPiece vocabulary trained here (`roberta train-tokenizer --kind wordpiece`): BERT's files,
RoBERTa's roles, case kept end to end, the same ids as transformers' BertTokenizerFast, and the
whole pipeline (prepare, pretrain, finetune, HF export) with it."""

import json
import random
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import transformers

import roberta
from roberta import RobertaConfig, RobertaModel, checkpoint
from roberta.cli import main
from roberta.data.prepare import prepare
from roberta.errors import UserError
from roberta.tokenizer import Tokenizer, load_tokenizer
from roberta.tokenizer.training import train_wordpiece

WORDS = "Apple apple APPLE café cafe naïve Zürich the a cat sat on mat and then it was big small".split()
HARD = [
    "Apple apple APPLE",
    "Café au lait, naïve Zürich!",
    "北京 is 北京; don't stop—ever…",
    "tabs\tand  spaces\u00a0here",
    "control\u0000chars\u200b and \ufeff marks",
    "unseen words: xylophone Quixotic",
    "x" * 150,  # longer than max_input_chars_per_word: one [UNK]
]


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 10))) + "." for _ in range(400)]
    path = tmp_path_factory.mktemp("wordpiece") / "text.txt"
    documents = ["\n".join(lines[i : i + 5]) for i in range(0, len(lines), 5)]
    path.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    return path


def bert(directory, **options):
    return transformers.BertTokenizerFast(vocab=str(directory / "vocab.txt"), **options)


def test_cli_trains_a_cased_wordpiece_in_bert_layout_with_roberta_roles(text, tmp_path, capsys):
    out = tmp_path / "tok"
    argv = ["train-tokenizer", str(text), "--out", str(out), "--kind", "wordpiece", "--vocab-size", "200"]
    assert main([*argv, "--no-progress"]) == 0
    assert str(out) in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["tokenizer_config.json", "vocab.txt"]
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is False and config["strip_accents"] is False
    tokens = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert tokens[:4] == ["[CLS]", "[PAD]", "[SEP]", "[UNK]"] and tokens[-1] == "[MASK]"
    tok = load_tokenizer(out)
    assert (tok.bos_id, tok.pad_id, tok.eos_id, tok.unk_id, tok.mask_id) == (0, 1, 2, 3, len(tokens) - 1)
    assert not tok.lowercase and not tok.strip_accents
    # Cased end to end: each spelling its own ids, accents kept.
    apple, lower, upper = (tok.tokenize_ids(w) for w in ("Apple", "apple", "APPLE"))
    assert len({tuple(apple), tuple(lower), tuple(upper)}) == 3
    assert tok.tokenize_ids("café") != tok.tokenize_ids("cafe")
    assert tok.decode(tok.encode("Apple café")) == "Apple café"
    # transformers reads the directory as BERT's and gives the same ids, specials included.
    hf = transformers.AutoTokenizer.from_pretrained(out)
    assert type(hf).__name__ == "BertTokenizer"
    for line in [*text.read_text().splitlines()[:60], *HARD]:
        assert hf(line)["input_ids"] == tok.encode(line), line
    # The same text gives the same vocab.txt (HF's trainer alone numbers pieces in hash order, and
    # so breaks ties between merges differently from run to run).
    again = [*argv[:2], "--out", str(tmp_path / "again"), *argv[4:], "--no-progress"]
    assert main(again) == 0
    assert (tmp_path / "again" / "vocab.txt").read_bytes() == (out / "vocab.txt").read_bytes()


@pytest.mark.parametrize(
    "flags, lowercase, strip", [(["--uncased"], True, True), (["--cased", "--strip-accents"], False, True)]
)
def test_uncased_and_accent_stripping_are_recorded_and_equal_bert(text, tmp_path, flags, lowercase, strip):
    out = tmp_path / "tok"
    argv = ["train-tokenizer", str(text), "--out", str(out), "--kind", "wordpiece", "--vocab-size", "200"]
    assert main([*argv, *flags, "--no-progress"]) == 0
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert (config["do_lower_case"], config["strip_accents"]) == (lowercase, strip)
    tok = load_tokenizer(out)
    assert (tok.lowercase, tok.strip_accents) == (lowercase, strip)
    assert tok.tokenize_ids("café") == tok.tokenize_ids("cafe")
    assert (tok.tokenize_ids("Apple") == tok.tokenize_ids("apple")) is lowercase
    hf = bert(out, do_lower_case=lowercase, strip_accents=strip)
    for line in [*text.read_text().splitlines()[:60], *HARD]:
        assert hf(line)["input_ids"] == tok.encode(line), line
    # Saved with a model, the choice travels: a checkpoint's tokenizer reads back the same.
    tok.save(tmp_path / "saved")
    assert load_tokenizer(tmp_path / "saved").fingerprint() == tok.fingerprint()


def test_a_case_choice_the_files_contradict_is_refused(text, tmp_path, capsys):
    out = tmp_path / "tok"
    cased = train_wordpiece([text], out, 200, progress=False)
    with pytest.raises(UserError, match=r"tokenizer_config.json: field 'do_lower_case' is false, but true"):
        Tokenizer.from_wordpiece(out / "vocab.txt", lowercase=True)
    assert Tokenizer.from_wordpiece(out / "vocab.txt", lowercase=False).fingerprint() == cased.fingerprint()
    config = json.loads((out / "tokenizer_config.json").read_text())
    (out / "tokenizer_config.json").write_text(json.dumps({**config, "do_lower_case": "yes"}))
    with pytest.raises(UserError, match=r"field 'do_lower_case' is \"yes\", expected true, false or null"):
        load_tokenizer(out)
    # Case options belong to WordPiece; byte-level BPE has none.
    argv = ["train-tokenizer", str(text), "--out", str(tmp_path / "bpe"), "--vocab-size", "300", "--uncased"]
    assert main(argv) == 2
    assert "apply to --kind wordpiece only" in capsys.readouterr().err
    assert not (tmp_path / "bpe").exists()


def test_an_edited_case_in_a_checkpoint_is_refused_on_load(text, tmp_path):
    tok = train_wordpiece([text], tmp_path / "tok", 200, progress=False)
    config = RobertaConfig(
        vocab_size=tok.vocab_size, hidden_size=32, num_layers=1, num_heads=4, ffn_size=64, max_positions=34
    )
    checkpoint.save(tmp_path / "ckpt", RobertaModel(config), tok)
    config = tmp_path / "ckpt" / "tokenizer_config.json"
    config.write_text(config.read_text().replace('"do_lower_case": false', '"do_lower_case": true'))
    with pytest.raises(UserError, match="replaced or edited"):
        checkpoint.load(tmp_path / "ckpt")


def test_vocab_size_is_the_most_ids_written(text, tmp_path):
    # The trainer keeps every character and '##' piece whatever the size asked for: a size they fill
    # is refused, as byte-level BPE refuses one its 256 bytes fill, and a larger one is the size.
    with pytest.raises(UserError, match="--vocab-size 20 is too small") as refused:
        train_wordpiece([text], tmp_path / "tok", 20, progress=False)
    smallest = int(re.search(r"take (\d+) ids", str(refused.value)).group(1))
    with pytest.raises(UserError, match=f"--vocab-size {smallest} is too small"):
        train_wordpiece([text], tmp_path / "tok", smallest, progress=False)
    assert not (tmp_path / "tok").exists()
    assert train_wordpiece([text], tmp_path / "tok", smallest + 1, progress=False).vocab_size == smallest + 1


def test_whole_word_masking_uses_the_continuation_marks(text, tmp_path):
    tok = train_wordpiece([text], tmp_path / "tok", 120, progress=False)
    prepare([text], tmp_path / "tok", tmp_path / "corpus", workers=1, progress=False)
    starts = np.load(tmp_path / "corpus" / "word_starts.npy")
    tokens = [tok.id_to_token(i) for i in range(tok.vocab_size)]
    assert starts.tolist() == [not t.startswith("##") for t in tokens]
    assert any(t.startswith("##") for t in tokens)  # a small vocabulary splits words


@pytest.mark.parametrize("lowercase", [True, False])
def test_a_bert_tokenizer_json_saved_alone_reads_to_berts_ids(text, tmp_path, lowercase):
    """transformers 5.x and sentence-transformers save a BERT tokenizer as tokenizer.json alone."""
    argv = ["train-tokenizer", str(text), "--out", str(tmp_path / "tok"), "--kind", "wordpiece"]
    assert main([*argv, "--vocab-size", "200", "--cased", "--no-progress"]) == 0
    bert(tmp_path / "tok", do_lower_case=lowercase).save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "vocab.txt").unlink(missing_ok=True)
    tok = load_tokenizer(tmp_path / "hf")
    assert (tok.kind, tok.lowercase, tok.strip_accents) == ("wordpiece", lowercase, lowercase)
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    lines = [*text.read_text().splitlines()[:60], *HARD]
    assert hf(lines, add_special_tokens=False)["input_ids"] == tok.tokenize_ids_batch(lines)
    # Kept as the vocab.txt and tokenizer_config.json it amounts to: a checkpoint reads back the same.
    tok.save(tmp_path / "saved")
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == ["tokenizer_config.json", "vocab.txt"]
    assert load_tokenizer(tmp_path / "saved").fingerprint() == tok.fingerprint()


def test_equal_to_bert_tokenizer_fast_on_a_corpus_sample(shared_data, tmp_path):
    """Trained on part of the books+wiki corpus, checked on other files of it (the whole corpus:
    benchmarks/experiments/wordpiece_equality.py)."""
    wiki = sorted((shared_data / "corpus" / "wiki").glob("*.txt"))
    books = sorted((shared_data / "corpus" / "books").rglob("*.txt"))
    tok = train_wordpiece(wiki[:2], tmp_path / "tok", 4000, progress=False)
    lines = [line for path in (wiki[2], books[0]) for line in path.read_text(encoding="utf-8").splitlines()]
    lines = lines[:20000]
    hf = bert(tmp_path / "tok", do_lower_case=False)
    assert hf(lines, add_special_tokens=False)["input_ids"] == tok.tokenize_ids_batch(lines)


@pytest.mark.slow
def test_wordpiece_through_prepare_pretrain_finetune_and_hf_export(text, tmp_path, one_thread, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tok_dir, corpus, run = tmp_path / "tok", tmp_path / "corpus", tmp_path / "run"
    wordpiece = ["--kind", "wordpiece", "--vocab-size", "120", "--no-progress"]
    assert main(["train-tokenizer", str(text), "--out", str(tok_dir), *wordpiece]) == 0
    assert (
        main(
            [
                "prepare",
                str(text),
                "--tokenizer",
                str(tok_dir),
                "--out",
                str(corpus),
                "--valid-fraction",
                "0.2",
                "--no-progress",
            ]
        )
        == 0
    )
    micro = "--model.hidden_size=64 --model.num_layers=2 --model.num_heads=4 --model.ffn_size=128".split()
    steps = (
        "--train.batch_size=8 --train.micro_batch_size=4 --train.device=cpu --train.peak_tflops=0.1".split()
    )
    job = [*micro, *steps, "--model.preset=tiny", "--data.seq_len=32", "--schedule.warmup_steps=2"]
    job += [
        "--train.max_steps=4",
        "--train.eval_every=4",
        "--train.checkpoint_every=4",
        "--train.eval_batches=1",
    ]
    assert main(["pretrain", "--data", str(corpus), "--out", str(run), *job, "--train.progress=false"]) == 0
    ckpt = run / "checkpoints" / "step-00000004"
    model, tok = checkpoint.load(ckpt)
    assert tok.kind == "wordpiece" and not tok.lowercase and model.config.padding_idx == 1

    rows = tmp_path / "train.parquet"  # task data as Parquet, columns by name
    rng = random.Random(1)
    examples = [{"text": " ".join(rng.choice(WORDS) for _ in range(6)), "label": i % 2} for i in range(16)]
    pq.write_table(pa.Table.from_pylist(examples), rows)
    columns = ["--text-column", "text", "--label-column", "label", "--init", str(ckpt)]
    finetune = ["finetune", "classify", "--train", str(rows), "--dev", str(rows), *columns]
    assert (
        main([*finetune, "--out", str(tmp_path / "cls"), "--train.max_steps=2", "--train.progress=false"])
        == 0
    )
    assert checkpoint.load(tmp_path / "cls" / "best")[1].fingerprint() == tok.fingerprint()

    assert main(["convert", str(ckpt), str(tmp_path / "hf"), "--to", "hf"]) == 0
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    hf_model = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf").eval()
    ours = roberta.load(ckpt)
    sentence = "The Apple sat on the <mask>."
    fillings = ours.fill_mask(sentence, topk=3)
    encoded = hf_tok(sentence.replace("<mask>", hf_tok.mask_token), return_tensors="pt")
    assert encoded["input_ids"][0].tolist() == ours.encode_masked(sentence).tolist()
    with torch.no_grad():
        logits = hf_model(**encoded).logits[0, encoded["input_ids"][0].tolist().index(tok.mask_id)]
    top = logits.softmax(-1).topk(3)
    assert [token for _, _, token in fillings] == [hf_tok.decode([i]) for i in top.indices.tolist()]
    assert [score for _, score, _ in fillings] == pytest.approx(top.values.tolist(), abs=1e-5)


def test_the_old_import_path_still_gives_wordpiece_training():
    import roberta.wordpiece

    assert roberta.wordpiece.train_wordpiece is train_wordpiece
