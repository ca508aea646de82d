"""How much the spine costs: per-op bookkeeping on tiny tensors, and a wide MLP training
step against the same MLP in raw NumPy (hand-written backward) and in PyTorch (CPU).

    python benchmarks/overhead_mlp.py            # the figures the project targets
    python benchmarks/overhead_mlp.py --profile  # plus where minidtr's time goes (cProfile)

Targets (docs/performance.md, where benchmarks/performance.py prints them all): at most 8 us
per op on tiny tensors without autograd and 10 us with it, and under 10% over raw NumPy on a
wide MLP. The runtime is unbounded (no evictions), so this measures
bookkeeping alone. Frameworks are timed in interleaved rounds so that load on the machine
affects them alike; figures are medians (and the best round) over the rounds.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib.util
import io
import pstats
import statistics
import time
from collections.abc import Callable

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)
import numpy as np

import minidtr as md
from minidtr import nn, optim
from minidtr.cli_args import whole_number, whole_numbers

HAS_TORCH = importlib.util.find_spec("torch") is not None


# ---- per-op bookkeeping on 1-element tensors ----------------------------------------------------


def numpy_chain(n: int) -> Callable[[], object]:
    one, start = np.ones(1, np.float32), np.ones(1, np.float32)

    def run():
        y = start
        for _ in range(n):
            y = y + one
        return y

    return run


def without_gc(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` with Python's cyclic garbage collector paused (to show what it costs)."""

    def run():
        gc.disable()
        try:
            return fn()
        finally:
            gc.enable()

    return run


def minidtr_chain(n: int, requires_grad: bool) -> Callable[[], object]:
    one = md.tensor(np.ones(1, np.float32))
    start = md.tensor(np.ones(1, np.float32), requires_grad=requires_grad)

    def run():
        y = start
        for _ in range(n):
            y = y + one
        return y

    return run


def minidtr_chain_backward(n: int) -> Callable[[], object]:
    """Forward is untimed setup; only backward through the chain is timed."""
    build = minidtr_chain(n, requires_grad=True)
    state = {}

    def setup():
        state["y"] = build()

    def run():
        state.pop("y").backward()

    run.setup = setup
    return run


def time_rounds(cases: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each case, interleaved round by round."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            setup = getattr(fn, "setup", None)
            if setup is not None:
                setup()
            gc.collect()
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
    return times


def tiny_ops(n: int, rounds: int) -> None:
    cases = {
        "numpy add": numpy_chain(n),
        "minidtr add (no autograd)": minidtr_chain(n, requires_grad=False),
        "minidtr add (recording autograd)": minidtr_chain(n, requires_grad=True),
        "minidtr add (no autograd, gc paused)": without_gc(minidtr_chain(n, requires_grad=False)),
        "minidtr backward through add": minidtr_chain_backward(n),
    }
    times = time_rounds(cases, rounds)
    base = statistics.median(times["numpy add"]) / n * 1e6
    print(f"\nPer-op cost on 1-element float32 tensors: a chain of {n} adds, {rounds} rounds")
    print(f"{'':36} {'us/op':>8} {'best':>8} {'over numpy':>11}")
    for name, values in times.items():
        median, best = statistics.median(values) / n * 1e6, min(values) / n * 1e6
        over = "" if name == "numpy add" or "backward" in name else f"{median - base:10.1f}"
        print(f"{name:36} {median:8.2f} {best:8.2f} {over:>11}")
    print("target: at most 8 us per op without autograd, 10 us with it")


# ---- a wide MLP training step ----------------------------------------------------------------


class NumpyMLP:
    """The same MLP (Linear/ReLU stack, MSE loss, plain SGD) with a hand-written backward."""

    def __init__(self, state: dict[str, np.ndarray], n_layers: int, lr: float):
        self.weights = [state[f"{2 * i}.weight"].copy() for i in range(n_layers)]
        self.biases = [state[f"{2 * i}.bias"].copy() for i in range(n_layers)]
        self.lr = lr

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        inputs, h = [], x
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            inputs.append(h)
            h = h @ w.T + b
            if i < last:
                h = np.maximum(h, 0)
        diff = h - y
        loss = float(np.mean(diff * diff))
        g = diff * (2.0 / diff.size)
        for i in range(last, -1, -1):
            h_in = inputs[i]
            grad_w, grad_b = g.T @ h_in, g.sum(axis=0)
            if i > 0:
                g = g @ self.weights[i]
                g = np.where(h_in > 0, g, np.float32(0))
            self.weights[i] -= self.lr * grad_w
            self.biases[i] -= self.lr * grad_b
        return loss


def build_mlp(widths: list[int], seed: int = 0) -> nn.Sequential:
    md.manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def torch_mlp(widths: list[int], state: dict[str, np.ndarray]):
    import torch

    layers = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        layers.append(torch.nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    return model


def mlp_cases(widths: list[int], batch: int, lr: float) -> tuple[dict, dict]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, widths[0])).astype(np.float32)
    y = rng.standard_normal((batch, widths[-1])).astype(np.float32)
    model = build_mlp(widths)
    state = model.state_dict()
    reference = NumpyMLP(state, len(widths) - 1, lr)
    opt = optim.SGD(model.parameters(), lr=lr)
    inputs, targets = md.tensor(x), md.tensor(y)
    losses: dict[str, list[float]] = {"numpy": [], "minidtr": []}
    phases: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer step": []}

    def minidtr_step():
        started = time.perf_counter()
        opt.zero_grad()
        loss = md.mse_loss(model(inputs), targets)
        loss.item()
        forward_done = time.perf_counter()
        loss.backward()
        for p in model.parameters():
            p.grad.storage.allocator.read(p.grad.cell)  # gradients computed, not deferred
        backward_done = time.perf_counter()
        opt.step()
        losses["minidtr"].append(loss.item())
        ended = time.perf_counter()
        for name, seconds in zip(phases, (forward_done - started, backward_done - forward_done,
                                          ended - backward_done), strict=True):  # fmt: skip
            phases[name].append(seconds)

    cases = {
        "numpy (hand-written backward)": lambda: losses["numpy"].append(reference.step(x, y)),
        "minidtr (unbounded)": minidtr_step,
    }
    if HAS_TORCH:
        import torch

        tmodel = torch_mlp(widths, state)
        topt = torch.optim.SGD(tmodel.parameters(), lr=lr)
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
        losses["torch"] = []

        def torch_step():
            topt.zero_grad()
            loss = torch.nn.functional.mse_loss(tmodel(tx), ty)
            loss.backward()
            topt.step()
            losses["torch"].append(loss.item())

        cases[f"torch {torch.__version__} (CPU, {torch.get_num_threads()} threads)"] = torch_step
    return cases, losses, phases, model


