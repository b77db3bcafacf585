"""``epfabric verilog NAME [--param k=v ...] -o DIR``: Verilog for a registered component."""

from ...hw.validate import UserError
from ..output import check_output_dir
from ..flows.export import write_verilog
from ..flows.registry import build_component, registered
from .common import parse_params

__all__ = ["add_arguments", "prepare"]


def add_arguments(parser):
    parser.add_argument("name", nargs="?", help="component name (omit with --all or --list)")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="override a constructor parameter (Python literal)")
    parser.add_argument("-o", "--output", default="build/verilog", help="output folder")
    parser.add_argument("--all", action="store_true", help="write every registered component")
    parser.add_argument("--list", action="store_true", help="list components and their parameters")


def prepare(args):
    table = registered()
    if args.list:
        def listing():
            for name, (_cls, defaults) in table.items():
                print(f"{name}: " + " ".join(f"{k}={v!r}" for k, v in defaults.items()))
            return 0
        return listing
    if args.all:
        if args.param:
            raise UserError("--param cannot be combined with --all")
        names = list(table)
    elif args.name:
        names = [args.name]
    else:
        raise UserError(f"give a component name or --all; registered: {', '.join(table)}")
    check_output_dir(args.output, "--output")
    params = parse_params(args.param)
    # bad parameters fail here; the job converts these
    components = {name: build_component(name, params) for name in names}

    def job():
        for name, component in components.items():
            print(write_verilog(name, params, args.output, component=component))
        return 0
    return job
