"""``epfabric verilog NAME [--param k=v ...] -o DIR``: Verilog for a registered component."""

from pathlib import Path

from .registry import build_component, parse_params, registered

__all__ = ["write_verilog", "add_arguments", "main"]


def write_verilog(name, params, out_dir):
    """Write ``<out_dir>/<name>.v`` (top module ``name``) and return its path."""
    from amaranth.back import verilog

    component = build_component(name, params)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.v"
    path.write_text(verilog.convert(component, name=name, emit_src=False))
    return path


def add_arguments(parser):
    parser.add_argument("name", nargs="?", help="component name (omit with --all or --list)")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="override a constructor parameter (Python literal)")
    parser.add_argument("-o", "--output", default="build/verilog", help="output folder")
    parser.add_argument("--all", action="store_true", help="write every registered component")
    parser.add_argument("--list", action="store_true", help="list components and their parameters")


def main(args):
    table = registered()
    if args.list:
        for name, (_cls, defaults) in table.items():
            print(f"{name}: " + " ".join(f"{k}={v!r}" for k, v in defaults.items()))
        return 0
    if args.all:
        if args.param:
            raise ValueError("--param cannot be combined with --all")
        names = list(table)
    elif args.name:
        names = [args.name]
    else:
        raise ValueError(f"give a component name or --all; registered: {', '.join(table)}")
    for name in names:
        print(write_verilog(name, parse_params(args.param), args.output))
    return 0
