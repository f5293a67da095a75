"""minbert: a from-scratch, readable BERT that loads public checkpoints and carries research extensions."""

from .checkpoint import CheckpointError, load_pretrained, save_pretrained
from .config import BertConfig
from .model import BertModel, BertOutput, attention
from .optim import AdamW
from .tokenizer import Batch, Tokenizer

__all__ = [
    "AdamW", "Batch", "BertConfig", "BertModel", "BertOutput", "CheckpointError", "Tokenizer",
    "attention", "load_pretrained", "save_pretrained",
]
__version__ = "0.1.0"
