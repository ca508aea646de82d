"""scaled_dot_product_attention through the generic harness, against a NumPy reference
and PyTorch's ``scaled_dot_product_attention``; and what it keeps for backward."""

import numpy as np
import pytest

import minidtr as md
from minidtr.testing import assert_remat_equivalent, isolated_allocator
from op_harness import OpCase, define_tests

SHAPES = [((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 7)), ((4, 3), (4, 3), (4, 2))]


def reference(q, k, v, mask=None, causal=False, scale=None, dropout=None):
    """The formula in float64, rounded to q's dtype; ``dropout`` (chance, seed): the
    probabilities dropped where the seed's float32 uniforms, in the scores' C order, are
    below the chance."""
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = q64 @ np.swapaxes(k64, -1, -2) * scale
    if mask is not None and mask.dtype == np.bool_:
        scores = np.where(mask, scores, -np.inf)
    elif mask is not None:
        scores = scores + mask
    if causal:
        scores = np.where(np.triu(np.ones(scores.shape[-2:], bool), 1), -np.inf, scores)
    top = scores.max(axis=-1, keepdims=True)
    empty = top == -np.inf  # nothing to attend to: 0 (PyTorch since 2.5)
    p = np.exp(scores - np.where(empty, 0.0, top))
    p = p / np.where(empty, 1.0, p.sum(axis=-1, keepdims=True))
    if dropout is not None:
        chance, seed = dropout
        uniforms = np.random.default_rng(seed).random(p.size, dtype=np.float32)
        p = p * (uniforms.reshape(p.shape) >= chance) / (1 - chance)
    return (p @ v64).astype(q.dtype)


def with_mask(kind, empty_row=False):
    """q, k, v and a (L, S) mask: boolean (most True, every row some), or additive; with
    ``empty_row`` the second row masks out everything (False, or -inf)."""

    def make(rng, shapes, dtype):
        q, k, v = (rng.standard_normal(s).astype(dtype) for s in shapes[:3])
        keep = rng.random(shapes[3]) < 0.7
        keep[..., 0] = True
        if empty_row:
            keep[1] = False
        hidden = -np.inf if empty_row else -2.0
        mask = keep if kind == "bool" else np.where(keep, 0.0, hidden).astype(dtype)
        return [q, k, v, mask]

    return make


def torch_sdpa(**kwargs):
    return lambda t, q, k, v, *mask: t.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask[0] if mask else None, **kwargs
    )


SDPA = md.scaled_dot_product_attention
MASKED = [(*s, (s[0][-2], s[1][-2])) for s in SHAPES]

CASES = [
    OpCase("scaled_dot_product_attention", SDPA, reference, SHAPES, torch_fn=torch_sdpa(),
           bad=[((2, 5, 4), (2, 6, 3), (2, 6, 7)), ((2, 5, 4), (3, 6, 4), (3, 6, 7)),
                ((5, 4), (6, 4), (5, 7)), ((5, 4), (0, 4), (0, 7))]),
    OpCase("scaled_dot_product_attention[causal]", lambda q, k, v: SDPA(q, k, v, causal=True),
           lambda q, k, v: reference(q, k, v, causal=True), SHAPES,
           torch_fn=torch_sdpa(is_causal=True)),
    OpCase("scaled_dot_product_attention[scale]", lambda q, k, v: SDPA(q, k, v, scale=0.3),
           lambda q, k, v: reference(q, k, v, scale=0.3), SHAPES, torch_fn=torch_sdpa(scale=0.3)),
    OpCase("scaled_dot_product_attention[bool mask]",
           lambda q, k, v, m: SDPA(q, k, v, mask=m), reference, MASKED, make=with_mask("bool"),
           grad_inputs=(0, 1, 2), torch_fn=torch_sdpa(),
           bad=[[np.ones((2, 5, 4), np.float32), np.ones((2, 6, 4), np.float32),
                 np.ones((2, 6, 3), np.float32), np.ones((5, 5), bool)]]),
    OpCase("scaled_dot_product_attention[dropout]",
           lambda q, k, v: SDPA(q, k, v, dropout_p=0.3, causal=True, seed=11),
           lambda q, k, v: reference(q, k, v, causal=True, dropout=(0.3, 11)), SHAPES),
    OpCase("scaled_dot_product_attention[float mask]",
           lambda q, k, v, m: SDPA(q, k, v, mask=m), reference, MASKED, make=with_mask("float"),
           grad_inputs=(0, 1, 2), torch_fn=torch_sdpa()),
    OpCase("scaled_dot_product_attention[empty row, bool]",
           lambda q, k, v, m: SDPA(q, k, v, mask=m), reference, MASKED,
           make=with_mask("bool", empty_row=True), grad_inputs=(0, 1, 2), torch_fn=torch_sdpa()),
    OpCase("scaled_dot_product_attention[empty row, -inf]",
           lambda q, k, v, m: SDPA(q, k, v, mask=m), reference, MASKED,
           make=with_mask("float", empty_row=True), grad_inputs=(0, 1, 2), torch_fn=torch_sdpa()),
]  # fmt: skip

globals().update(define_tests(CASES))


