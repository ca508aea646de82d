"""Optimizers. Every update is copy-on-write (see ``optimizer.py``)."""

from .adam import Adam
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["SGD", "Adam", "Optimizer"]
