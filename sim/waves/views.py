"""The save file of a machine run (``epfabric run --vcd``): what to show, and where to look.

* :func:`parse_scopes` and :func:`scopes_for` — the ``--vcd-scope`` dies and cores;
* :func:`machine_view` — per chosen die/core the core's state, pc, wait
  address and MARK events, the die's UB port commits and its links' occupancy;
  :func:`generic_view` — run control and the top-level ports of a top without
  AIV cores; both open on the run (:func:`run_window`: markers A/B on its start
  and end);
* :func:`write_run_views` — the ``.gtkw`` of every dump a :class:`~.dump.Waveform`
  collected.
"""

from ...hw.validate import UserError
from .gtkw import Comment, Group, Marker, Trace, write_gtkw
from .dump import read_dump

__all__ = ["parse_scopes", "scopes_for", "run_window", "machine_view", "generic_view",
           "write_run_views"]


def parse_scopes(text, *, ranks, aivs):
    """``[(rank, core), ...]`` from ``"1:0,0:1"`` (``R:C``, ``R`` = every core of die R)."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        rank, sep, core = part.partition(":")
        try:
            r = int(rank)
            cores = [int(core)] if sep else list(range(aivs))
        except ValueError:
            raise UserError(f"--vcd-scope must look like DIE:CORE or DIE (e.g. 1:0), "
                            f"not {part!r}") from None
        if not 0 <= r < ranks:
            raise UserError(f"--vcd-scope die must be in [0, {ranks - 1}], not {r}")
        for c in cores:
            if not 0 <= c < aivs:
                raise UserError(f"--vcd-scope core must be in [0, {aivs - 1}], not {c}")
            if (r, c) not in out:
                out.append((r, c))
    return out


def scopes_for(text, configs):
    """The ``(rank, core)`` pairs ``--vcd-scope`` ``text`` names (``None``: ``0:0``), checked
    on every AIV machine of ``configs``; ``None`` when none has AIV cores."""
    scopes = None
    for config in configs:
        if config.kind != "aiv":
            if text is not None:
                raise UserError(f"--vcd-scope: the {config.kind} machine has no AIV cores")
            continue
        scopes = parse_scopes(text or "0:0", ranks=config.ranks, aivs=config.aivs_per_die)
    return scopes


def _run_control():
    return Group("run control", [Trace(("host__running",), "running"),
                                 Trace(("host__cycle",), "cycle", fmt="dec"),
                                 Trace(("host__done",), "done"),
                                 Trace(("host__timeout",), "timeout")])


def run_window(dump, edges):
    """``(markers, window)`` of a machine run: A at ``host.running``'s rise, B at its fall."""
    running = edges.get("host.running", [])
    rise = next((t for t, v in running if v == 1), None)
    if rise is None:
        return [], None
    fall = next((t for t, v in running if v == 0 and t > rise), None)
    start = dump.to_units(rise)
    end = dump.to_units(fall) if fall is not None else dump.end()
    pad = max(2 * dump.clock(), (end - start) // 20)
    return ([Marker("run start", start), Marker("run end", end)],
            (max(0, start - pad), end + pad))


def generic_view(dump, edges, *, limit=48):
    """Rows, markers and window of a run of a top without AIV cores: run control and its ports."""
    top = min((v.scope for v in dump.vars if v.scope and v.scope[-1] == "top"), key=len,
              default=None)
    ports = sorted({v.name for v in dump.vars if v.scope == top} - {"clk", "rst"})
    rows = [_run_control(),
            Group("top-level ports", [Trace((name,), name) for name in ports[:limit]])]
    markers, window = run_window(dump, edges)
    return rows, markers, window


def machine_view(system, dump, scopes, edges, *, core_state=None, ub_op=None):
    """Rows, markers and window of a machine run's save file.

    ``system`` is the run's :class:`~epfabric.hw.system.System` (for its
    shape and fabric links); ``scopes`` the ``(rank, core)`` pairs to show;
    ``edges`` the run's recorded ``host.running`` edges (:class:`Waveform`).
    ``core_state``/``ub_op`` are the enums of the core state and UB request op.
    Returns ``(rows, markers, window)``.
    """
    rows = [Comment(f"{system.ranks} dies x {system.aivs_per_die} AIVs: A run start, B run end"),
            _run_control()]
    dies = []
    for r, c in scopes:
        core = (f"die{r}", f"core{c}")
        rows.append(Group(f"die {r} core {c}", [
            Comment("state: RUN, MEM = waits on memory, VEC, HALT"),
            Trace((*core, "state"), "state", enum=core_state),
            Trace((*core, "pc"), "pc", fmt="dec"),
            Trace((*core, "waiting"), "waiting", fmt="bin"),
            Trace((*core, "wait_addr"), "wait_addr"),
            Trace((*core, "outstanding"), "stores in flight", fmt="dec"),
            Trace((*core, "trace__valid"), "MARK", fmt="bin"),
            Trace((*core, "trace__payload.event"), "MARK event", fmt="dec"),
            Trace((*core, "halted"), "halted", fmt="bin"),
        ]))
        if r not in dies:
            dies.append(r)
    for r in dies:
        mem = (f"die{r}", "mem")
        rows.append(Group(f"die {r} UB port", [
            Comment("commit: a block or word lands in HBM"),
            Trace((*mem, "commit_valid"), "commit", fmt="bin"),
            Trace((*mem, "i_req__valid"), "request", fmt="bin"),
            Trace((*mem, "i_req__payload.op"), "op", enum=ub_op),
            Trace((*mem, "i_req__payload.addr"), "block", fmt="dec"),
        ]))
        links = []
        for n, (_link, src, dst) in enumerate(system.fabric.links):
            if not (src == ("tx", r) or dst == ("rx", r) or f"die{r}" in (src[0], dst[0])):
                continue
            name = f"{src[0]}{src[1]}_to_{dst[0]}{dst[1]}"
            scope = ("fabric", f"link{n}_{name}")
            if dump.find(*scope, "level") is not None:
                links.append(Trace((*scope, "level"), f"{name} in flight", fmt="dec"))
            else:   # a latency-0 link (a rate limiter) holds nothing: show its traffic
                links.append(Trace((*scope, "i_stream__valid"), f"{name} valid", fmt="bin"))
        rows.append(Group(f"die {r} links", [Comment("flits in flight (link occupancy)"),
                                             *links]))
    markers, window = run_window(dump, edges)
    return rows, markers, window


def write_run_views(waveform, scopes):
    """Write the .gtkw of every dump ``waveform`` collected and say where they are."""
    from amaranth.hdl import Fragment
    from ...hw.instances import Sharing
    from ...hw.ub_port import UBOp
    if waveform is None:
        return
    for run in waveform.runs:
        dump = read_dump(run["path"])
        if scopes is not None and run["spec"].shares():
            # its shape and names: the top with its repeated blocks as parts (no die built),
            # and the core part for its state enum -- elaborated, as built designs are
            top = run["spec"].build(shared=Sharing(has_reset=False))
            core = top.parts["epf_aiv"].component()
            Fragment.get(top, None)
            Fragment.get(core, None)
            rows, markers, window = machine_view(top, dump, scopes, run["edges"],
                                                 core_state=core.state.shape(), ub_op=UBOp)
        else:
            rows, markers, window = generic_view(dump, run["edges"])
        gtkw = run["path"].with_suffix(".gtkw")
        missing = write_gtkw(gtkw, dump, rows, markers=markers, window=window,
                             comment=f"epfabric run on {run['simulator']}: marker A run start, "
                                     f"B run end")
        note = f" (not in this dump: {', '.join('.'.join(p) for p in missing)})" if missing else ""
        print(f"wrote {run['path']} + {gtkw.name}{note}: gtkwave {gtkw}")
