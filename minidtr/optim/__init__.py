"""Optimizers and learning-rate schedules. Every update is copy-on-write (see
``optimizer.py``)."""

from . import lr_scheduler
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "lr_scheduler"]
