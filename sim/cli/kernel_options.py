"""The options ``epfabric run`` makes of the kernels' parameters, and of ``--knob``.

Every :class:`~epfabric.sw.param.Param` of a registered kernel is an option
``--NAME`` (:func:`add_kernel_options`): its help says what it sets, the names it
takes and each kernel's default. :func:`kernel_options` reads them for one kernel: a
value is a Python literal (else a string), a name matches in any case, and one option
may list values (``--system cann,ubep``; a sequence parameter's values are separated
by ``;``: ``--roles '1,5,2;2,4,2'``), which the command runs once each.
"""

from ...hw.validate import UserError
from ...sw.kernels import KERNELS

__all__ = ["add_kernel_options", "kernel_options", "option", "parse_knobs"]


def add_kernel_options(parser):
    """One ``--NAME`` option (dest ``kernel_NAME``) per kernel parameter the parser lacks."""
    taken = {a.dest for a in parser._actions}
    for name in sorted({p.name for k in KERNELS.values() for p in k.params} - taken):
        parser.add_argument(option(name), dest=f"kernel_{name}", default=None,
                            metavar="VALUE", help=_help(name))


def option(name):
    """``--NAME`` of parameter ``name`` (``cumsum_aivs`` → ``--cumsum-aivs``)."""
    return f"--{name.replace('_', '-')}"


def _help(name):
    """``--NAME``'s help: what it sets, its values where they are names, each kernel's default."""
    owners = [(k.name, k.param(name)) for k in KERNELS.values() if name in k.defaults]
    values = ", ".join(sorted({str(v) for _k, p in owners for v in p.choices or ()}))
    helps, defaults = {}, {}
    for k, p in owners:
        helps.setdefault(p.help, []).append(k)
        defaults.setdefault("unset (the kernel chooses)" if p.default is None else repr(p.default),
                            []).append(k)
    what = "; ".join(h if len(helps) == 1 else f"{', '.join(ks)}: {h}" for h, ks in helps.items())
    text = "; ".join(f"{d} ({', '.join(ks)})" for d, ks in defaults.items())
    return (f"kernel parameter {name} (= --param {name}=VALUE): {what}"
            + (f"; one of {values}" if values else "") + f"; default {text}")


def kernel_options(args, kernel, params):
    """Every ``--NAME`` kernel option given, into ``params`` (a list: its first value); the
    ``(name, [values])`` of the one option given a list, or ``None``."""
    sweep = None
    for key, text in vars(args).items():
        if not key.startswith("kernel_") or text is None:
            continue
        name = key[len("kernel_"):]
        if name not in kernel.defaults:
            valid = ", ".join(map(option, kernel.defaults)) or "none"
            raise UserError(f"{option(name)} is not a parameter of kernel {kernel.name}; its "
                            f"parameters: {valid}")
        if name in params:
            raise UserError(f"{option(name)} and --param {name}=... both given")
        values = kernel.param(name).values(text)
        repeated = [v for i, v in enumerate(values) if v in values[:i]]
        if repeated:
            raise UserError(f"{option(name)} {text}: {repeated[0]!r} is listed twice; give each "
                            f"value once")
        if len(values) > 1:
            if sweep:
                raise UserError(f"one option may list values, not {option(name)} and "
                                f"{option(sweep[0])}")
            sweep = (name, values)
        params[name] = values[0]
    return sweep


def parse_knobs(given, kernel, preset, topology, aivs):
    """``{name: value}`` of ``--knob NAME=VALUE`` options, each checked (name and range) on a
    machine of the kernel's before anything runs."""
    from ...hw.die import KNOBS, check_knob
    knobs = {}
    for text in given:
        name, eq, value = text.partition("=")
        if not eq or not value.strip().isdigit():
            raise UserError(f"--knob must be NAME=INTEGER (a knob of {', '.join(KNOBS)}), "
                            f"not {text!r}")
        knobs[name.strip()] = int(value)
    if knobs:
        config = kernel.configs(preset, topology, aivs, kernel.resolve_params({}))[0]
        if config.kind != "aiv":
            raise UserError(f"--knob: kernel {kernel.name} does not run on the AIV machine")
        for name, value in knobs.items():
            check_knob(name, value, config.max_outstanding)
    return knobs
