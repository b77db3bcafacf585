"""One parameter declaration (sw/param.py): what a value must be, command-line values, dataclass fields."""

import dataclasses

import pytest

from epfabric.hw.validate import UserError, UserTypeError
from epfabric.sw.kernels import KERNELS
from epfabric.sw.param import Param, literal, param, params_of


@pytest.mark.parametrize("p, value, exc, message", [
    (Param("seed", 0, "", int, minimum=0), -1, UserError, "seed must be >= 0, not -1"),
    (Param("seed", 0, "", int, minimum=0), 1.5, UserTypeError, "seed must be an integer, not 1.5"),
    (Param("seed", 0, "", int), True, UserTypeError, "seed must be an integer, not True"),
    (Param("share", 0.3, "", float), "x", UserTypeError, "share must be a number, not 'x'"),
    (Param("share", 0.3, "", float, minimum=0), -0.5, UserError, "share must be >= 0, not -0.5"),
    (Param("on", True, "", bool), 1, UserTypeError, "on must be a bool, not 1"),
    (Param("name", "a", "", str), 3, UserTypeError, "name must be a str, not 3"),
    (Param("system", "cann", "", str, ("cann", "ubep")), "mpi", UserError,
     "system must be one of cann, ubep, not 'mpi'"),
    (Param("broken", None, "", choices=(None, "x")), "y", UserError,
     "broken must be one of None, x, not 'y'"),
    (Param("lat", 1.0, "", float, unit="ns", positive=True, maximum=100), 0.0, UserError,
     r"lat must be in \(0, 100\] ns, not 0.0"),
    (Param("lat", 1.0, "", float, unit="ns", positive=True), float("inf"), UserError,
     r"lat must be a finite number > 0 ns, not inf"),
    (Param("lat", 1.0, "", float, minimum=0), float("nan"), UserError,
     r"lat must be a finite number >= 0, not nan"),
    (Param("aivs", 4, "", int, minimum=1, maximum=256), 257, UserError,
     r"aivs must be in \[1, 256\], not 257"),
])
def test_a_bad_value_is_named_with_the_parameter(p, value, exc, message):
    with pytest.raises(exc, match=message):
        p.check(value)


def test_good_values_pass_unchanged():
    assert Param("cap", None, "", int).check(None) is None         # unset: the owner chooses
    assert Param("share", 0.3, "", float).check(1) == 1
    assert Param("any", (), "").check("1,2") == "1,2"               # untyped: the owner checks
    assert Param("broken", None, "", choices=(None, "x")).check("x") == "x"


def test_command_line_values():
    system = Param("system", "cann", "", str, ("cann", "ubep", "ubep-inc"))
    assert system.values("cann,UBEP,Ubep-Inc") == ["cann", "ubep", "ubep-inc"]
    assert Param("seed", 0, "", int).values("1,2") == [1, 2]
    assert Param("roles", (1, 5, 2), "", sequence=True).values("1,5,2;2,4,2") == [(1, 5, 2),
                                                                                (2, 4, 2)]
    assert Param("routing", None, "").values("r.npz") == ["r.npz"]
    assert (literal("None"), literal("[1, 2]"), literal("abc")) == (None, [1, 2], "abc")


def test_a_dataclass_field_declared_by_a_param():
    @dataclasses.dataclass(frozen=True)
    class Thing:
        name: str = param("what it is called")
        size: int = param("how big", default=4, type=int, minimum=1)
    a, b = params_of(Thing)
    assert a == Param("name", None, "what it is called")
    assert b == Param("size", 4, "how big", int, minimum=1)
    assert Thing(name="x").size == 4


def test_every_kernel_declares_its_parameters_with_help():
    for kernel in KERNELS.values():
        assert all(isinstance(p, Param) and p.help for p in kernel.params), kernel.name
        assert len(kernel.defaults) == len(kernel.params), kernel.name       # names unique
        assert set(kernel.defaults) <= set(kernel.resolve_params({})), kernel.name
