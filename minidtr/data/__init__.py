"""Datasets that work offline on a fresh machine, all seeded.

- ``digits``: the 8x8 handwritten digits that scikit-learn ships (1,797 images,
  10 classes), for the MLP, ResNet and DenseNet.
- ``listops``: generated ListOps-style expression trees (nested MAX, MIN, MED,
  SUM_MOD over digits), a tree of a different shape for every example, for the
  TreeLSTM.
- ``sequences``: generated counting sequences for next-token prediction, for
  the LSTM and the Transformer.
- ``shapes``: generated images of rectangles and discs on noise with per-pixel
  masks, for the U-Net.

Every generator takes a ``seed`` and gives the same arrays for the same seed on
every machine (NumPy's PCG64 ``default_rng``).
"""

from .batches import Split, minibatch_indices
from .digits import load_digits
from .listops import (
    ListOpsTree,
    PackedTrees,
    evaluate,
    generate_listops,
    parse_listops,
    tree_to_string,
)
from .sequences import counting_sequences
from .shapes import shapes_segmentation

__all__ = [
    "ListOpsTree",
    "PackedTrees",
    "Split",
    "counting_sequences",
    "evaluate",
    "generate_listops",
    "load_digits",
    "minibatch_indices",
    "parse_listops",
    "shapes_segmentation",
    "tree_to_string",
]
