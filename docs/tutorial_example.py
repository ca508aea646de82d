"""The example that docs/tutorial.md walks through (run it: python docs/tutorial_example.py).

A chain of six tanh layers, trained for one step twice: once without a
budget, then under a budget too small to keep every activation. Costs use the
deterministic ``flops`` model, so every number printed is the same on every
machine.
"""

import numpy as np

import minidtr as md
from minidtr.explain import explain, runtime_header, summarize

rng = np.random.default_rng(0)
weights = [
    md.tensor(rng.normal(0, 0.3, (32, 32)).astype(np.float32), requires_grad=True) for _ in range(6)
]
inputs = rng.normal(size=(128, 32)).astype(np.float32)


def step():
    h = md.tensor(inputs)
    for w in weights:
        h = md.tanh(h @ w)
    loss = (h * h).mean()
    loss.backward()
    return loss


# 1. Unbounded: how much memory does one step need?
free = md.Runtime(cost="flops")
with free:
    loss = step()
print(
    f"unbounded: loss {loss.item():.6f}, peak {free.stats()['peak_memory']:,} bytes, "
    f"{free.stats()['ops']} ops"
)
expected = [w.grad.numpy() for w in weights]
for w in weights:
    w.grad = None
del loss

# 2. Look inside: after a forward pass, every activation is a storage with a recipe.
with md.Runtime(cost="flops") as rt:
    x = md.tensor(np.ones((128, 32), np.float32))
    a = x @ weights[0]
    b = md.tanh(a)
    c = md.tanh(b @ weights[1])
    allocator = rt.allocator
    context = allocator.eviction.context  # what a score reads: the clock, e*
    for name, t in (("a", a), ("b", b), ("c", c)):
        s = t.storage
        print(
            f"{name}: storage #{s.id} made by {s.producer.op.name}, {s.nbytes} bytes, "
            f"cost {s.cost:.0f}, last access at clock {s.last_access:.0f} "
            f"(now {allocator.clock:.0f}), h_DTR score {rt.heuristic.score(s, context):.3g}"
        )
    allocator.evict(b.storage)
    print(
        f"evicted b: resident={b.is_resident}; reading it recomputes tanh(a): "
        f"{np.array_equal(b.numpy(), np.tanh(a.numpy()))}, resident={b.is_resident}, "
        f"remats={rt.stats()['remats']}"
    )
    del x, a, b, c, t, s  # every handle, so nothing of this section stays resident

# 3. Under a budget of 85% of the peak, with the event log on.
budget = int(0.85 * free.stats()["peak_memory"])
tight = md.Runtime(budget=budget, cost="flops", record_events=True)
with tight:
    loss = step()
stats = tight.stats()
same = all(np.array_equal(w.grad.numpy(), g) for w, g in zip(weights, expected, strict=True))
print(
    f"budget {budget:,}: loss {loss.item():.6f}, peak {stats['peak_memory']:,}, "
    f"evictions {stats['evictions']} ({stats['dead_evictions']} of dead tensors), "
    f"remats {stats['remats']}, slowdown {stats['slowdown']:.3f}, "
    f"gradients bit-identical: {same}"
)
print()
print("first budget evictions and remats in the log:")
shown = 0
for e in tight.events:
    if e["event"] == "evict" and e["reason"] == "budget" or e["event"] == "remat":
        extra = (
            f"score {e['score']:.3g}, runner-up #{e['runner_up'][0]} at {e['runner_up'][1]:.3g}"
            if e["event"] == "evict"
            else f"cost {e['cost']:.0f}"
        )
        print(
            f"  clock {e['clock']:>6.0f}  {e['event']:<6} #{e['id']:<3} {e['op']:<16} "
            f"{e['nbytes']:>5} B  memory {e['memory']:>6,}  {extra}"
        )
        shown += 1
        if shown == 8:
            break
print()
print(explain(summarize([runtime_header(tight), *tight.events]), top=3))
print()

# 4. Lower still: past a point, recomputation cascades.
for w in weights:
    w.grad = None
lower = md.Runtime(budget=int(0.8 * free.stats()["peak_memory"]), cost="flops", record_events=True)
with lower:
    step()
summary = summarize([runtime_header(lower), *lower.events])
print(
    f"budget {lower.budget:,}: remats {lower.stats()['remats']}, "
    f"slowdown {lower.stats()['slowdown']:.3f}"
)
most = summary.remats_by_storage.most_common(4)
print("most recomputed: " + ", ".join(f"#{i} {summary.storage_op[i]} x{n}" for i, n in most))
first = next(e for e in lower.events if e["event"] == "remat")
print("around the first remat:")
start = lower.events.index(first) - 6
for e in lower.events[start : start + 22]:
    why = e.get("reason", "")
    print(f"  {e['event']:<6} #{e['id']:<3} {e['op']:<16} {why}")
