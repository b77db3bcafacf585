"""``epfabric presets [--show NAME|FILE.toml]``: the machines, and any one as a machine file.

Without ``--show``: one line per built-in preset (its name, shape, link rate, latencies and
what it models). ``--show NAME`` prints the preset as TOML (:func:`~epfabric.sw.preset_file.
preset_toml`): every field with its help, unit and range, which ``--preset FILE.toml`` reads
back as an equal machine, so a user starts from ``cm384`` and changes one line; ``--show
FILE.toml`` checks a machine file and prints what it resolves to.
"""

from tabulate import tabulate

from ...hw.validate import UserError
from ...sw.preset_file import preset_toml
from ...sw.presets import PRESETS, get_preset
from .common import check_output
from ..output import write_atomic

__all__ = ["add_arguments", "prepare", "summary"]


def add_arguments(parser):
    parser.add_argument("--show", metavar="NAME", default=None,
                        help=f"print preset NAME ({', '.join(PRESETS)}) or a machine file "
                             "FILE.toml, checked, as TOML with each field's help, unit and range")
    parser.add_argument("-o", "--output", metavar="FILE", default=None,
                        help="with --show: write the TOML to FILE instead of printing it")


def summary(preset):
    """One line about ``preset``'s machine: shape, link rate, latencies per distance class."""
    if preset.topology == "star":
        shape = f"star of {preset.ranks}"
    else:
        shape = f"superpod {preset.dies_per_npu}x{preset.npus_per_board}x{preset.boards}"
    latency = "/".join(f"{v:g}" for v in preset.latency_ns().values())
    return (f"{shape}, {preset.aivs_per_die} AIVs/die, {preset.bandwidth_gbytes_s:g} GB/s, "
            f"{latency} ns")


def prepare(args):
    if args.output is not None and args.show is None:
        raise UserError("--output needs --show NAME")
    preset = None if args.show is None else get_preset(args.show)
    check_output(args.output, "--output")

    def job():
        if preset is None:
            print(tabulate([(p.name, summary(p), p.description.split(":")[0])
                            for p in PRESETS.values()],
                           headers=("preset", "machine", "models"), tablefmt="plain"))
        elif args.output:
            write_atomic(args.output, preset_toml(preset))
            print(f"wrote {args.output}")
        else:
            print(preset_toml(preset), end="")
        return 0
    return job
