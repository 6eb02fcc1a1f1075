"""The training engine: one loop (`trainer.train`) for pretraining and every fine-tuning task.
It imports no task; a task (roberta.tasks) imports it and brings an `Objective`.

config.py      job configuration (TOML + `--section.key=value` overrides)
optim.py       AdamW parameter groups and learning-rate schedules
precision.py   autocast and fp16 dynamic loss scaling
distributed.py torchrun process groups, DDP / FSDP2 wrapping, gradient-sync control, the
               optimizer and model state gathered whole from FSDP2's shards
run_state.py   a run's atomic checkpoints and exact-resume state (and whether a checkpoint fits)
metrics.py     metrics.jsonl, TensorBoard, curves.png, MFU; `TrainingMetrics`, what a run reports
checkpointer.py `Checkpointer`: what a run keeps on disk (step-N, best/) and has written
objective.py   the `Objective` a task brings to the loop
evaluation.py  held-out evaluation, and the sums all ranks add up
trainer.py     the loop, read as its parts (`train_step`, logging, evaluation keeping the best,
               checkpoint writing)
"""
