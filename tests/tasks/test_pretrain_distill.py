"""`roberta pretrain --teacher` (DistilBERT's soft targets and cosine loss) and `--init-layers`."""

import json

import pytest
import torch
import torch.nn.functional as F
from test_train_pretrain import pretrain

from roberta import checkpoint
from roberta.config import RobertaConfig
from roberta.data.masking import IGNORE_INDEX
from roberta.model import RobertaModel
from roberta.tasks.pretrain import MaskedLM, mlm_loss
from roberta.tasks.pretrain_distill import Teacher

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def teacher_run(micro_corpus, tmp_path_factory):
    """A 3-layer micro run to distil from (its last checkpoint)."""
    run = tmp_path_factory.mktemp("teacher") / "run"
    assert pretrain(micro_corpus, run, "--train.max_steps=3", "--model.num_layers=3") == 0
    return run / "checkpoints" / "step-00000003"


def test_the_distillation_terms_equal_their_definitions():
    """Soft targets: T² KL(teacher/T || student/T) summed over the masked positions, times its
    weight; cosine: 1 - cos of the last hidden states summed over the real positions, times its."""
    torch.manual_seed(0)
    config = RobertaConfig(
        vocab_size=50,
        hidden_size=16,
        num_layers=2,
        num_heads=2,
        ffn_size=32,
        max_positions=20,
        dropout=0.0,
        attention_dropout=0.0,
    )
    student, teacher = RobertaModel(config).train(), RobertaModel(config).eval()
    tokens = torch.randint(3, 50, (2, 7))
    tokens[1, 5:] = config.padding_idx
    labels = torch.full_like(tokens, IGNORE_INDEX)
    labels[0, 2], labels[1, 1], labels[1, 3] = 7, 8, 9
    weights = Teacher(teacher, temperature=3.0, soft_weight=2.5, cosine_weight=0.5)
    out = mlm_loss(student, {"tokens": tokens, "labels": labels}, MaskedLM(teacher=weights))

    selected = labels.ne(IGNORE_INDEX)
    s_hidden, t_hidden = student(tokens).last_hidden_state, teacher(tokens).last_hidden_state
    p_teacher = F.softmax(teacher.lm_logits(t_hidden, selected) / 3.0, -1)
    log_p_student = F.log_softmax(student.lm_logits(s_hidden, selected) / 3.0, -1)
    kl = (p_teacher * (p_teacher.log() - log_p_student)).sum()
    real = tokens.ne(config.padding_idx)
    cosine = (1 - F.cosine_similarity(s_hidden[real], t_hidden[real], dim=-1)).sum()
    assert torch.allclose(out["soft"], 2.5 * 9.0 * kl, rtol=1e-4)
    assert torch.allclose(out["cosine"], 0.5 * cosine, rtol=1e-4)
    ce = F.cross_entropy(student.lm_logits(s_hidden, selected), labels[selected], reduction="sum")
    assert torch.allclose(out["mlm"], ce, rtol=1e-4)

    # Held out (eval mode), the student's own figures only.
    assert set(mlm_loss(student.eval(), {"tokens": tokens, "labels": labels}, MaskedLM(teacher=weights))) == {
        "mlm",
        "mlm_correct",
    }


def test_a_student_from_every_other_teacher_layer_distils_and_resumes_exactly(
    micro_corpus, teacher_run, tmp_path
):
    """--init-from T --init-layers 0,2 starts from T's embeddings, layers 0 and 2 and LM head;
    --teacher T adds the logged soft and cosine terms; a run resumed halfway ends with the
    weights of one that ran straight through."""
    common = ["--init-from", str(teacher_run), "--init-layers", "0,2", "--teacher", str(teacher_run)]
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    assert pretrain(micro_corpus, straight, "--train.max_steps=6", *common) == 0
    assert pretrain(micro_corpus, halves, "--train.max_steps=3", *common) == 0
    assert pretrain(micro_corpus, halves, "--train.max_steps=6", "--resume", *common) == 0
    a = checkpoint.load(straight / "checkpoints" / "step-00000006")[0].state_dict()
    b = checkpoint.load(halves / "checkpoints" / "step-00000006")[0].state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    records = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "soft_loss" in r]
    assert len(train) == 6 and all(r["soft_loss"] > 0 and r["cosine_loss"] > 0 for r in train)
    job = json.loads((straight / "job.json").read_text())
    assert job["init_layers"] == [0, 2] and job["distill"]["teacher"] == str(teacher_run)


