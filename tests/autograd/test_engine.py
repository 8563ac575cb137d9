"""Engine semantics, checked with small custom Functions so these tests depend on the
core alone: accumulation, fan-out, retain_graph, no_grad, detach, grad(), deep chains,
freeing of graph buffers, and the checks on what a backward returns."""

import gc
import tracemalloc
import warnings
import weakref

import numpy as np
import pytest

import nbgrad as nb


class Scale(nb.Function):
    """y = c * x."""

    @staticmethod
    def forward(ctx, x, c=2.0):
        ctx.c = c
        return x * x.dtype.type(c)

    @staticmethod
    def backward(ctx, g):
        return g * g.dtype.type(ctx.c)


class Square(nb.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class Total(nb.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return np.asarray(x.sum(), dtype=x.dtype)

    @staticmethod
    def backward(ctx, g):
        return np.broadcast_to(g, ctx.shape)


class Product(nb.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g * b, g * a


class SplitHalves(nb.Function):
    """Two outputs: the first and second half of a 1-D array."""

    @staticmethod
    def forward(ctx, x):
        ctx.n = x.shape[0]
        h = x.shape[0] // 2
        return x[:h].copy(), x[h:].copy()

    @staticmethod
    def backward(ctx, g1, g2):
        return np.concatenate([g1, g2])


def leaf(values, dtype=np.float64):
    return nb.tensor(np.asarray(values, dtype=dtype), requires_grad=True)


def test_chain_rule_through_custom_ops():
    x = leaf([1.0, 2.0, 3.0])
    Total.apply(Square.apply(Scale.apply(x, c=3.0))).backward()
    np.testing.assert_allclose(x.grad.numpy(), 18.0 * np.array([1.0, 2.0, 3.0]))


def test_fan_out_accumulates_both_paths():
    x = leaf([1.0, -2.0])
    y = Square.apply(x)
    Total.apply(Product.apply(y, y)).backward()  # sum x^4
    np.testing.assert_allclose(x.grad.numpy(), 4 * np.array([1.0, -8.0]))


def test_leaf_gradients_accumulate_across_backward_calls():
    x = leaf([1.0, 2.0])
    for _ in range(3):
        Total.apply(Square.apply(x)).backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * 2 * np.array([1.0, 2.0]))
    x.grad = None
    Total.apply(Square.apply(x)).backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])


def test_same_leaf_on_both_sides_gets_distinct_grad_arrays():
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    Total.apply(Product.apply(a, b)).backward()
    assert not np.shares_memory(a.grad.numpy(), b.grad.numpy())
    np.testing.assert_allclose(a.grad.numpy(), [3.0, 4.0])


def test_second_backward_through_freed_graph_is_an_error():
    x = leaf([1.0, 2.0])
    y = Total.apply(Square.apply(x))
    y.backward()
    with pytest.raises(RuntimeError, match="already freed.*retain_graph"):
        y.backward()


def test_retain_graph_allows_a_second_backward():
    x = leaf([1.0, 2.0])
    y = Total.apply(Square.apply(x))
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])


def test_no_grad_records_nothing_and_restores_state():
    x = leaf([1.0])
    with nb.no_grad():
        y = Square.apply(x)
    assert not y.requires_grad and y.grad_fn is None
    assert Square.apply(x).requires_grad

    @nb.no_grad()
    def f(t):
        return Square.apply(t)

    assert not f(x).requires_grad
    assert Square.apply(x).requires_grad


def test_requires_grad_propagates_only_from_inputs_that_need_it():
    a = nb.tensor(np.ones(2))
    b = leaf([1.0, 2.0])
    assert not Product.apply(a, a).requires_grad
    out = Product.apply(a, b)
    assert out.requires_grad and not out.is_leaf and out.grad_fn.fn is Product
    Total.apply(out).backward()
    assert a.grad is None
    np.testing.assert_allclose(b.grad.numpy(), [1.0, 1.0])


