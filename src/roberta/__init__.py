"""roberta: RoBERTa pretraining, fine-tuning and inference, exact to fairseq and HF transformers.

The top-level names load on first use, so `import roberta.model` (or `roberta.data`) pulls in
only what that module needs, not the hub and its tokenizer engines.
"""

from importlib import import_module

_EXPORTS = {
    "Roberta": "roberta.hub",
    "load": "roberta.hub",
    "RobertaConfig": "roberta.config",
    "RobertaModel": "roberta.model",
    "UserError": "roberta.errors",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'roberta' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
