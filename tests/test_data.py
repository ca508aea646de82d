"""The dataset generators: seeded, well-formed, and the labels mean what the docs say."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest

from minidtr.data import (
    counting_sequences,
    evaluate,
    generate_listops,
    load_digits,
    minibatch_indices,
    parse_listops,
    shapes_segmentation,
    tree_to_string,
)


def test_digits_split_shapes_and_range():
    pytest.importorskip("sklearn")
    split = load_digits(seed=0)
    assert split.train_x.shape[1:] == (1, 8, 8) and split.train_x.dtype == np.float32
    assert len(split.train_y) + len(split.test_y) == 1797
    assert split.train_x.min() >= 0.0 and split.train_x.max() <= 1.0
    assert set(np.unique(split.train_y)) == set(range(10))
    again = load_digits(seed=0)
    assert np.array_equal(split.test_y, again.test_y)
    other = load_digits(seed=1)
    assert not np.array_equal(split.test_y, other.test_y)


def test_digits_without_sklearn_says_how_to_install(monkeypatch):
    from minidtr.data import digits

    real_find_spec = digits.importlib.util.find_spec

    def no_sklearn(name, *args, **kwargs):
        return None if name == "sklearn" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(digits.importlib.util, "find_spec", no_sklearn)
    with pytest.raises(ImportError, match="scikit-learn"):
        load_digits()


def test_digits_are_sklearns_read_without_importing_it(monkeypatch):
    """The file scikit-learn ships, read directly: the same values as its loader gives,
    without the import (a subprocess, as this one may have imported it); where the
    file is not, scikit-learn's loader reads it."""
    datasets = pytest.importorskip("sklearn.datasets")
    from minidtr.data import digits

    bunch = datasets.load_digits()
    table = digits.digits_table()
    assert np.array_equal(table[:, :64], bunch.data) and np.array_equal(table[:, 64], bunch.target)
    code = "import sys, minidtr.data as d; d.load_digits(); print('sklearn' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
    monkeypatch.setattr(digits.pathlib.Path, "is_file", lambda path: False)
    assert np.array_equal(digits.digits_table(), table)


@pytest.mark.parametrize(
    "text, value",
    [
        ("[MAX 3 [MIN 4 7] 2]", 4),
        ("[MIN 9 2 5]", 2),
        ("[MED 1 8 3 5]", 3),  # lower median of 1 3 5 8
        ("[MED 7 2 4]", 4),
        ("[SUM_MOD 9 8 [MAX 1 5]]", 2),  # 22 mod 10
    ],
)
def test_listops_evaluates_by_the_documented_rules(text, value):
    tree = parse_listops(text)
    assert evaluate(tree) == value
    assert tree_to_string(tree) == text


@pytest.mark.parametrize(
    "bad",
    ["[MAX 3", "MAX 3 4", "[FOO 1 2]", "[MIN 3]", "[MAX 1 2] 3", "12", "MAX 3", "MIN [MAX 1 2]"],
)
def test_listops_parse_rejects_malformed(bad):
    with pytest.raises(ValueError):
        parse_listops(bad)


def test_listops_generator_is_seeded_and_varied():
    split = generate_listops(n=300, seed=3, max_depth=3, max_args=4)
    again = generate_listops(n=300, seed=3, max_depth=3, max_args=4)
    assert [str(t) for t in split.train_x] == [str(t) for t in again.train_x]
    assert all(evaluate(t) == y for t, y in zip(split.train_x, split.train_y, strict=True))
    assert all(1 <= t.height() <= 3 for t in split.train_x)
    assert all(2 <= len(t.children) <= 4 for t in split.train_x)
    shapes = {str(t).translate(str.maketrans("0123456789", "dddddddddd")) for t in split.train_x}
    assert len(shapes) > 100, "trees should come in many shapes"
    assert len(np.unique(split.train_y)) == 10


def test_packed_trees_give_back_the_trees_and_hold_no_node_objects():
    """The split keeps its trees as arrays (PackedTrees): each read rebuilds the tree
    it was given, equal node for node, and 2,000 trees leave no per-node objects for
    Python's cycle collector to walk (about 140,000 as a list of trees)."""
    import gc

    from minidtr.data.listops import PackedTrees, random_tree

    rng = np.random.default_rng(1)
    trees = [random_tree(rng, 4, 4, 0.4) for _ in range(40)] + [parse_listops("7")]
    packed = PackedTrees(trees)
    assert len(packed) == 41 and list(packed) == trees
    assert packed[-1] == trees[-1] and packed[3:9] == trees[3:9] and packed[::7] == trees[::7]
    with pytest.raises(IndexError, match="41 trees"):
        packed[41]
    gc.collect()
    before = len(gc.get_objects())
    split = generate_listops(n=2000, seed=0, max_depth=5, max_args=4, leaf_probability=0.3)
    gc.collect()
    assert len(gc.get_objects()) - before < 100
    assert sum(t.size() for t in split.train_x) > 20_000


