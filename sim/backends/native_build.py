"""Verilog for the native backend: a *glue* top and one module per distinct block.

Verilator compiles a flat model per instance: a module used N times becomes
N copies of its C++ (docs/results.md, "Simulation speed and scale"), so a machine's
build grows with its dies. The native backend
(:mod:`epfabric.sim.backends.native`) instead Verilates every distinct shared
module (the die with its cores, each link and switch kind) once, and steps
one C++ object per instance from a small C++ top. What it needs from here:

* ``glue``: the top with every shared-module instance removed (recorded
  instead by :class:`Recorder`, the top's instancer); each
  instance port becomes a glue port ``n<i>_<port>`` of the opposite
  direction (an instance's input is a glue output);
* ``modules``: ``{name: Verilog}`` for each distinct module, with the
  modules it instantiates (the die's cores);
* ``instances``: ``[[module, {port: [value, width]}]]`` in glue order, the
  constant inputs of each instance (a die's rank, a switch's route table);
* ``wires``: ``[[instance, port, instance, port]]``, outputs that drive
  another instance's input through pure wiring (they bypass the glue);
* ``aliases``: ``{top port: [instance, port]}``, top outputs that are an
  instance's output.

A top whose factory takes no ``shared`` is all glue, with no instances. The
modules are the same reset-less Verilog as Verilator's
(:func:`~.simulation.verilog_of`); the glue is cleaned by :func:`_glue_verilog`.
"""

import fcntl
import json
import re
import time
from pathlib import Path

from amaranth.hdl import Module, Signal

from ...hw.instances import Instancer, instance_ports
from ...hw.validate import UserError
from ..output import PROGRESS_AFTER_S, log_event, progress, write_atomic
from .verilog import _add_zero_loops, _cache_path, _factory_source, _zero_by_loop, part_verilog

__all__ = ["native_design", "Recorder", "GLUE", "glue_port", "decode_verilator_name"]

#: Verilog name of the glue module.
GLUE = "glue"
#: Amaranth's netlist keeps a module's input ports in one cell of at most 2**16 bits
#: (``amaranth.hdl._nir.Net.from_cell``): a glue with more input bits cannot be converted
#: (32 dies x 48 AIVs; emitting the glue as text from the wiring would lift it)
GLUE_INPUT_BITS = 1 << 16

_DESIGNS = {}
#: this file's text: part of the disk cache key (the glue depends on it)
_SOURCE = Path(__file__).read_text()


def glue_port(index, port):
    """Name of the glue port wired to ``port`` of instance ``index``."""
    return f"n{index}_{port}"


def decode_verilator_name(name):
    """A Verilog identifier from its C++ name in a Verilated header (``a___05Fb`` -> ``a__b``)."""
    return re.sub(r"__0([0-9A-F]{2})", lambda m: chr(int(m.group(1), 16)), name)


class Recorder(Instancer):
    """The top's instancer here: it records each shared-module instance instead of building one.

    :meth:`instance` returns an empty module and appends ``(name, ports, consts)`` to
    :attr:`found`: ``ports`` maps each Verilog port name of the instance to ``(signal,
    is_input)`` -- an input of the instance is a copy of what the parent drives into it, an
    output is a signal nothing in the design drives; ``consts`` maps the constant inputs to
    ``(value, width)``. Converting the top with those signals as its own ports (inputs of
    the instance become outputs of the top, and the other way round) gives the *glue*: the
    top without the instances, which the C++ top connects to one Verilated model per
    instance. The native backend's modules are reset-less.
    """

    #: no ``Instance`` is built, so a child of any width can be one
    makes_instances = False

    def __init__(self):
        self.found = []

    def instance(self, module, iface, skip, consts):
        if module.has_reset:
            raise ValueError(f"cannot record an instance of {module.name}: the native "
                             f"backend's modules are reset-less")
        m = Module()
        ports = {}
        for key, is_input, value in instance_ports(iface, skip):
            if is_input:
                # driven by the parent; a copy so the glue's port is an output even if it
                # drives nothing
                copy = Signal(len(value), name=f"x_{key}")
                m.d.comb += copy.eq(value)
                ports[key] = (copy, True)
            else:
                ports[key] = (value, False)
        self.found.append((module.name, ports,
                           {k: (int(v.value), len(v)) for k, v in consts.items()}))
        return m


