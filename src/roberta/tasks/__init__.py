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
"""