def test_detach_cuts_the_graph_and_shares_data():
    x = leaf([1.0, 2.0])
    y = Square.apply(x)
    d = y.detach()
    assert d.is_leaf and not d.requires_grad
    assert np.shares_memory(d.numpy(), y.numpy())
    z = Product.apply(d, x)
    Total.apply(z).backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 4.0])  # d treated as a constant


def test_grad_returns_without_touching_dot_grad():
    x = leaf([1.0, 3.0])
    y = Square.apply(x)
    (gx,) = nb.grad(Total.apply(y), x)
    np.testing.assert_allclose(gx.numpy(), [2.0, 6.0])
    assert x.grad is None


def test_grad_of_a_non_leaf_and_of_an_unused_input():
    x, unused = leaf([1.0, 3.0]), leaf([5.0])
    y = Scale.apply(x, c=3.0)
    gy, gx, gu = nb.grad(Total.apply(Square.apply(y)), [y, x, unused])
    np.testing.assert_allclose(gy.numpy(), 2 * 3 * np.array([1.0, 3.0]))
    np.testing.assert_allclose(gx.numpy(), 3 * gy.numpy())
    assert gu is None


def test_non_scalar_backward_needs_grad():
    x = leaf([1.0, 2.0])
    y = Square.apply(x)
    with pytest.raises(RuntimeError, match=r"scalar outputs.*shape \(2,\)"):
        y.backward()
    y.backward(np.array([1.0, -1.0]))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, -4.0])
    with pytest.raises(ValueError, match=r"grad has shape \(3,\).*\(2,\)"):
        Square.apply(x).backward(np.ones(3))


def test_backward_does_not_modify_the_grad_it_was_given():
    x = leaf([1.0, 2.0])
    g = np.array([1.0, 1.0])
    Scale.apply(x).backward(g)
    x.grad.numpy()[:] = 100.0
    np.testing.assert_array_equal(g, [1.0, 1.0])


def test_a_leaf_never_keeps_the_callers_grad_array():
    x = leaf([1.0, 2.0])
    g = np.array([3.0, 4.0])
    x.backward(g)
    assert not np.shares_memory(x.grad.numpy(), g)
    np.testing.assert_array_equal(x.grad.numpy(), g)


def test_deep_chain_of_ten_thousand_ops():
    x = leaf([1.0])
    y = x
    for _ in range(10_000):
        y = Scale.apply(y, c=1.0)
    Total.apply(y).backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0])


def test_multi_output_function_with_one_output_unused():
    x = leaf([1.0, 2.0, 3.0, 4.0])
    first, second = SplitHalves.apply(x)
    Total.apply(Square.apply(second)).backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.0, 6.0, 8.0])


def test_the_engine_reduces_broadcast_gradients_casts_dtypes_and_names_bad_shapes():
    class BadShape(nb.Function):
        @staticmethod
        def forward(ctx, x):
            return x.copy()

        @staticmethod
        def backward(ctx, g):
            return np.ones(7)

    class Broadcast(nb.Function):
        """Returns the gradient of x (shape (2,)) broadcast to (3, 2), in float64."""

        @staticmethod
        def forward(ctx, x):
            return x.copy()

        @staticmethod
        def backward(ctx, g):
            return np.broadcast_to(g.astype(np.float64) * 2, (3, 2))

    x = leaf([1.0, 2.0], dtype=np.float32)
    with pytest.raises(RuntimeError, match=r"BadShape.*shape \(7,\).*\(2,\) does not broadcast"):
        BadShape.apply(x).backward(np.ones(2, np.float32))
    Broadcast.apply(x).backward(np.array([1.0, 3.0], np.float32))
    assert x.grad.dtype == np.float32
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 18.0])  # 3 rows of 2 g


def test_backward_on_a_tensor_without_grad_is_an_error():
    with pytest.raises(RuntimeError, match="does not require grad"):
        nb.tensor([1.0]).backward()


