"""gradcheck must catch wrong gradients, and every registered op must pass it."""

import numpy as np
import pytest

import nbgrad as nb
from nbgrad.__main__ import main as cli_main
from nbgrad.testing import GradcheckError, check_registered, gradcheck, gradgradcheck


class Cube(nb.Function):
    """y = x^3."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x * x * g


class CubeWithVjp(Cube):
    @staticmethod
    def vjp(ctx, g):
        (x,) = ctx.inputs
        return 3 * x * x * g


class WrongSecondCube(Cube):
    """Right first derivative; the vjp drops the dependence on x (a constant 3x^2)."""

    @staticmethod
    def vjp(ctx, g):
        (x,) = ctx.inputs
        return 3 * nb.tensor(x.data * x.data) * g


class WrongCube(Cube):
    """y = x^3 with the gradient of element 1 off by one."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        grad = 3 * x * x * g
        grad[1] += 1.0
        return grad


def test_gradcheck_passes_a_right_gradient_and_names_the_worst_element_of_a_wrong_one():
    x = np.array([0.5, -2.0, 1.0])
    assert gradcheck(Cube.apply, [x])
    with pytest.raises(GradcheckError, match=r"input 0 \(shape \(3,\)\): worst element \(1,\)"):
        gradcheck(WrongCube.apply, [x])
    np.testing.assert_array_equal(x, [0.5, -2.0, 1.0])  # inputs are not modified


def test_gradcheck_perturbs_non_contiguous_inputs():
    x = np.arange(1.0, 7.0).reshape(2, 3).T  # Fortran-ordered view
    assert gradcheck(Cube.apply, [x])
    with pytest.raises(GradcheckError):
        gradcheck(WrongCube.apply, [x])


def test_gradcheck_sees_every_output_element_not_just_the_sum():
    class ShiftedSoftmaxLikeBug(nb.Function):
        """y = x - mean(x): sum(y) is constant, so a zero backward would pass a plain sum."""

        @staticmethod
        def forward(ctx, x):
            return x - x.mean()

        @staticmethod
        def backward(ctx, g):
            return np.zeros_like(g)

    with pytest.raises(GradcheckError):
        gradcheck(ShiftedSoftmaxLikeBug.apply, [np.array([1.0, 2.0, 4.0])])


def test_registered_op_is_checked_through_its_samples_and_by_the_cli(capsys):
    nb.register("test_wrong_cube", samples=lambda rng: [nb.Sample(rng.random(4) + 0.5)])(
        WrongCube)
    try:
        report = check_registered("test_wrong_cube")
        assert not report.passed and report.samples == 1
        assert cli_main(["check", "test_wrong_cube"]) == 1
        assert "FAIL" in capsys.readouterr().out
    finally:
        del nb.REGISTRY["test_wrong_cube"]
    assert cli_main(["check", "no_such_op"]) == 2


@pytest.mark.parametrize("name", sorted(nb.REGISTRY))
def test_every_registered_op_passes_gradcheck_on_its_samples(name):
    report = check_registered(name)
    assert report.samples > 0, f"{name} registers no samples"
    assert report.passed, "\n".join(report.failures)


def test_gradgradcheck_passes_a_right_vjp_and_catches_a_constant_folded_one():
    x = np.array([0.5, -2.0, 1.0])
    assert gradgradcheck(CubeWithVjp.apply, [x])
    with pytest.raises(GradcheckError, match="gradgradcheck: input 0"):
        gradgradcheck(WrongSecondCube.apply, [x])
    with pytest.raises(RuntimeError, match="has no second derivative"):
        gradgradcheck(Cube.apply, [x])


@pytest.mark.parametrize("name", sorted(nb.REGISTRY))
def test_every_registered_op_passes_gradgradcheck_on_its_samples(name):
    report = check_registered(name, second_order=True)
    assert report.passed, "\n".join(report.failures)
