"""Formal harnesses: properties of the blocks, as Amaranth ``Assert``/``Assume``/``Cover``.

Each module here wraps one block of :mod:`epfabric.hw` in a harness — an
``Elaboratable`` that drives the block's inputs with free values
(``AnySeq``/``AnyConst``), constrains them with ``Assume`` where the block's
contract says so, keeps a small scoreboard of what went in, and ``Assert``\\ s
what must come out. The harnesses are verification code only: nothing in the
synthesised design (Verilog exports, FPGA tops) instantiates them.

Every module declares ``PROPERTIES``: a dict of name → :class:`FormalProperty`.
:mod:`epfabric.sim.flows.formal` turns one into RTLIL, runs SymbiYosys on it and
reports proved / counterexample / unknown (``epfabric prove``).
"""

from dataclasses import dataclass, field
from typing import Callable

from amaranth.hdl import ClockDomain, Const, Elaboratable, Fragment, Module

__all__ = ["FormalProperty", "Harness", "Elaborated", "FragmentSignals", "all_equal", "MODULES"]

#: harness modules of this package, in the order ``epfabric prove --all`` runs them
MODULES = ("ub_port", "switch", "link", "inc_engine", "router", "decoder", "inc_switch",
           "inc_drain")


@dataclass(frozen=True)
class FormalProperty:
    """One property to check: a harness and how to check it.

    Attributes
    ----------
    harness : callable
        ``harness(**params)`` returns the ``Elaboratable`` whose ``Assert``\\ s
        are the property.
    mode : str
        ``"prove"`` (k-induction: unbounded, depth = induction length) or
        ``"bmc"`` (bounded: no counterexample within ``depth`` cycles).
    depth : int
        Default depth (``epfabric prove --depth`` overrides it).
    expect : str
        ``"pass"``: the assertions must hold. ``"fail"``: the property
        exists to show a bug the model has on purpose; it passes only when
        the solver finds a counterexample.
    doc : str
        One line: what is claimed.
    params : dict
        Keyword arguments of ``harness``.
    slow : bool
        Not run in CI (``make test``).
    gtkw : tuple of str
        Signals (hierarchical names below the top) a counterexample's
        ``.gtkw`` shows first.
    solver : str
        SMT solver that does this property fastest (``yices`` or
        ``boolector``; Boolector wins on the INC engine's 32-bit sums).
    cover_depth : int or None
        Depth of the non-vacuity cover run (default ``depth``): an induction
        proof is short (k steps) while its covers may need more cycles.
    """
    harness: Callable
    mode: str
    depth: int
    expect: str
    doc: str
    params: dict = field(default_factory=dict)
    slow: bool = False
    gtkw: tuple = ()
    solver: str = "yices"
    cover_depth: int = None

    def __post_init__(self):
        if self.mode not in ("prove", "bmc"):
            raise ValueError(f"mode must be 'prove' or 'bmc', not {self.mode!r}")
        if self.expect not in ("pass", "fail"):
            raise ValueError(f"expect must be 'pass' or 'fail', not {self.expect!r}")

    def build(self, **overrides):
        """The harness with ``params`` updated by ``overrides``."""
        return self.harness(**{**self.params, **overrides})


class Harness(Elaboratable):
    """Base of the harnesses: one reset-less ``sync`` domain whose clock is the only port.

    The solver starts from the ``init`` values of every signal (no reset
    input to toggle); ``top_ports`` is what :mod:`epfabric.sim.flows.formal` exposes.
    Subclasses implement :meth:`check`, adding the block and the properties
    to ``m``.
    """

    def __init__(self):
        self.domain = ClockDomain("sync", reset_less=True)

    @property
    def top_ports(self):
        return [self.domain.clk]

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = self.domain
        self.check(m)
        return m

    def check(self, m):
        raise NotImplementedError


class FragmentSignals:
    """The signals one elaborated fragment's statements mention, found by name."""

    def __init__(self, fragment, what):
        self.fragment, self.what = fragment, what
        self._signals = {}
        for stmts in fragment.statements.values():
            for stmt in stmts:
                for sig in list(stmt._lhs_signals()) + list(stmt._rhs_signals()):
                    self._signals.setdefault(sig.name, {})[id(sig)] = sig

    def __getitem__(self, name):
        found = self._signals.get(name, {})
        if len(found) != 1:
            raise KeyError(f"{len(found)} signals named {name!r} in {self.what!r}")
        return next(iter(found.values()))

    def all(self, name):
        """Every signal called ``name`` (blocks built by one helper share names)."""
        return list(self._signals.get(name, {}).values())

    def sub(self, name):
        """The signals of the elaborated submodule ``name``."""
        for frag, sub_name, _ in self.fragment.subfragments:
            if sub_name == name:
                return FragmentSignals(frag, f"{self.what}.{name}")
        raise KeyError(f"no submodule {name!r} in {self.what!r}")


class Elaborated(Elaboratable):
    """A block elaborated by the harness itself, so its internal signals can be named.

    An induction proof needs invariants over a block's registers, which are
    local variables of its ``elaborate``. The harness elaborates the block
    once (``Fragment.get``) and adds this wrapper as the submodule: the very
    same fragment is converted, so the block's logic (and its simulation
    Verilog) is exactly what it was; ``blk["name"]`` finds a signal of that
    fragment by its name (``blk.all``, ``blk.sub``: see
    :class:`FragmentSignals`). The harness only reads these signals.
    """

    def __init__(self, block, platform=None):
        self.block = block
        self.fragment = Fragment.get(block, platform)
        self.signals = FragmentSignals(self.fragment, block)

    def __getitem__(self, name):
        return self.signals[name]

    def all(self, name):
        return self.signals.all(name)

    def sub(self, name):
        return self.signals.sub(name)

    def elaborate(self, platform):
        return self.fragment


def all_equal(values):
    """1 when every value of ``values`` equals the first."""
    out = Const(1, 1)
    for v in values[1:]:
        out = out & (v == values[0])
    return out
