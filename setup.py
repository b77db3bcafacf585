"""Package discovery for the top-level ``hw/``, ``sw/`` and ``sim/`` folders.

They are installed as ``epfabric.hw``, ``epfabric.sw`` and ``epfabric.sim``
(the project's required layout keeps them at the top of the checkout), so
setuptools' automatic discovery, which would install them as top-level
``hw``/``sw``/``sim``, cannot be used. Every folder below them that has an
``__init__.py`` is a package here: a new sub-package cannot be left out of
the wheel (``tests/test_packaging.py`` checks it). Everything else is in
``pyproject.toml``.
"""

from setuptools import find_packages, setup

TOPS = ("hw", "sw", "sim")

setup(
    packages=[f"epfabric.{top}{'.' + sub if sub else ''}"
              for top in TOPS for sub in ["", *find_packages(top)]],
    package_dir={f"epfabric.{top}": top for top in TOPS},
)
