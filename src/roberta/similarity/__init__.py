"""Semantic textual similarity, below both the task that trains a sentence encoder (`tasks/embed.py`)
and the evaluation that measures one (`evaluation/sts.py`): `pairs` reads tables of pairs of
texts, `metric` scores cosines against their gold scores (Pearson, Spearman)."""
