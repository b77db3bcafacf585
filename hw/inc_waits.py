"""What can wait on what in an in-network fabric: its wait-for graph, and a cycle in it.

A flit in a link's buffer waits for the next buffer of its path; in a switch that sums its
group, for the switch's reduction unit, which waits for the buffer its releases leave by
(hw/inc_reduce.py: the unit waits for nothing else -- formal lemma ``inc_drain.absorb``).
A multicast copy waits for the buffers of every path it takes. Buffers are FIFOs and a
flit never waits for a buffer of its own path behind it, so the classic argument applies
(Dally and Seitz, "Deadlock-free message routing in multiprocessor interconnection
networks", IEEE Trans. Computers C-36(5), 1987): if this graph has no cycle, no set of full
buffers can wait on each other, and every flit moves on as long as every receiver keeps
taking flits. A cycle is a wait that may close: the two-tier superpod whose tier-1 units
also summed groups leaving the board had one, and simulation reached it
(docs/concepts/inc-deadlock.md).

The graph is built from what the hardware is built from -- each switch's ``routes``, the
links' ends, each switch's reduction table (:func:`~epfabric.hw.topology.subtrees`, as
restricted by the builder) and the tier-1 multicast uplinks -- so a change of any of them
is checked (tests/hw/test_inc_waits.py, on nine superpod shapes up to 64 dies).

Nodes: ``("link", i)`` for link ``i`` (its buffers: the link's registers and the input FIFO
of the switch it enters) and ``("unit", name)`` for the reduction unit of switch ``name``.
"""

from .validate import UserError

__all__ = ["wait_graph", "find_cycle"]


def wait_graph(routing):
    """``{node: set of nodes it may wait for}`` of a fabric's ``routing`` (a fabric's
    ``routing`` attribute, or :func:`~epfabric.hw.topology.superpod` with ``routing_only``:
    ``ranks``, ``routes``, ``ends``, ``tables``, ``mcast_uplinks``)."""
    ranks, routes, ends = routing["ranks"], routing["routes"], routing["ends"]
    tables, uplinks = routing["tables"], routing.get("mcast_uplinks", {})
    by_src = {src: i for i, (src, _dst) in enumerate(ends)}
    graph = {("link", i): set() for i in range(len(ends))}
    graph.update({("unit", name): set() for name in routes})

    def out_link(name, port):
        try:
            return by_src[(name, port)]
        except KeyError:
            raise UserError(f"switch {name!r} routes to port {port}, which has no link") from None

    def walk(s, d, multicast):
        """The links of the path from rank ``s`` to rank ``d`` (a multicast copy's: across
        boards by the source's plane), with the switch each link enters."""
        i = by_src[("tx", s)]
        path = []
        while True:
            end = ends[i][1]
            path.append((i, end[0]))
            if end == ("rx", d):
                return path
            name = end[0]
            if name not in routes or len(path) > len(ends):
                raise UserError(f"the path from rank {s} to {d} ends at {end!r}")
            port = routes[name][d]
            if multicast and name in uplinks:
                first, count = uplinks[name]
                if first <= port < first + count:
                    port = first + s % count
            i = out_link(name, port)

    for s in range(ranks):
        for d in range(ranks):
            if s == d:
                continue
            for multicast in (False, True):
                path = walk(s, d, multicast)
                for (a, name), (b, _next) in zip(path, path[1:]):
                    graph[("link", a)].add(("link", b))
                    entry = tables[name][d] if name in tables else 0
                    if not multicast and entry.bit_count() >= 2 and entry >> s & 1:
                        # s's contribution to a group of d may enter the unit here, whose
                        # release for d leaves by link b
                        graph[("link", a)].add(("unit", name))
                        graph[("unit", name)].add(("link", b))
    return graph


def find_cycle(graph):
    """A cycle of ``graph`` as a list of nodes (the first repeated at the end), or ``None``."""
    done, on_path = set(), set()
    for root in sorted(graph):
        if root in done:
            continue
        stack = [(root, iter(sorted(graph[root])))]       # the path from root, depth first
        on_path.add(root)
        while stack:
            node, nexts = stack[-1]
            for nxt in nexts:
                if nxt in on_path:
                    path = [n for n, _ in stack]
                    return path[path.index(nxt):] + [nxt]
                if nxt not in done:
                    stack.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    on_path.add(nxt)
                    break
            else:
                stack.pop()
                on_path.discard(node)
                done.add(node)
    return None
