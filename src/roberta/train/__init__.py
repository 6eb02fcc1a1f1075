"""Training: one loop (`trainer.train`) for pretraining and fine-tuning, and what it is built from.

config.py      job configuration (TOML + `--section.key=value` overrides)
optim.py       AdamW parameter groups and learning-rate schedules
precision.py   autocast and fp16 dynamic loss scaling
distributed.py torchrun process groups, DDP / FSDP2 wrapping, gradient-sync control
checkpoints.py a run's atomic checkpoints and exact-resume state
metrics.py     metrics.jsonl, TensorBoard, curves.png, MFU
trainer.py     the loop and the `Objective` a task brings to it
mlm.py         the pretraining objective (masked LM, + NSP for the pair formats)
pretrain.py    corpus + job → run directory (`roberta pretrain`)
"""

from roberta.train.config import JobConfig, load_job_config
from roberta.train.pretrain import pretrain
from roberta.train.trainer import Objective, TrainingDiverged, TrainResult, train

__all__ = ["JobConfig", "Objective", "TrainResult", "TrainingDiverged", "load_job_config", "pretrain", "train"]