def native_design(spec, on_module=None):
    """The glue, modules and instances of ``spec``'s component (see the module docstring).

    Memoised per process and cached on disk like :func:`~.simulation.verilog_of`.
    ``on_module(name, verilog)`` is called for each instantiated module as
    soon as its Verilog exists, before the glue is converted, so a caller
    can build the modules while the glue is generated.
    """
    from ...hw import switch, topology
    # what decides which switches are planar (tests lower both) is part of the design's key
    key = (f"{spec.to_json()}\0{topology.MAX_INSTANCE_OUTPUT_BITS}\0"
           f"{switch.PlanarSwitch.PLANE_BITS}")
    announced = False
    if key not in _DESIGNS:
        t0 = time.monotonic()
        path = _cache_path("native", f"{key}\0{_factory_source(spec)}\0{_SOURCE}").with_suffix(".json")
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.exists():
                _DESIGNS[key] = json.loads(path.read_text())
            else:
                _DESIGNS[key] = _convert(spec, on_module)
                announced = True
                write_atomic(path, json.dumps(_DESIGNS[key]))
        dt = time.monotonic() - t0
        if dt > PROGRESS_AFTER_S:
            progress(f"native Verilog of {spec.factory.rpartition(':')[2]}: "
                     f"{len(_DESIGNS[key]['instances'])} instances in {dt:.0f} s")
    if on_module is not None and not announced:
        for name, text in _DESIGNS[key]["modules"].items():
            on_module(name, text)
    return _DESIGNS[key]