def count_ops(step: Callable[[], object]) -> int:
    runtime = md.Runtime()
    with runtime:
        step()
    return runtime.stats()["ops"]


def wide_mlp(widths: list[int], batch: int, rounds: int, lr: float = 1e-3) -> None:
    cases, losses, phases, model = mlp_cases(widths, batch, lr)
    for name, fn in cases.items():  # warm up (BLAS threads, allocator caches)
        if name == "minidtr (unbounded)":
            ops = count_ops(fn)
        else:
            fn()
    times = time_rounds(cases, rounds)
    base = statistics.median(times["numpy (hand-written backward)"])
    n_params = sum(a * b + b for a, b in zip(widths[:-1], widths[1:], strict=True))
    print(f"\nWide MLP training step: widths {widths} ({n_params / 1e6:.1f}M parameters), "
          f"batch {batch}, float32, SGD; {rounds} rounds")  # fmt: skip
    print(f"{'':44} {'ms/step':>9} {'best':>9} {'vs numpy':>9}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:44} {median * 1e3:9.2f} {min(values) * 1e3:9.2f} "
              f"{(median / base - 1) * 100:+8.1f}%")  # fmt: skip
    print(
        f"minidtr ops per step (forward, backward, update): {ops}; phases (median ms): "
        + ", ".join(f"{k} {statistics.median(v[-rounds:]) * 1e3:.1f}" for k, v in phases.items())
    )
    layouts = {p.grad.cell.contiguous for p in model.parameters() if p.ndim == 2}
    print(
        f"weight gradients C-contiguous: {sorted(layouts)} (a transposed gradient makes the "
        "update's elementwise ops strided)"
    )
    ours, ref = np.array(losses["minidtr"]), np.array(losses["numpy"])
    assert len(ours) == len(ref)
    print(f"loss agreement minidtr vs numpy over {len(ours)} steps: max relative difference "
          f"{np.max(np.abs(ours - ref) / np.abs(ref)):.2g}")  # fmt: skip
    print("target: under 10% over raw NumPy")


def profile(widths: list[int], batch: int, n_tiny: int) -> None:
    cases, *_ = mlp_cases(widths, batch, 1e-3)
    step = cases["minidtr (unbounded)"]
    step()
    for title, fn in (("wide MLP, 5 steps", lambda: [step() for _ in range(5)]),
                      (f"chain of {n_tiny} tiny adds", minidtr_chain(n_tiny, False))):  # fmt: skip
        profiler = cProfile.Profile()
        profiler.runcall(fn)
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
        print(f"\n---- cProfile: {title} (by own time) ----")
        print("\n".join(out.getvalue().splitlines()[4:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--widths",
        type=whole_numbers(1),
        default=[1024, 2048, 2048, 2048, 1024],
        help="layer widths, input first (default: 4 layers)",
    )
    parser.add_argument("--batch", type=whole_number(1), default=256)
    parser.add_argument("--rounds", type=whole_number(1), default=15)
    parser.add_argument("--tiny-ops", type=whole_number(1), default=20000)
    parser.add_argument("--profile", action="store_true", help="also print cProfile tables")
    args = parser.parse_args()
    widths = args.widths
    if len(widths) < 2:
        parser.error(f"--widths: an input width and at least one layer's, got {len(widths)}")
    tiny_ops(args.tiny_ops, rounds=5)
    wide_mlp(widths, args.batch, args.rounds)
    if args.profile:
        profile(widths, args.batch, args.tiny_ops)


if __name__ == "__main__":
    main()
