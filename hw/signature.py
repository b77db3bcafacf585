"""Signatures computed from a component's parameters, without building the component.

A block whose ports depend on its parameters says what they are in a
``signature_for(**params)`` classmethod (as amaranth-soc's peripherals do), and
its constructor passes the same signature to ``super().__init__``: one
definition. ``signature_for`` takes the constructor's keyword parameters (it
checks those that shape the ports and leaves the others to the constructor),
so the parameters of a component spec give its signature
(:meth:`epfabric.sim.backends.testbench.ComponentSpec.interface`). What only needs the ports -- a testbench driving the block's
Verilog on another simulator, a top sizing an instance of it, a command
checking its parameters -- asks for the signature and builds nothing, so no
elaboratable is made only to be dropped.
"""

import inspect

from amaranth.lib import wiring

__all__ = ["ParamSignature", "check_other_params"]


class ParamSignature(wiring.Signature):
    """A signature that keeps the parameters a driver of the component reads.

    :meth:`create` gives an interface object with the signature's ports and these
    parameters as attributes (``iface.ranks``): what a testbench of the component's
    Verilog drives in place of the component, with the attributes its intents read
    from either.

    Parameters
    ----------
    members : dict
        The members, as for :class:`~amaranth.lib.wiring.Signature`.
    **params
        Plain values (ints, strings, tuples, layouts): ``signature.params``.

    Raises
    ------
    ValueError
        A parameter has the name of a member.
    """

    def __init__(self, members, **params):
        clash = sorted(set(params) & set(members))
        if clash:
            raise ValueError(f"parameter(s) {', '.join(clash)} named as member(s)")
        self.params = dict(params)
        super().__init__(members)

    def __eq__(self, other):
        return (type(other) is type(self) and self.params == other.params
                and self.members == other.members)

    def __repr__(self):
        return f"ParamSignature({dict(self.members.items())}, {self.params})"

    def create(self, *, path=None, src_loc_at=0):
        iface = wiring.PureInterface(self, path=path, src_loc_at=src_loc_at + 1)
        for name, value in self.params.items():
            setattr(iface, name, value)
        return iface


def check_other_params(cls, others):
    """Raise ``TypeError`` naming any key of ``others`` that is not a keyword parameter of
    ``cls`` (a ``signature_for`` takes every constructor parameter; those that do not shape
    the ports it does not check)."""
    unknown = sorted(set(others) - set(inspect.signature(cls).parameters))
    if unknown:
        raise TypeError(f"{cls.__qualname__} has no parameter(s) {', '.join(unknown)}")
