"""The GPU path: bf16 autocast and the SDPA flash kernel, where a CUDA device is visible.

Skipped elsewhere (conftest). On a GPU: the base-width model in bf16 agrees with fp32 within
bf16's precision, its attention runs on the flash kernel (SDPA would raise if flash could not
take these inputs), and the micro pretraining job trains in bf16 with losses that fall.
"""

import json
import math

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import train_fixtures
from roberta import RobertaConfig, RobertaModel

pytestmark = pytest.mark.gpu


def test_bf16_forward_on_the_flash_kernel_matches_fp32():
    torch.manual_seed(0)
    model = RobertaModel(RobertaConfig.preset("base")).cuda().eval()
    tokens = torch.randint(4, 50000, (4, 512), device="cuda")
    tokens[:, 0], tokens[:, -1] = 0, 2
    with torch.no_grad():
        reference = model(tokens).last_hidden_state
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION), torch.autocast("cuda", dtype=torch.bfloat16):
            fast = model(tokens).last_hidden_state
    assert fast.dtype == torch.bfloat16
    cosine = torch.nn.functional.cosine_similarity(fast.float(), reference, dim=-1)
    assert cosine.min() > 0.99


def test_micro_job_trains_in_bf16_on_cuda(tmp_path):
    train_fixtures.run(
        tmp_path, ["--train.device=cuda", "--train.precision=bf16", "--train.max_steps=12", "--optim.lr=3e-3"]
    )
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    valid = [r["loss"] for r in records if r["split"] == "valid"]
    assert all(math.isfinite(loss) for loss in valid)
    assert valid[-1] < valid[0] - 0.2
