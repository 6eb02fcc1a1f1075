"""Tasks: one module per task family, each an `Objective` the one Trainer runs.

pretrain.py  masked LM (+ NSP for the pair-format ablations), `roberta pretrain`
"""