def test_init_layers_copies_the_chosen_layers(micro_corpus, teacher_run, tmp_path):
    """At a learning rate of ~0 the student's layer 1 is the teacher's layer 2, its embeddings
    the teacher's."""
    run = tmp_path / "copy"
    extra = ["--init-from", str(teacher_run), "--init-layers", "0,2", "--optim.lr=1e-12"]
    assert pretrain(micro_corpus, run, "--train.max_steps=1", *extra) == 0
    student = checkpoint.load(run / "checkpoints" / "step-00000001")[0]
    teacher = checkpoint.load(teacher_run)[0]
    assert student.config.num_layers == 2
    for mine, theirs in ((student.layers[0], teacher.layers[0]), (student.layers[1], teacher.layers[2])):
        for p, q in zip(mine.parameters(), theirs.parameters(), strict=True):
            assert torch.allclose(p, q, atol=1e-6)
    assert torch.allclose(student.embed_tokens.weight, teacher.embed_tokens.weight, atol=1e-6)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--init-layers", "0,5", "--init-from", "TEACHER"], "--init-layers 0,5"),
        (["--init-layers", "0,0", "--init-from", "TEACHER"], "distinct layers"),
        (["--init-layers", "a", "--init-from", "TEACHER"], "--init-layers 'a'"),
        (["--init-layers", "0"], "give --model too"),
        (["--temperature", "2"], "need --teacher"),
        (["--teacher", "TEACHER", "--temperature", "0"], "field 'temperature' must be positive"),
        # The micro student is 64 wide, the teacher too: a wider student has no cosine partner.
        (["--teacher", "TEACHER", "--cosine-weight", "1", "--model.hidden_size=32"], "equal widths"),
    ],
)
def test_distillation_mistakes_are_one_line_errors(micro_corpus, teacher_run, tmp_path, capsys, extra, named):
    run = tmp_path / "refused"
    extra = [str(teacher_run) if e == "TEACHER" else e for e in extra]
    assert pretrain(micro_corpus, run, "--train.max_steps=1", *extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0], err
    assert not run.exists()


def test_a_teacher_that_cannot_teach_is_refused_before_the_run_starts(
    micro_corpus, teacher_run, tmp_path, capsys
):
    """No masked-LM head (its stand-in head would teach random targets), or fewer positions than
    the job's sequences: one line naming the teacher and the cause, no run directory."""
    model, tokenizer = checkpoint.load(teacher_run)
    headless = checkpoint.save(tmp_path / "headless", checkpoint.mark_without_lm_head(model, "hf"), tokenizer)
    short = RobertaModel(RobertaConfig(**{**model.config.to_dict(), "max_positions": 20}))
    short_teacher = checkpoint.save(tmp_path / "short", short, tokenizer)
    cases = [
        (headless, "holds no masked-LM head", "pretrain --teacher"),
        (short_teacher, "the teacher reads at most 18 tokens, but the job's sequences are 32", "short"),
    ]
    for teacher, cause, named in cases:
        run = tmp_path / "refused"
        assert pretrain(micro_corpus, run, "--train.max_steps=1", "--teacher", str(teacher)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and cause in err[0] and named in err[0], err
        assert not run.exists()


def test_a_resume_with_another_teacher_setting_is_refused(micro_corpus, teacher_run, tmp_path, capsys):
    run = tmp_path / "run"
    assert pretrain(micro_corpus, run, "--train.max_steps=1", "--teacher", str(teacher_run)) == 0
    before = (run / "job.json").read_text()
    capsys.readouterr()
    assert pretrain(micro_corpus, run, "--train.max_steps=2", "--resume") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "field 'distill'" in err[0], err
    assert (run / "job.json").read_text() == before


def test_the_help_states_the_defaults_the_code_uses(capsys):
    """The help shows the defaults the code uses: one declaration (options.pretrain) for both."""
    from roberta.cli import main
    from roberta.tasks.pretrain_distill import COSINE_WEIGHT, SOFT_WEIGHT, PretrainDistillation

    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"(default {SOFT_WEIGHT})" in text and f"(default {COSINE_WEIGHT} where" in text
    assert f"(default {PretrainDistillation('x').temperature:g})" in text