def test_counting_sequences_follow_the_grammar():
    split = counting_sequences(n=100, length=10, vocab=16, max_stride=3, seed=0)
    x, y = split.train_x, split.train_y
    assert x.shape == (80, 10) and y.shape == (80, 10) and x.dtype == np.int64
    assert np.array_equal(x[:, 1:], y[:, :-1])
    stride = (x[:, 1] - x[:, 0]) % 16
    assert set(np.unique(stride)) <= {1, 2, 3}
    assert np.array_equal((x + stride[:, None]) % 16, y)


def test_shapes_segmentation_masks_match_images():
    split = shapes_segmentation(n=50, size=16, seed=0)
    images, masks = split.train_x, split.train_y
    assert images.shape == (40, 1, 16, 16) and masks.shape == (40, 16, 16)
    assert set(np.unique(masks)) == {0, 1, 2}
    inside, outside = images[:, 0][masks > 0], images[:, 0][masks == 0]
    assert inside.mean() > 0.8 and abs(outside.mean()) < 0.1
    again = shapes_segmentation(n=50, size=16, seed=0)
    assert np.array_equal(images, again.train_x)


def test_minibatch_indices_cover_each_epoch_once():
    stream = minibatch_indices(10, 3, seed=0)
    epoch = np.concatenate([next(stream) for _ in range(3)])
    assert len(set(epoch.tolist())) == 9
    with pytest.raises(ValueError, match="batch"):
        next(minibatch_indices(5, 6, seed=0))


@pytest.mark.parametrize(
    "make, error",
    [
        (
            lambda: counting_sequences(seed=-1),
            "counting_sequences: seed must be in [0, 2**64), got -1",
        ),
        (lambda: counting_sequences(n=-5), "counting_sequences: n must be at least 2, got -5"),
        (lambda: shapes_segmentation(n=-1), "shapes_segmentation: n must be at least 2, got -1"),
        (
            lambda: shapes_segmentation(n=5, max_shapes=0),
            "shapes_segmentation: max_shapes must be at least 1, got 0",
        ),
        (
            lambda: shapes_segmentation(n=5, noise=-1),
            "shapes_segmentation: noise must be a finite number >= 0, got -1",
        ),
        (lambda: generate_listops(n=-1), "generate_listops: n must be at least 2, got -1"),
        (
            lambda: generate_listops(n=5, leaf_probability=2.0),
            "generate_listops: leaf_probability must be in [0, 1], got 2.0",
        ),
        (
            lambda: generate_listops(n=5, leaf_probability=-1.0),
            "generate_listops: leaf_probability must be in [0, 1], got -1.0",
        ),
        (
            lambda: minibatch_indices(10, 2, seed=-1),
            "minibatch_indices: seed must be in [0, 2**64), got -1",
        ),
    ],
)
def test_a_bad_argument_is_named_with_its_function_and_value(make, error):
    """NumPy's own errors ("expected non-negative integer", "low >= high") name neither
    the argument nor the function; an empty or impossible split is refused, not made."""
    with pytest.raises(ValueError) as raised:
        make()
    assert str(raised.value) == error


def test_load_digits_names_a_bad_seed():
    pytest.importorskip("sklearn")
    with pytest.raises(ValueError, match=r"^load_digits: seed must be in \[0, 2\*\*64\), got -1$"):
        load_digits(seed=-1)


def test_counting_sequences_only_the_first_target_is_a_guess():
    """docs/models.md's bound on accuracy: the first target is one of max_stride tokens
    equally likely, every later one follows from the two tokens before it."""
    split = counting_sequences(n=3000, length=16, vocab=16, max_stride=3, seed=0)
    x, y = split.train_x, split.train_y
    stride = (x[:, 1] - x[:, 0]) % 16
    assert np.array_equal(y[:, 1:], (x[:, 1:] + stride[:, None]) % 16)
    first = (y[:, 0] - x[:, 0]) % 16
    shares = np.bincount(first, minlength=16)[1:4] / len(first)
    assert set(np.unique(first)) == {1, 2, 3} and np.allclose(shares, 1 / 3, atol=0.03)
    docs = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "models.md").read_text()
    text = " ".join(docs.split())
    assert f"(1/3 + 15)/16 ≈ {(1 / 3 + 15) / 16:.1%}" in text
    assert f"(1/3 + 11)/12 ≈ {(1 / 3 + 11) / 12:.1%}" in text