def _convert(spec, on_module=None):
    from amaranth.hdl import ClockDomain, Fragment
    from amaranth.hdl._ast import SignalDict, SignalSet
    from amaranth.hdl._ir import PortDirection
    from amaranth.lib import wiring

    from amaranth.back import rtlil

    from ...hw.instances import Sharing
    kw = {"missing_domain": lambda name: ClockDomain(name, reset_less=True)}
    recorder = Recorder()
    if spec.shares():
        top = spec.build(shared=Sharing(has_reset=False, instancer=recorder))
        parts = top.parts
    else:
        top, parts = spec.build(), {}
    found = recorder.found      # the top's shared-module instances, once it is elaborated
    ports = {}
    for path, member, value in top.signature.flatten(top):
        if hasattr(value, "as_value"):
            value = value.as_value()
        ports["__".join(map(str, path))] = (
            value, PortDirection.Input if member.flow == wiring.In else PortDirection.Output)
    fragment = Fragment.get(top, None)
    # Pure wires between instances (a link's output into a die) and from an
    # instance to a top port (a core's status) bypass the glue: the C++ top
    # copies them directly, and the glue keeps only what its logic reads.
    outs = SignalDict()         # exposed output signal -> (instance, port)
    for i, (_module, iports, _consts) in enumerate(found):
        for port, (signal, is_input) in iports.items():
            if not is_input:
                outs[signal] = (i, port)
    assigns, reads, writes = _scan(fragment)
    driver = SignalDict((lhs, rhs) for lhs, rhs in assigns if writes.get(lhs) == 1)

    def source(signal):
        """The exposed output ``signal`` is a pure wire from, or None."""
        for _ in range(64):
            signal = driver.get(signal)
            if signal is None or signal in outs:
                return signal
        return None
    wires, aliases = [], {}
    for name, (value, d) in list(ports.items()):
        if d == PortDirection.Output and isinstance(value, Signal) and source(value) is not None:
            aliases[name] = list(outs[source(value)])
            del ports[name]
    instances, inputs = [], []
    for i, (module, iports, consts) in enumerate(found):
        for port, (signal, is_input) in iports.items():
            if not is_input:
                inputs.append((i, port, signal))
            elif source(signal) is not None:
                wires.append([*outs[source(signal)], i, port])
            else:   # an input of the instance driven by glue logic: a glue output
                ports[glue_port(i, port)] = (signal, PortDirection.Output)
        instances.append([module, {k: list(v) for k, v in consts.items()}])
    # an instance output is a glue input only if the glue's logic reads it
    live = SignalSet(sig for sig, n in reads.items() if n)
    live |= SignalSet(v for v, _d in ports.values() if isinstance(v, Signal))
    feeds = SignalDict()
    for lhs, rhs in assigns:
        feeds.setdefault(lhs, []).append(rhs)
    todo = list(live)
    while todo:
        for rhs in feeds.get(todo.pop(), ()):
            if rhs not in live:
                live.add(rhs)
                todo.append(rhs)
    for i, port, signal in inputs:
        if signal in live:
            ports[glue_port(i, port)] = (signal, PortDirection.Input)
    in_bits = sum(len(v) for v, d in ports.values() if d == PortDirection.Input)
    if in_bits >= GLUE_INPUT_BITS:     # checked before any module is converted or built
        widest = {}
        for name, (v, d) in ports.items():
            if d == PortDirection.Input:
                # one kind per port of every instance and array index (n3_core_pc__7: core_pc)
                kind = re.sub(r"__\d+(?=__|$)", "", re.sub(r"^n\d+_", "", name))
                n, bits = widest.get(kind, (0, 0))
                widest[kind] = (n + 1, bits + len(v))
        top = sorted(widest.items(), key=lambda kv: -kv[1][1])[:4]
        raise UserError(f"the native backend cannot build this machine yet: its glue reads "
                        f"{in_bits} bits of the blocks' outputs (most: "
                        + ", ".join(f"{bits} bits of {n} x {kind}" for kind, (n, bits) in top)
                        + f"), and Amaranth converts a module with fewer than {GLUE_INPUT_BITS} "
                        f"input bits; use fewer dies, AIVs or data_bytes")
    # The shared modules, then the glue. A module goes to on_module (which may start its
    # build) as soon as it and the modules it instantiates are converted -- the die, the
    # longest build, while the switches, links and glue are still being converted. The
    # parts come container first (the die before its cores), so a module instantiated by
    # another is known as such before it could be sent alone.
    texts, sent = {}, set()
    for name, part in parts.items():
        planar = part.component() if hasattr(part.cls, "verilog") else None
        texts[name] = (planar.verilog(name, lambda n, p: part_verilog(n, p, True, kw))
                       if planar is not None else part_verilog(name, part, True, kw))
        inner = {d for n in texts for d in _with_dependencies(n, texts, names=True)[1:]}
        for n in texts:
            if n not in sent and n not in inner and all(
                    d in texts for d in _instantiated(texts[n]) if d in parts):
                sent.add(n)
                if on_module is not None:
                    on_module(n, _with_dependencies(n, texts))
    inner = {d for name in texts for d in _with_dependencies(name, texts, names=True)[1:]}
    assert not sent & inner, f"a module sent alone is instantiated by another: {sent & inner}"
    modules = {name: _with_dependencies(name, texts) for name in sorted(texts) if name not in inner}
    t0 = time.monotonic()
    with _zero_by_loop():
        text, _names = rtlil.convert_fragment(fragment, ports, GLUE, emit_src=False, **kw)
    glue = _add_zero_loops(_glue_verilog(text))
    log_event(verilog=GLUE, seconds=time.monotonic() - t0, bytes=len(glue))
    assert {module for module, _c in instances} <= set(modules), "an instance of an unconverted module"
    return {"glue": glue, "modules": modules, "instances": instances, "wires": wires,
            "aliases": aliases}


