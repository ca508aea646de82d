"""minidtr's budget against PyTorch's ``torch.utils.checkpoint`` at equal real memory.

    python benchmarks/vs_torch_checkpoint.py [--models mlp,resnet] [--steps 5]

The small presets' residual MLP (24 Linear-LayerNorm-ReLU layers of 48 with skips, the
1,438 training digits at once, Adam) and ResNet-32 (width 4, batch 256, SGD with
momentum), trained in minidtr and in PyTorch (their twins, ``benchmarks/torch_twins.py``:
the same weights, data, loss and optimizer; CPU, one thread). PyTorch saves memory with
checkpointing, the network cut into k segments of which only the inputs are kept
(recomputed in backward, as ``checkpoint_sequential`` does); minidtr by a budget, with
every tensor evictable. Any of the seven bundled models can be named (``--models``).

Real memory is measured the same way for both (``benchmarks/vs_torch.py`` says how: the
C heap's peak growth over a step). For each PyTorch row, minidtr runs under the budget
that gives it the same real memory (its constants plus PyTorch's peak growth), and the
table puts their times per step side by side: this thread's processor time (the
ratio by wall time in brackets), the median of ``--steps`` rounds that interleave the
runs, after two warm-up steps, the measured one and an untimed round.
``benchmarks/vs_torch.py`` prints the same comparison and more (budget ratios, the cost
model's slowdown) for all seven models. Runs where torch is installed; Linux only.
"""

from __future__ import annotations

import argparse
import sys

import interrupts  # noqa: F401  (Ctrl-C: one line, not a traceback)
import vs_torch


def rows(comparison: vs_torch.Comparison) -> list[str]:
    """One row a PyTorch run: its peak and time, and minidtr's at its memory."""
    pairs = [(comparison.torch_runs[0], comparison.plain)]
    pairs += zip(comparison.torch_runs[1:], comparison.at_torch_memory, strict=True)
    out = []
    for theirs, ours in pairs:
        out.append(
            f"| {comparison.name} | {theirs.segments or 'none'} | {theirs.peak / vs_torch.MIB:.2f} "
            f"| {theirs.median('cpu'):.3f} | {(ours.peak or 0) / vs_torch.MIB:.2f} "
            f"| {vs_torch.cell(ours.median('cpu'))} | {vs_torch.ratio(ours, theirs)} |"
        )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    vs_torch.add_comparison_arguments(p, ["mlp", "resnet"], steps=5, segments=[8, 4, 2])
    args = p.parse_args()
    models, steps, segments = args.models, args.steps, args.segments
    if vs_torch.torch is None:
        sys.exit("vs_torch_checkpoint: PyTorch is not installed: nothing to compare against")
    print(vs_torch.header(steps))
    print(
        "| model | torch segments | torch peak | torch s/step | minidtr peak "
        "| minidtr s/step | minidtr / torch (wall) |"
    )
    print("|---|---|---|---|---|---|---|")
    agreements = []
    for name in models:
        comparison = vs_torch.compare(name, segments, steps, ratios=())
        agreements.append(comparison.agreement)
        print("\n".join(rows(comparison)), flush=True)
    print("\n" + "\n".join(agreements))


if __name__ == "__main__":
    main()
