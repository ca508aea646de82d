"""The storages an op's outputs become, once its kernel has run: a constant (computed
under ``as_constants``: no recipe), a storage that is its own recipe (one output), or
one of several outputs sharing a ``Recipe``. Each evictable one joins the candidates
and its parents' children. ``Allocator.compute_general`` makes them here; the
accelerator's ``FastPath.new_outputs`` and ``new_evictable`` make the same storages
inline (``fast/hotpath.py``).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .storage import Cell, Recipe, Storage

if TYPE_CHECKING:
    from .allocator import Allocator


def new_outputs(
    allocator: Allocator,
    op: Any,
    inputs: tuple[Cell, ...],
    parents: tuple[Storage, ...],
    device: str | None,
    results: Any,
    metas: Sequence[tuple],
    sizes: list[int],
    cost: float,
    constant: bool,
    workspace: int = 0,
) -> list[Storage]:
    """Record the outputs of an op that just ran (what its ``forward`` returned) as
    new storages, which are also the outputs' cells: a constant, its own recipe (one
    output) or one of the outputs that share a ``Recipe``. Their alloc events carry
    the ``workspace`` the kernel had besides them (the first output's event)."""
    if op.n_outputs == 1:
        results = (results,)
    recipe: Storage | Recipe
    if len(metas) == 1 and not constant:
        output = new_evictable(
            allocator, op, inputs, parents, device, 0, results[0], metas[0], sizes[0], cost
        )
        cells, recipe = [output], output  # its own recipe
    else:
        # shared by the outputs; for constants, only the observer's record of the op
        recipe = Recipe(op, inputs, parents, device)
        recipe.run_cost = cost
        recipe.out_nbytes = tuple(sizes)
        if constant:
            cells = [
                new_constant(allocator, op.name, results[i], meta, sizes[i], device, i)
                for i, meta in enumerate(metas)
            ]
        else:
            of_op = (allocator, op, inputs, parents, device)
            cells = [
                new_evictable(*of_op, i, results[i], meta, sizes[i], cost, recipe)
                for i, meta in enumerate(metas)
            ]
            recipe.outputs = tuple([weakref.ref(storage) for storage in cells])
    if allocator.addresses is not None:
        allocator.addresses.bind(cells)
    if allocator.runtime.events is not None:
        for storage in cells:
            if workspace:
                allocator.record("alloc", storage, cost=cost, workspace=workspace)
                workspace = 0
            else:
                allocator.record("alloc", storage, cost=cost)
    if allocator.observer is not None:
        allocator.observer.on_compute(recipe, cells)
    return cells


def new_constant(
    allocator: Allocator,
    name: str,
    result: Any,
    meta: tuple,
    nbytes: int,
    device: str | None,
    index: int,
) -> Storage:
    """The storage of an op's output computed under ``as_constants``: no recipe."""
    allocator.next_id += 1
    shape, dtype = meta
    allocator.ledger.constant_bytes += nbytes
    return Storage.new(
        allocator=allocator, id=allocator.next_id, name=name, nbytes=nbytes, shape=shape,
        dtype=dtype, device=device, index=index,
        contiguous=True if device is None else result.flags.c_contiguous,
        buffer=result, last_access=allocator.clock,
    )  # fmt: skip


def new_evictable(
    allocator: Allocator,
    op: Any,
    inputs: tuple[Cell, ...],
    parents: tuple[Storage, ...],
    device: str | None,
    index: int,
    result: Any,
    meta: tuple,
    nbytes: int,
    cost: float,
    shared: Recipe | None = None,
) -> Storage:
    """The storage of output ``index`` of an op that just ran (its own recipe, or one of
    ``shared``'s outputs): a candidate for eviction, a child of each of ``parents``."""
    allocator.next_id += 1
    shape, dtype = meta
    storage = Storage.new(
        allocator=allocator, id=allocator.next_id, name=op.name, nbytes=nbytes, shape=shape,
        dtype=dtype, device=device, index=index,
        contiguous=True if device is None else result.flags.c_contiguous,  # placeholders
        buffer=result, cost=cost, last_access=allocator.clock, op=op, inputs=inputs,
        parents=parents, shared=shared,
    )  # fmt: skip
    allocator.eviction.candidates.add(storage)
    storage.tell_parents()
    allocator.lifetimes.cut_dead_chains(storage)
    return storage