def _scan(fragment):
    """``(assignments, reads, writes)`` of a fragment tree.

    ``assignments``: ``(lhs, rhs)`` of every whole-signal comb assignment
    ``lhs.eq(rhs)`` at the top level of a module; ``reads``: ``{signal:
    count}`` of every other read (statement right-hand sides, conditions,
    indices, memory and instance ports) -- a signal counted here is used by
    the glue's logic; ``writes``: ``{signal: count}`` of assignments to it
    (a signal written once by a whole assignment is a pure wire).
    """
    from amaranth.hdl import Signal, Value
    from amaranth.hdl._ast import Assign, SignalDict, Switch
    from amaranth.hdl._ir import Fragment
    assigns, reads, writes = [], SignalDict(), SignalDict()

    def read(value):
        for sig in Value.cast(value)._rhs_signals():
            reads[sig] = reads.get(sig, 0) + 1

    def stmt(st, top):
        if isinstance(st, Assign):
            for sig in st.lhs._lhs_signals():
                writes[sig] = writes.get(sig, 0) + 1
            if top and isinstance(st.lhs, Signal) and isinstance(st.rhs, Signal):
                assigns.append((st.lhs, st.rhs))
                return
            read(st.rhs)
            for sig in st.lhs._rhs_signals():       # indices of a part-select
                if sig is not st.lhs:
                    reads[sig] = reads.get(sig, 0) + 1
        elif isinstance(st, Switch):
            read(st.test)
            for _patterns, body, _loc in st.cases:
                for sub in body:
                    stmt(sub, False)
        else:
            anything(st)

    def anything(obj, depth=0):
        if isinstance(obj, Value):
            read(obj)
        elif depth < 4 and isinstance(obj, (list, tuple)):
            for item in obj:
                anything(item, depth + 1)
        elif depth < 4 and isinstance(obj, dict):
            for item in obj.values():
                anything(item, depth + 1)
        elif depth < 4 and hasattr(obj, "__dict__") and not isinstance(obj, (Fragment, type)):
            for item in vars(obj).values():
                anything(item, depth + 1)

    def walk(frag):
        if type(frag) is not Fragment:
            for key, item in vars(frag).items():
                if key != "subfragments":
                    anything(item)
        for domain, statements in frag.statements.items():
            for st in statements:
                stmt(st, domain == "comb")
        for sub, _name, _loc in frag.subfragments:
            walk(sub)
    walk(fragment)
    return assigns, reads, writes


def _glue_verilog(rtlil_text):
    """Verilog of the glue's RTLIL: Amaranth's Yosys script plus ``opt_clean -purge``, no attributes.

    The glue keeps a named wire, with attributes, for every interface signal
    of every bypassed instance; Verilator parses them only to drop them, and
    the glue's build is the longest step of a large machine's. Removing them
    changes no logic (ports and registers stay; initial values are written
    as initialisers, not attributes). Measured at 16 x 8: 1.40 -> 1.22 MB.
    """
    from amaranth._toolchain.yosys import find_yosys
    yosys = find_yosys(lambda ver: ver >= (0, 40))
    script = [f"read_rtlil <<rtlil\n{rtlil_text}\nrtlil", "proc -nomux -norom", "memory_collect",
              "opt_clean -purge", "write_verilog -norename -noattr"]
    return yosys.run(["-q", "-"], "\n".join(script), ignore_warnings=True)


def _instantiated(text):
    """Names of the modules instantiated in Verilog ``text``."""
    return set(re.findall(r"^\s+(\w+) \S+ \($", text, re.M))


def _with_dependencies(name, texts, names=False):
    """Verilog of module ``name`` followed by every shared module it instantiates (``names``: their names)."""
    order, todo = [], [name]
    while todo:
        n = todo.pop()
        if n in order:
            continue
        order.append(n)
        todo += [d for d in _instantiated(texts[n]) if d in texts and d != n]
    return order if names else "\n".join(texts[n] for n in order)
