"""The parts of benchmarks/gpu_check.py, a module per family: the plan and what the parts share
(common), the environment and the data (setup), the training path (training), the CLI runs
(runs), fine-tuning, embedding and serving beside HF (tasks)."""
