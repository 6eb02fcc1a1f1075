"""The `roberta` command puts large CPU tensors on transparent huge pages (torch's
THP_MEM_ALLOC_ENABLE, read once at torch's first allocation): set before torch is imported,
overridable from the environment, and the training numbers unchanged."""

import json
import os
import subprocess
import sys
from pathlib import Path

SETTING = "THP_MEM_ALLOC_ENABLE"
# What `roberta` does first (import its CLI module), then three seeded training steps of a model
# whose tensors are megabytes ([16, 128, 2048] activations: 16 MB; [2048, 8000] logits), dropout on.
PROBE = """
import json, os, resource, roberta.cli, torch
from roberta import RobertaConfig, RobertaModel
torch.manual_seed(0)
config = RobertaConfig(**{**RobertaConfig.preset("tiny").to_dict(), "num_layers": 2, "hidden_size": 256,
                          "num_heads": 4, "ffn_size": 2048, "vocab_size": 8000})
model = RobertaModel(config).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
tokens = torch.randint(4, 8000, (16, 128))
losses, faults = [], resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    loss = model.lm_logits(model(tokens).last_hidden_state).logsumexp(-1).mean()
    loss.backward(), optimizer.step(), optimizer.zero_grad()
    losses.append(loss.item())
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
print(json.dumps({"setting": os.environ.get("THP_MEM_ALLOC_ENABLE"), "losses": losses, "faults": faults}))
"""


def probe(**env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k != SETTING}
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**base, **env, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    return json.loads(out.splitlines()[-1])


def kernel_mode() -> str:
    """The kernel's THP mode: the bracketed word of always / madvise / never."""
    path = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    text = path.read_text() if path.exists() else "[never]"
    return text[text.index("[") + 1 : text.index("]")]


def test_the_command_puts_large_tensors_on_huge_pages_with_the_same_numbers():
    on, off = probe(), probe(**{SETTING: "0"})
    assert (on["setting"], off["setting"]) == ("1", "0")  # set by the command; the user's choice kept
    assert on["losses"] == off["losses"]  # the same arithmetic, to the bit
    if kernel_mode() == "madvise":  # where huge pages come only to memory that asks (torch's madvise)
        assert on["faults"] * 3 < off["faults"], (on["faults"], off["faults"])