def test_only_the_inputs_are_kept_for_backward():
    """Between the forward and the backward the fused op holds its inputs and its output
    only; the unfused form also holds the (..., L, S) probabilities for its backward."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((4, 64, 16)).astype(np.float32) for _ in range(3)]

    def held_after_forward(fused: bool) -> int:
        with isolated_allocator() as allocator, md.Runtime():
            q, k, v = (md.tensor(a, requires_grad=True) for a in arrays)
            if fused:
                out = md.scaled_dot_product_attention(q, k, v)
            else:
                out = md.softmax((q @ md.transpose(k, (0, 2, 1))) * 0.25, axis=-1) @ v
            held = allocator.ledger.memory
            out.sum().backward()
            return held

    inputs_and_output = 4 * 4 * 64 * 16 * 4
    probabilities = 4 * 64 * 64 * 4
    assert held_after_forward(fused=True) == inputs_and_output
    assert held_after_forward(fused=False) >= inputs_and_output + probabilities


def test_bad_arguments_name_the_op():
    q = md.ones((2, 3))
    with pytest.raises(ValueError, match="scaled_dot_product_attention: the mask gets no"):
        md.scaled_dot_product_attention(q, q, q, mask=md.zeros((2, 2), requires_grad=True))
    with pytest.raises(TypeError, match="causal must be True or False"):
        md.scaled_dot_product_attention(q, q, q, causal=1)
    with pytest.raises(ValueError, match="scale must be a positive number"):
        md.scaled_dot_product_attention(q, q, q, scale=-1.0)
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got 1.0"):
        md.scaled_dot_product_attention(q, q, q, dropout_p=1.0)
    with pytest.raises(TypeError, match="dropout_p must be a number"):
        md.scaled_dot_product_attention(q, q, q, dropout_p="0.1")
    with pytest.raises(TypeError, match="scaled_dot_product_attention: k must be a Tensor"):
        md.scaled_dot_product_attention(q, np.ones((2, 3)), q)


def test_budgeted_runs_are_bit_identical():
    """Six attention layers and their backward under budgets that evict: the same bits."""

    def program():
        rng = np.random.default_rng(0)
        x = md.tensor(rng.standard_normal((2, 4, 32, 8)).astype(np.float32), requires_grad=True)
        w = md.tensor(rng.standard_normal((8, 8)).astype(np.float32) / 3, requires_grad=True)
        h = x
        for _ in range(6):
            h = md.tanh(md.scaled_dot_product_attention(h @ w, h, h, causal=True))
        (h * h).sum().backward()
        return {"h": h, "grads": [x.grad, w.grad]}

    reports = assert_remat_equivalent(program, budgets=[0.8, 0.6], heuristics=["dtr", "lru"])
    assert any(r["remats"] > 0 for r in reports)


def test_explain_keeps_its_columns_for_the_long_names():
    """``minidtr explain``'s tables by op widen to the longest name shown."""
    from minidtr.explain import NAME_COLUMN_MAX, _name_width, explain, summarize

    rng = np.random.default_rng(0)
    x = md.tensor(rng.standard_normal((2, 2, 32, 8)).astype(np.float32), requires_grad=True)

    def step():
        h = x
        for _ in range(6):
            h = md.tanh(md.scaled_dot_product_attention(h * 0.5, h, h, causal=True))
        (h * h).sum().backward()

    with isolated_allocator():
        with md.Runtime() as unbounded:
            step()
        with md.Runtime(
            budget=int(0.7 * unbounded.stats()["peak_memory"]), record_events=True
        ) as rt:
            step()
        text = explain(summarize([rt.header(), *rt.events]))
    for title, word in (("Evictions forced", " evicted "), ("Costliest, by op", " recomputations")):
        rows = text.split(title, 1)[1].split("\n\n")[0].splitlines()
        starts = {row.index(word) for row in rows if word in row and row.startswith("  ")}
        assert len(starts) == 1, rows
    # a name from a crafted log overflows its column instead of widening every row to it
    assert _name_width([("x" * 10**6, 1), ("tanh", 1)]) == NAME_COLUMN_MAX


def test_dropout_is_its_seeds():
    """The same seed drops the same probabilities (forward and backward alike: the harness
    checks the gradient and every recompute); another seed others; no seed draws one."""
    rng = np.random.default_rng(0)
    q, k, v = (md.tensor(rng.standard_normal((2, 16, 4)).astype(np.float32)) for _ in range(3))
    a, b, c = (
        md.scaled_dot_product_attention(q, k, v, dropout_p=0.5, seed=s).numpy() for s in (1, 1, 2)
    )
    assert a.tobytes() == b.tobytes() != c.tobytes()
    md.manual_seed(3)
    d = md.scaled_dot_product_attention(q, k, v, dropout_p=0.5).numpy()
    md.manual_seed(3)
    assert d.tobytes() == md.scaled_dot_product_attention(q, k, v, dropout_p=0.5).numpy().tobytes()


def test_chunks_give_the_bits_of_one_batched_product(monkeypatch):
    """The kernels take a few indices of the first axis at a time: the values and the
    gradients are those of taking all of them at once (dropout's stream included)."""
    from minidtr.ops import attention

    rng = np.random.default_rng(0)
    shapes = [(8, 4, 96, 32), (8, 4, 128, 32), (8, 4, 128, 48)]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    assert attention._rows(*shapes) < shapes[0][0]

    def run():
        q, k, v = (md.tensor(a, requires_grad=True) for a in arrays)
        out = md.scaled_dot_product_attention(q, k, v, causal=True, dropout_p=0.1, seed=3)
        (out * out).sum().backward()
        return [t.numpy().tobytes() for t in (out, q.grad, k.grad, v.grad)]

    chunked = run()
    monkeypatch.setattr(attention, "_rows", lambda *shapes: 10**9)
    assert run() == chunked
