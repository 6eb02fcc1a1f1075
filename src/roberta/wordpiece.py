"""WordPiece training moved to `roberta.tokenizer.training`, beside byte-level BPE's; this module
keeps `roberta.wordpiece.train_wordpiece` importable."""

from roberta.tokenizer.training import train_wordpiece

__all__ = ["train_wordpiece"]
