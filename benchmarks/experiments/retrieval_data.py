"""The files behind benchmarks/results/2026-11-27-retrieval.md (issue #47).

    retrieval_data.py squad --out DIR      SQuAD v1.1 dev in BEIR's layout: each question -> its paragraph
    retrieval_data.py squad2 --out DIR     SQuAD v2.0 dev: answerable questions, every paragraph (#47)
    retrieval_data.py transfer --out FILE  the distillation pairs of the retrieval students

`squad` writes DIR/corpus.jsonl (`_id`, `title`, `text`: every distinct paragraph once, its title
left empty so that a question is matched to the paragraph's text alone), DIR/queries.jsonl (`_id`
the question's SQuAD id, `text`) and DIR/qrels/dev.tsv (`query-id corpus-id score`, a header, score
1): BEIR's layout (Thakur et al. 2021), which `roberta evaluate retrieval` reads.

`transfer` writes the pairs `distill embed --pairs` reads (JSONL: sentence1, sentence2), never from
SQuAD or RACE text:
- passages: paragraphs of the books + Wikipedia corpus, each with a pseudo-query, one of its
  sentences, removed from the passage 90% of the time: the inverse cloze task (Lee et al. 2019, ORQA),
  so the teacher's question-to-passage geometry is seen in every batch. Every document that shares
  a 13-word sequence with SQuAD's dev files or RACE (GPT-3's contamination test, Brown et al. 2020)
  is left out whole.
- sentences: the earlier distillation sentences (GLUE's training sentences and short corpus lines,
  benchmarks/experiments/sentence_embeddings.py), as GLUE's pairs where they come in pairs (STS-B,
  MRPC, RTE) and as neighbours otherwise.
- questions (`--questions`): CommonsenseQA's training questions (its stems, never its dev split),
  paired as neighbours, so the student sees the teacher's vectors of questions, the form SQuAD's
  queries take, where the pseudo-queries are statements.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
NGRAM = 13  # Brown et al. 2020's contamination test
KEEP_QUERY = 0.1  # ORQA keeps the pseudo-query in its passage 10% of the time
SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[A-Z\"'(\[])")
WORD = re.compile(r"[a-z0-9]+")


def squad_beir(squad: Path, out: Path) -> dict:
    """SQuAD's dev JSON as a BEIR directory (v2.0: the answerable questions, every paragraph); the
    counts written."""
    data = json.loads(squad.read_text(encoding="utf-8"))["data"]
    corpus: dict[str, str] = {}  # paragraph text -> its id
    queries, qrels = [], []
    for a, article in enumerate(data):
        for p, paragraph in enumerate(article["paragraphs"]):
            pid = corpus.setdefault(paragraph["context"], f"{a}-{p}")
            for qa in paragraph["qas"]:
                if qa.get("is_impossible"):  # v2.0's unanswerable questions have no paragraph
                    continue
                queries.append({"_id": qa["id"], "text": qa["question"]})
                qrels.append(f"{qa['id']}\t{pid}\t1\n")
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for text, pid in corpus.items():
            f.write(json.dumps({"_id": pid, "title": "", "text": text}, ensure_ascii=False) + "\n")
    with open(out / "queries.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(q, ensure_ascii=False) + "\n" for q in queries)
    (out / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(qrels), encoding="utf-8")
    return {"paragraphs": len(corpus), "questions": len(queries)}


def ngrams(text: str) -> set[int]:
    words = WORD.findall(text.lower())
    return {hash(tuple(words[i : i + NGRAM])) for i in range(len(words) - NGRAM + 1)}


def held_out_ngrams(data: Path) -> set[int]:
    """Every 13-gram of SQuAD's dev files (contexts and questions) and of RACE's articles and questions."""
    found: set[int] = set()
    for name in ("dev-v1.1.json", "dev-v2.0.json"):
        for article in json.loads((data / "squad" / name).read_text(encoding="utf-8"))["data"]:
            for paragraph in article["paragraphs"]:
                found |= ngrams(paragraph["context"])
                for qa in paragraph["qas"]:
                    found |= ngrams(qa["question"])
    for path in (data / "race").rglob("*.txt"):
        item = json.loads(path.read_text(encoding="utf-8"))
        found |= ngrams(item["article"] + " " + " ".join(item["questions"]))
    return found


def documents(root: Path):
    """(source, paragraphs) of each document of the corpus (a blank line or a file's end ends one)."""
    for path in sorted(root.glob("*/*.txt")):
        doc: list[str] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                doc.append(line.strip())
            elif doc:
                yield path.parent.name, doc
                doc = []
        if doc:
            yield path.parent.name, doc


def ict_pair(paragraph: str, rng: random.Random) -> tuple[str, str] | None:
    """(pseudo-query, passage) of a paragraph of at least 3 sentences, or None."""
    sentences = SENTENCE_END.split(paragraph)
    candidates = [i for i, s in enumerate(sentences) if 30 <= len(s) <= 250]
    if len(sentences) < 3 or not candidates:
        return None
    i = rng.choice(candidates)
    kept = sentences if rng.random() < KEEP_QUERY else sentences[:i] + sentences[i + 1 :]
    return sentences[i], " ".join(kept)


def passage_pairs(data: Path, count: int, wiki_share: float, seed: int) -> tuple[list[tuple[str, str]], dict]:
    """`count` ICT pairs from the corpus's clean documents, `wiki_share` of them from Wikipedia."""
    held_out = held_out_ngrams(data)
    pools: dict[str, list[str]] = {"wiki": [], "books": []}
    dropped = {"wiki": 0, "books": 0}
    for source, doc in documents(data / "corpus"):
        if any(ngrams(p) & held_out for p in doc):
            dropped[source] += 1
            continue
        pools[source].extend(p for p in doc if 300 <= len(p) <= 2000)
    rng = random.Random(seed)
    pairs = []
    for source, n in (("wiki", round(count * wiki_share)), ("books", count - round(count * wiki_share))):
        pool = pools[source][:]
        rng.shuffle(pool)
        made = [pair for pair in (ict_pair(p, rng) for p in pool) if pair is not None][:n]
        pairs.extend(made)
    return pairs, {"documents_dropped": dropped, "paragraphs": {k: len(v) for k, v in pools.items()}}


def sentence_pairs(data: Path, work: Path, seed: int) -> list[tuple[str, str]]:
    """The earlier distillation sentences: GLUE's pairs as pairs, the rest paired with a neighbour."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sentence_embeddings import distillation_sentences

    sentences_file = work / "distill-sentences.txt"
    distillation_sentences(data, sentences_file, 25_000)
    sentences = sentences_file.read_text(encoding="utf-8").splitlines()
    rng = random.Random(seed)
    rng.shuffle(sentences)
    return [(sentences[i], sentences[i + 1]) for i in range(0, len(sentences) - 1, 2)]


def question_pairs(data: Path, seed: int) -> list[tuple[str, str]]:
    """CommonsenseQA's training questions, shuffled and paired as neighbours."""
    path = data / "commonsenseqa" / "train_rand_split.jsonl"
    questions = [json.loads(line)["question"]["stem"].strip() for line in path.open(encoding="utf-8")]
    rng = random.Random(seed)
    rng.shuffle(questions)
    return [(questions[i], questions[i + 1]) for i in range(0, len(questions) - 1, 2)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=["squad", "squad2", "transfer"])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--passages", type=int, default=20_000, help="ICT pairs (transfer)")
    parser.add_argument("--wiki-share", type=float, default=0.75, help="of the passages (transfer)")
    parser.add_argument("--no-sentences", action="store_true", help="transfer: passages only")
    parser.add_argument("--questions", action="store_true", help="transfer: CommonsenseQA's questions too")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.what in ("squad", "squad2"):
        name = "dev-v1.1.json" if args.what == "squad" else "dev-v2.0.json"
        print(json.dumps(squad_beir(args.data / "squad" / name, args.out)))
        return
    pairs, info = passage_pairs(args.data, args.passages, args.wiki_share, args.seed)
    info["passage_pairs"] = len(pairs)
    if not args.no_sentences:
        sentences = sentence_pairs(args.data, args.out.parent, args.seed)
        info["sentence_pairs"] = len(sentences)
        pairs += sentences
    if args.questions:
        questions = question_pairs(args.data, args.seed)
        info["question_pairs"] = len(questions)
        pairs += questions
    random.Random(args.seed).shuffle(pairs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for a, b in pairs:
            f.write(json.dumps({"sentence1": a, "sentence2": b}, ensure_ascii=False) + "\n")
    print(json.dumps(info))


if __name__ == "__main__":
    main()
