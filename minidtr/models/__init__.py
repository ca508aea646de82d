"""Models that train under a memory budget, each paired with an offline dataset.

``make_task(name, size, seed)`` builds a model with its data, loss and metric;
``MODELS`` lists them: mlp, resnet, densenet, unet, lstm, transformer,
treelstm. The model classes can be used on their own.
"""

from .densenet import DenseNet
from .lstm import LSTMModel
from .mlp import MLP
from .resnet import ResNet
from .tasks import MODELS, SIZES, Task, make_task
from .transformer import Transformer
from .treelstm import TreeLSTM
from .unet import UNet

__all__ = [
    "MLP",
    "MODELS",
    "SIZES",
    "DenseNet",
    "LSTMModel",
    "ResNet",
    "Task",
    "Transformer",
    "TreeLSTM",
    "UNet",
    "make_task",
]
