# amaranth: UnusedElaboratable=no
"""``rejected(factory, **params)``: build what a test expects the factory to refuse.

A constructor that raises leaves the object Amaranth already made for it: an
elaboratable never elaborated, which the suite turns into a failure
(pyproject.toml: ``UnusedElaboratable`` is an error). Amaranth reports an
elaboratable where the code that created it says so; the first line of this
file says not to, so only what is created *here*, directly, is exempt -- the
half-built object of a refused construction. Blocks that the factory builds
before it refuses (a die's cores built before a bad fabric is noticed) are
still reported: check the parameters before building them. The rule that no
other test file carries the option is ``tests/test_suite_rules.py``'s.
"""


def rejected(factory, *args, **params):
    """``factory(*args, **params)``, which the caller expects to raise."""
    return factory(*args, **params)
