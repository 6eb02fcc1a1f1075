"""Tasks: one module per task family, each an `Objective` the one Trainer runs.

pretrain.py  masked LM (+ NSP for the pair-format ablations), `roberta pretrain`
glue.py      the nine GLUE tasks: file layouts, label names, defaults, official metrics, leaderboard TSVs
classify.py  the user's own CSV/TSV/JSONL classification or regression data, label sets
rows.py      rows of TSV/CSV/JSONL files, with errors naming file and line
squad_data.py SQuAD v1.1/v2.0 without torch, the names of `roberta.qa` (reader, windows, decoding,
             official metrics) kept importable here
squad.py     the SQuAD objective (span head, v2.0's answerable classifier) and `roberta finetune squad`
finetune.py  what every fine-tuning task shares: the job, the starting model and its heads, the runs
race.py      RACE: reader, the 4 encoded choices per question, accuracy by level
choice.py    multiple choice, one path (a ranking head, softmax over options): RACE, CommonsenseQA,
             WinoGrande and the user's own question/options/answer rows
candidate_scoring.py  Winograd schemas through the masked LM: the scoring, the losses, WSC's objective
winograd_data.py  SuperGLUE WSC (span placement), WSC273, WinoGrande, WNLI pairs read as schemas
noun_phrases.py   candidate noun phrases by rules (fairseq used spaCy's noun chunks)
winograd.py  zero-shot scoring and the leaderboard files (WSC, WNLI, WinoGrande, CommonsenseQA)
"""
