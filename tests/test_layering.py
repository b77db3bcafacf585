"""Layering: the house's rooms, and every import goes down, checked on the AST of every module.

The rooms are listed lowest first in :data:`ROOMS`; a module belongs to the
room with the longest matching prefix and may import its own room and rooms
listed before it — never one after (an arrow back up). Every ``import`` and
``from ... import`` anywhere in a module (top level or inside a function: a
lazy import is still a dependency) is resolved to the module it names. Since
the order is total, the graph of rooms has no loops. A module in no room
fails too: a new folder must be given its place here (and in the docs).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOPS = ("hw", "sw", "sim")

#: (room, its one job), lowest first: a room may import only itself and the rooms above it here.
ROOMS = [
    ("hw", "the machine's design blocks"),
    ("sw", "ISA, assembler, machine configuration and presets (with their parameters' "
           "provenance), the Machine driver, routing and mapping helpers"),
    ("sw.ubep", "UBEP's and CANN's dispatch/combine programs, their layout and numpy references"),
    ("sw.incmoe", "INC-MoE's layer program, layout and numpy reference"),
    ("sw.kernels", "the registered kernels: program + numpy check"),
    ("sw.buffer", "the DeepEP-like Python API over the kernels"),
    ("sim", "version, output paths and safe writes, optional extras"),
    ("sim.tb", "testbench hardware and bus-functional models"),
    ("sim.waves", "waveforms a person can read: dumps, GTKWave save files, a machine run's view"),
    ("sim.backends", "the simulators, simulation Verilog, machine backends"),
    ("sim.flows", "Verilog export, lint, FPGA synthesis, formal proofs"),
    ("sim.verify", "mutation testing and soaks"),
    ("sim.lab.results", "result cache, files and plots, knowing no experiment"),
    ("sim.lab.experiments", "the experiments"),
    ("sim.lab", "sweeps and the reproduce pipeline"),
    ("sim.cli", "the epfabric command"),
]
ORDER = {name: i for i, (name, _job) in enumerate(ROOMS)}


def module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def all_modules():
    return sorted(p for top in TOPS for p in (ROOT / top).rglob("*.py"))


def room_of(module):
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in ORDER:
            return ".".join(parts[:n])
    return None


def imported_modules(module, is_package, source):
    """``{(module name without epfabric., line)}`` of every epfabric import in ``source``."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("epfabric."):
                    found.add((alias.name[len("epfabric."):], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                up = node.level - 1
                base = package[:len(package) - up] if up <= len(package) else []
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("epfabric."):
                target = node.module[len("epfabric."):]
            elif node.module == "epfabric":
                target = ""
            else:
                continue
            for alias in node.names:     # `from pkg import module` names a module of pkg
                found.add((f"{target}.{alias.name}" if target else alias.name, node.lineno))
    return {(m, line) for m, line in found if m.split(".")[0] in TOPS}


def violations(path, source=None):
    module = module_name(path)
    source = path.read_text() if source is None else source
    own = room_of(module)
    if own is None:
        return [f"{path.relative_to(ROOT)} is in no room (add its folder to ROOMS)"]
    bad = []
    for target, line in sorted(imported_modules(module, path.name == "__init__.py", source)):
        room = room_of(target)
        if room is None or ORDER[room] > ORDER[own]:
            bad.append(f"{path.relative_to(ROOT)}:{line} ({own}) imports epfabric.{target} ({room})")
    return bad


@pytest.mark.parametrize("top", TOPS)
def test_imports_go_down(top):
    bad = [line for path in all_modules() if path.parts[len(ROOT.parts)] == top
           for line in violations(path)]
    assert not bad, "layering violations:\n" + "\n".join(bad)


def test_every_room_exists_and_has_modules():
    rooms = {room_of(module_name(p)) for p in all_modules()}
    assert rooms == set(ORDER), f"rooms without modules: {set(ORDER) - rooms}"


def test_the_checker_sees_relative_lazy_and_upward_imports():
    """Planted violations in each form are found (so the checks above can fail)."""
    source = ("from ..sw import presets\n"
              "def f():\n    from epfabric.sim import backends\n"
              "import epfabric.sw.isa\n"
              "from . import link\n")
    found = violations(ROOT / "hw" / "probe.py", source)
    assert [v.split(" imports ")[1] for v in found] == [
        "epfabric.sim.backends (sim.backends)", "epfabric.sw.isa (sw)", "epfabric.sw.presets (sw)"]
    # within sim: the lab's results may not import an experiment, a backend may not import the CLI
    up = violations(ROOT / "sim" / "lab" / "results" / "probe.py", "from ..experiments import X\n")
    assert up and "sim.lab.experiments" in up[0]
    up = violations(ROOT / "sim" / "backends" / "probe.py", "from ..cli import main\n")
    assert up and "(sim.cli)" in up[0]
    assert violations(ROOT / "sim" / "cli" / "probe.py", "from ..lab import reproduce\n") == []
    assert room_of("sim.attic.probe") == "sim" and room_of("attic.probe") is None


def room_graph():
    """``{room: {rooms it imports}}`` over every module (the picture of the house)."""
    graph = {name: set() for name, _job in ROOMS}
    for path in all_modules():
        own = room_of(module_name(path))
        for target, _line in imported_modules(module_name(path), path.name == "__init__.py",
                                              path.read_text()):
            if room_of(target) not in (None, own):
                graph[own].add(room_of(target))
    return graph


if __name__ == "__main__":     # python tests/test_layering.py: the rooms and their arrows
    for name, job in ROOMS:
        arrows = sorted(room_graph()[name], key=ORDER.get)
        print(f"{name:<20} {job}\n{'':<20} -> {', '.join(arrows) or '(nothing)'}")


def test_the_code_names_no_issue():
    """A tracker's number in the code ("issue 30's knob") tells a reader nothing the code
    cannot say itself: name the mechanism, the paper section or the measurement instead."""
    import re
    issue = re.compile(r"\bissues?\s+#?\d+", re.I)
    bad = {str(p.relative_to(ROOT)): issue.findall(p.read_text())
           for p in all_modules() if issue.search(p.read_text())}
    assert not bad, f"code citing issues: {bad}"
    assert issue.findall("(issue 30's knob; Issue\n29)") == ["issue 30", "Issue\n29"]