def test_graph_buffers_are_freed_after_backward():
    x = leaf(np.ones(1000))
    c = np.full(1000, 2.0)
    ref = weakref.ref(c)
    y = Product.apply(x, c)
    del c
    assert ref() is not None  # saved for backward
    Total.apply(y).backward()
    gc.collect()
    assert ref() is None  # released by the backward, although y is still alive
    assert y.grad_fn.released


def test_no_memory_growth_over_a_thousand_training_steps():
    w = leaf(np.ones(10_000))
    data = np.linspace(0.0, 1.0, 10_000)

    def step():
        loss = Total.apply(Square.apply(Product.apply(w, data)))
        loss.backward()
        w.data -= 1e-6 * w.grad.data
        w.grad = None

    for _ in range(20):
        step()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(1000):
        step()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert after - before < 200_000, f"memory grew by {after - before} bytes"


def test_registering_a_duplicate_name_or_a_non_function_is_an_error():
    @nb.register("test_engine_scale", samples=lambda rng: [nb.Sample(rng.random(3))])
    class First(Scale):
        pass

    try:
        with pytest.raises(ValueError, match="already registered"):
            nb.register("test_engine_scale", samples=lambda rng: [])(Square)
        with pytest.raises(TypeError, match="Function subclasses"):
            nb.register("test_engine_plain", samples=lambda rng: [])(object)
    finally:
        del nb.REGISTRY["test_engine_scale"]


def test_a_leaf_gradient_never_views_an_array_someone_else_holds():
    """The engine keeps a gradient that views a private array (no copy: W4's matmul and
    W2e's layer_norm return such views) but copies one whose base is still referenced."""
    from nbgrad.autograd.engine import _views_a_shared_array
    private_view = np.arange(6.0).reshape(2, 3)  # its base is reachable only through it
    owner = np.arange(6.0)
    shared_views = owner.reshape(2, 3), owner[1:4]
    assert not _views_a_shared_array(private_view)
    assert not _views_a_shared_array(owner)
    assert all(_views_a_shared_array(v) for v in shared_views)

    kept = []

    class ViewOfKept(nb.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            buffer = np.zeros(g.size + 3, g.dtype)
            kept.append(buffer)
            buffer[:g.size] = 2 * g.ravel()
            return buffer[:g.size].reshape(g.shape)

    x = nb.tensor(np.ones((2, 3)), requires_grad=True)
    ViewOfKept.apply(x).backward(np.ones((2, 3)))
    kept[0][:] = -1.0
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 3), 2.0))


def test_gradients_overflow_to_inf_and_nan_without_warnings():
    """As in PyTorch, backward gives inf where a gradient overflows and NaN for 0 * inf,
    and warns about neither, though NumPy computes some of them (small products, the sum
    of a leaf's gradients)."""
    big = 3e38  # below float32's max; twice it, or times 2, is not
    x, u, v = (nb.tensor(np.array(values, np.float32), requires_grad=True)
               for values in ([big, 1.0, 2.0], [big, np.inf, 3.0], [2.0, 0.0, 1.0]))
    c = nb.tensor(np.array([big, 1.0, -1.0], np.float32))
    w = nb.tensor(np.ones(3, np.float32), requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ((x * u) * v).sum().backward()
        ((w * c).sum() + (w * c).sum()).backward()  # w's two gradients sum to inf
    inf, nan = np.inf, np.nan
    np.testing.assert_array_equal(x.grad.numpy(), np.float32([inf, nan, 3.0]))  # v u
    np.testing.assert_array_equal(u.grad.numpy(), np.float32([inf, 0.0, 2.0]))  # v x
    np.testing.assert_array_equal(v.grad.numpy(), np.float32([inf, inf, 6.0]))  # x u
    np.testing.assert_array_equal(w.grad.numpy(), np.float32([inf, 2.0, -2.0]))
