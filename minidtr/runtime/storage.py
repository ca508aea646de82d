"""The records of the spine: Storage (a buffer, the value in it and its recipe), ViewCell,
Recipe.

A **Storage** is one allocation: the unit of memory and of eviction. It keeps
the buffer (``None`` while evicted), the metadata the heuristics read, and the
value's shape, dtype and device: a storage is also the *cell* of the value it
holds, the thing a Tensor handle points at. Every output of an op that is not
a view gets a storage of its own.

A *recipe* is one application of an op: the op (with its static attributes,
including any random seed), the input cells, the distinct input storages
(``parents``), the cost of running it and weak references to the output
storages. Replaying a recipe recomputes all its outputs bit-identically. The
output of an op with a single output (nearly every op) is **its own recipe**:
``op``, ``inputs``, ``parents`` and ``run_cost`` are fields of the storage, so
such an op makes one object. The outputs of an op with several outputs share a
**Recipe** object (``Storage.shared``). Either way ``storage.producer`` is the
recipe (the storage itself, or the shared Recipe; None for a constant), and
what reads a recipe reads only ``op``, ``inputs``, ``parents``, ``device``,
``run_cost``, ``outputs`` and ``out_nbytes``, which both provide.

A **ViewCell** is a value that shares another value's storage (reshape, transpose,
slice, broadcast): its own shape and recipe (the view op, whose input is the
viewed cell), recomputed from the storage on every access, which costs no memory.

A *cell* is either: anything with ``storage``, ``shape``, ``dtype``, ``device``,
``index``, ``is_view``, ``contiguous`` and ``recipe`` (``Cell`` below, for type hints).

None of these hold arrays other than ``Storage.buffer``: nothing hides memory
from the allocator. Recipes hold their inputs strongly and storages know their
children only weakly, so metadata nobody can need any more is freed by
reference counting, not by the cycle collector.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .allocator import Allocator
    from .views import StridedLayout


PRUNE_MIN = 8


class Recipe:
    """The recipe shared by the outputs of an op with several outputs; also a view's
    recipe, and the record an observer gets of an op whose outputs are constants."""

    __slots__ = ("op", "inputs", "parents", "device", "outputs", "out_nbytes", "run_cost")

    def __init__(
        self,
        op: Any,
        inputs: tuple[Cell, ...],
        parents: tuple[Storage, ...],
        device: str | None,
    ):
        self.op = op
        self.inputs = inputs
        self.parents = parents  # distinct_storages(inputs)
        self.device = device
        # set when the outputs exist: weak references to the output storages (none for a
        # view or constant outputs) and their nbytes
        self.outputs: tuple[weakref.ref[Storage], ...] = ()
        self.out_nbytes: tuple[int, ...] = ()
        self.run_cost = 0.0

    def __repr__(self) -> str:
        return f"Recipe({self.op.name}, inputs={[c.storage.id for c in self.inputs]})"


def workspace_of(recipe: Storage | Recipe) -> int:
    """The scratch bytes a recipe's kernel needs besides its outputs (``Op.workspace`` of
    its inputs: a replay reserves them as the first run did; 0 for an op without one)."""
    op = recipe.op
    return op.workspace(*recipe.inputs) if op.has_workspace else 0


def distinct_storages(cells: tuple[Cell, ...]) -> tuple[Storage, ...]:
    """The storages of ``cells``, each once, in order of first appearance (``cells``
    itself when they are distinct storages, the common case: no new tuple)."""
    if len(cells) == 1:
        cell = cells[0]
        return (cell.storage,) if cell.is_view else cells
    if len(cells) == 2:
        a, b = cells
        if a.is_view:
            a = a.storage
        if b.is_view:
            b = b.storage
        if a is b:
            return (a,)
        return cells if a is cells[0] and b is cells[1] else (a, b)
    storages = [cell.storage if cell.is_view else cell for cell in cells]
    distinct = dict.fromkeys(storages)  # by identity: a Storage hashes by id
    return tuple(distinct) if len(distinct) < len(storages) else tuple(storages)


def resident_storages(cells: tuple[Cell, ...]) -> tuple[Storage, ...] | None:
    """``distinct_storages(cells)`` when every one of them is resident, else None (the
    one- and two-storage cases first, without a loop: this runs for every op)."""
    n = len(cells)
    if n == 1:
        cell = cells[0]
        if not cell.is_view:
            return cells if cell.buffer is not None else None
    elif n == 2:
        a, b = cells
        if not a.is_view and not b.is_view:
            if a.buffer is None or b.buffer is None:
                return None
            return cells if a is not b else (a,)
    for cell in cells:
        if (cell.storage if cell.is_view else cell).buffer is None:
            return None
    return distinct_storages(cells)


class Storage:
    """One buffer and its eviction metadata (docs/storage.md; docs/dtr.md for the paper's
    terms); the cell of the value it holds (its ``shape``, ``dtype``, ``device``,
    ``index`` among its recipe's outputs and whether the array is C-contiguous); and,
    for the output of a single-output op, its own recipe (``op``, ``inputs``,
    ``parents``, ``run_cost``; see the module docstring). ``op`` is None for a constant."""

    __slots__ = (
        "id",
        "name",
        "nbytes",
        "buffer",
        "op",
        "inputs",
        "parents",
        "recipe_depth",
        "shared",
        "run_cost",
        "cost",
        "last_access",
        "locks",
        "pinned",
        "pins",
        "banished",
        "external_refs",
        "children",
        "prune_at",
        "component",
        "above",
        "below",
        "evict_on_unlock",
        "orphan_rebuilt_at",
        "row",
        "allocator",
        "shape",
        "dtype",
        "device",
        "index",
        "contiguous",
        "is_view",
        "__weakref__",
    )

    def __init__(self, *args: Any, **kwargs: Any):
        raise TypeError("make a storage with Storage.new(allocator=..., id=..., ...)")

    @classmethod
    def new(
        cls,
        allocator: Allocator,
        id: int,
        name: str,
        nbytes: int,
        shape: tuple[int, ...],
        dtype,
        device: str | None,
        index: int = 0,
        contiguous: bool = True,
        buffer: Any = None,
        cost: float = 0.0,
        last_access: float = 0.0,
        op: Any = None,
        inputs: tuple[Cell, ...] = (),
        parents: tuple[Storage, ...] = (),
        shared: Recipe | None = None,
    ) -> Storage:
        """A storage; built with keywords (``Storage.new(allocator=..., id=..., ...)``). A
        class method rather than ``Storage(...)``: a class called with keywords gathers
        them into a dict on every call, some 6,000 instructions more per storage."""
        self = object.__new__(cls)
        self.allocator = allocator
        self.id = id
        self.name = name
        self.nbytes = nbytes
        self.buffer: Any = buffer
        self.op = op  # the recipe: None for a constant
        self.inputs = inputs
        self.parents = parents  # distinct_storages(inputs): the storages it is computed from
        self.recipe_depth = 0  # 1 + its parents' largest when made (``tell_parents``)
        self.shared = shared  # the Recipe of a multi-output op, shared with the siblings
        self.run_cost = cost  # what running the op cost (``cost`` grows with its views')
        self.cost = cost
        self.last_access = last_access
        self.locks = self.pins = 0  # pins: pin() calls not undone by unpin() yet
        self.pinned = self.banished = False
        self.external_refs = 0
        # () without children, the weak reference itself for one (most storages have one
        # child: no list to allocate and collect), a list of them from the second on
        self.children: list[weakref.ref[Storage]] | weakref.ref[Storage] | tuple = ()
        self.prune_at = PRUNE_MIN  # prune dead children when the list reaches this length
        self.component = None  # h_DTR^eq's union-find class (eqclasses.py)
        # the accelerator's, kept here for speed: cached closures of evicted ancestors /
        # descendants (fast/closures.py) and the row in the candidate table (fast/table.py)
        self.above = None
        self.below = None
        self.evict_on_unlock = False
        self.orphan_rebuilt_at: float | None = None  # last_access when last rebuilt as an orphan
        self.row = 0  # 0: not in the table
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self.index = index  # which output of its recipe
        self.contiguous = contiguous
        # a storage is the cell of its own value (views are ``ViewCell``s); a slot, not a
        # class attribute: CPython 3.11 specializes reads of slots, not of class attributes
        self.is_view = False
        return self

    @property
    def producer(self) -> Storage | Recipe | None:
        """The recipe that recomputes this storage: the storage itself (a single-output
        op's output), the Recipe its op's outputs share, or None (a constant)."""
        if self.shared is not None:
            return self.shared
        return self if self.op is not None else None

    @property
    def storage(self) -> Storage:
        """As a cell: the storage of the value is the storage itself."""
        return self

    @property
    def recipe(self) -> Storage | Recipe | None:
        """As a cell: the recipe that made the value (``producer``; None for a constant)."""
        return self.producer

    @property
    def outputs(self) -> tuple[weakref.ref[Storage], ...]:
        """As its own recipe: a weak reference to its one output, itself."""
        return (weakref.ref(self),)

    @property
    def out_nbytes(self) -> tuple[int, ...]:
        """As its own recipe: the nbytes of its one output."""
        return (self.nbytes,)

    def drop_recipe(self) -> None:
        """Forget how this storage was computed (it becomes a constant, or is banished):
        its inputs' metadata is no longer kept alive through it."""
        self.op = None
        self.inputs = ()
        self.parents = ()
        self.recipe_depth = 0
        self.shared = None

    @property
    def resident(self) -> bool:
        return self.buffer is not None

    @property
    def constant(self) -> bool:
        """No recipe: an input or parameter value, never evicted."""
        return self.op is None and not self.banished

    @property
    def evictable(self) -> bool:
        return self.op is not None and not self.pinned

    def tell_parents(self) -> None:
        """Add this storage to the children of each of its parents (a weak reference), and
        take its ``recipe_depth`` from theirs. Children that died are dropped as a list
        grows (in order, amortized O(1)), so a long-lived input (a weight read by every op
        of an evaluation loop) holds as many entries as it has live children, not one per
        op it ever took part in."""
        ref = weakref.ref(self)
        self.recipe_depth = 1 + max((parent.recipe_depth for parent in self.parents), default=0)
        for parent in self.parents:
            if parent.allocator is not self.allocator:
                parent.allocator.lends = True  # its storages' descendants are not all its own
            children = parent.children
            if not children:
                parent.children = ref
            elif type(children) is list:
                children.append(ref)
                if len(children) >= parent.prune_at:
                    parent.prune_children()
            else:
                parent.children = [children, ref]

    def prune_children(self) -> None:
        """Drop the children that died from the list; prune again when it has doubled."""
        self.children = children = [ref for ref in self.children if ref() is not None]
        self.prune_at = max(PRUNE_MIN, 2 * len(children))

    def live_children(self) -> list[Storage]:
        children = self.children
        if type(children) is not list:
            child = children() if children else None
            if child is None:
                self.children = ()
                return []
            return [child]
        alive = [s for ref in children if (s := ref()) is not None]
        if len(alive) < len(children):
            self.children = [weakref.ref(s) for s in alive]
            self.prune_at = max(PRUNE_MIN, 2 * len(alive))
        return alive

    def neighbours(self) -> list[Storage]:
        """Parents and children: the edges e*(t) walks along."""
        return [*self.parents, *self.live_children()]

    def __del__(self):
        try:
            allocator = self.allocator
            if self.buffer is not None or allocator.eviction.tracking is not None:
                allocator.forget(self)  # otherwise there is nothing to forget
        except Exception:  # interpreter shutdown
            pass

    def __repr__(self) -> str:
        state = "resident" if self.buffer is not None else "evicted"
        if self.banished:
            state = "banished"
        return f"Storage(#{self.id} {self.name}, {self.nbytes}B, {state})"


class ViewCell:
    """A value that shares another value's storage (a reshape, transpose, slice,
    broadcast): its own shape and recipe, the view op whose single input is the viewed
    cell. Its array is recomputed from the storage's buffer on every access, by
    applying the view ops from the storage up (``depth`` of them), or, past
    ``MAX_VIEW_DEPTH``, in one step from where its elements lie in the buffer
    (``layout``), so a read costs the same however long the chain of views."""

    __slots__ = (
        "storage",
        "view_recipe",
        "index",
        "shape",
        "dtype",
        "device",
        "contiguous",
        "is_view",
        "depth",
        "layout",
    )

    def __init__(
        self,
        storage: Storage,
        recipe: Recipe,
        index: int,
        shape: tuple[int, ...],
        dtype,
        device: str | None,
        contiguous: bool,
        depth: int = 1,
        layout: StridedLayout | None = None,
    ):
        self.storage = storage
        self.view_recipe = recipe
        self.index = index
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self.contiguous = contiguous
        self.is_view = True
        self.depth = depth  # view ops from the storage's buffer (or from ``layout``'s view)
        self.layout = layout

    @property
    def recipe(self) -> Recipe:
        return self.view_recipe

    @property
    def nbytes(self) -> int:
        n = self.dtype.itemsize
        for d in self.shape:
            n *= d
        return n

    def __repr__(self) -> str:
        return f"ViewCell({self.shape}, {self.dtype}, of {self.storage!r})"


Cell = Storage | ViewCell  # a value: a storage (the whole of it) or a view of one
