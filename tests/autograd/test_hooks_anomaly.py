"""Gradient hooks, anomaly mode, and the guards on ``.grad`` and ``.numpy()``."""

import gc
import re
import weakref

import numpy as np
import pytest

import nbgrad as nb


def _chain(lib, x, hook_on_leaf, hook_on_mid):
    """y = sum((3x)^2 + 3x) with hooks on x and on the intermediate 3x (used twice, so
    its hook must see the summed gradient 2*3x + 1)."""
    if hook_on_leaf:
        x.register_hook(hook_on_leaf)
    mid = x * 3
    if hook_on_mid:
        mid.register_hook(hook_on_mid)
    return (mid * mid + mid).sum()


@pytest.mark.parametrize("case", ["leaf", "mid", "both"])
def test_hooks_change_gradients_as_in_pytorch(case):
    torch = pytest.importorskip("torch")
    x0 = np.array([0.5, -1.0, 2.0])
    leaf_hook = {"leaf": True, "mid": False, "both": True}[case]
    mid_hook = case in ("mid", "both")
    grads = {}
    for lib, make in ((nb, lambda: nb.tensor(x0, requires_grad=True)),
                      (torch, lambda: torch.tensor(x0, requires_grad=True))):
        x = make()
        seen = []
        _chain(lib, x,
               (lambda g: g * 10) if leaf_hook else None,
               (lambda g, seen=seen: seen.append(np.array(g.detach().numpy())) or g + 1)
               if mid_hook else None).backward()
        grads[lib.__name__] = (np.array(x.grad.detach().numpy()), seen)
    (g_nb, seen_nb), (g_torch, seen_torch) = grads["nbgrad"], grads["torch"]
    np.testing.assert_allclose(g_nb, g_torch, rtol=1e-14)
    assert len(seen_nb) == len(seen_torch)
    for a, b in zip(seen_nb, seen_torch):
        np.testing.assert_allclose(a, b, rtol=1e-14)


def test_hook_fires_once_with_the_summed_gradient_and_can_be_removed():
    x = nb.tensor(np.array([1.0, 2.0]), requires_grad=True)
    calls = []
    handle = x.register_hook(lambda g: calls.append(g.numpy().copy()))
    (x * 2 + x * 5).sum().backward()
    assert len(calls) == 1
    np.testing.assert_array_equal(calls[0], [7.0, 7.0])
    handle.remove()
    (x * 2).sum().backward()
    assert len(calls) == 1
    np.testing.assert_array_equal(x.grad.numpy(), [9.0, 9.0])


def test_hooks_apply_in_grad_and_under_create_graph():
    x = nb.tensor(np.array([1.0, 2.0]), requires_grad=True)
    x.register_hook(lambda g: g * 0.5)
    (gx,) = nb.grad((x * x).sum(), x)
    np.testing.assert_array_equal(gx.numpy(), [1.0, 2.0])  # 2x halved
    (gx,) = nb.grad((x * x * x).sum(), x, create_graph=True)  # 3x^2 halved, in the graph
    (ggx,) = nb.grad(gx.sum(), x)  # d/dx 1.5 x^2 = 3x, halved again by the hook
    np.testing.assert_array_equal(ggx.numpy(), [1.5, 3.0])


def test_hook_errors():
    x = nb.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(RuntimeError, match="does not require grad"):
        nb.tensor(np.ones(3)).register_hook(lambda g: g)
    with pytest.raises(TypeError, match="callable"):
        x.register_hook(3)
    x.register_hook(lambda g: nb.tensor(np.ones(4)))
    with pytest.raises(RuntimeError, match=re.escape("from (3,) to (4,)")):
        (x * 2).sum().backward()


def test_grad_assignment_must_match_shape_and_dtype():
    x = nb.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(RuntimeError, match=re.escape("shape (5,)")):
        x.grad = nb.tensor(np.ones(5))
    with pytest.raises(RuntimeError, match="dtype nbgrad.float32"):
        x.grad = nb.tensor(np.ones(3, np.float32))
    with pytest.raises(TypeError, match="Tensor or None"):
        x.grad = np.ones(3)
    x.grad = nb.tensor(np.full(3, 2.0))
    (x * 1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0, 3.0])


def test_numpy_of_a_tensor_that_requires_grad_is_read_only():
    x = nb.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = x * x
    for t in (x, y):
        with pytest.raises(ValueError, match="read-only"):
            t.numpy()[0] = 5.0
    (y.sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])
    x.grad.numpy()[0] = 7.0  # a gradient does not require grad: writable, shared
    assert x.grad.numpy()[0] == 7.0
    assert nb.tensor([1.0]).numpy().flags.writeable


def test_detect_anomaly_names_the_forward_op_and_the_users_line():
    with nb.detect_anomaly():
        with pytest.raises(RuntimeError) as info:
            nb.log(nb.tensor([0.0, 1.0]))
    message = str(info.value)
    assert "log produced inf in its output 0" in message
    assert "test_hooks_anomaly.py" in message and "nb.log(nb.tensor([0.0, 1.0]))" in message


def test_detect_anomaly_names_the_backward_op_and_where_it_was_created():
    a = nb.tensor(np.array([0.0, 1.0]), requires_grad=True)
    with nb.detect_anomaly():
        b = nb.sqrt(a)  # finite forward; its backward divides by 2 sqrt(0)
        with pytest.raises(RuntimeError) as info:
            (b * 2).sum().backward()
    message = str(info.value)
    assert "backward of sqrt produced inf in the gradient of its input 0" in message
    assert "b = nb.sqrt(a)" in message


def test_detect_anomaly_lets_non_finite_inputs_propagate_and_is_off_outside():
    with nb.detect_anomaly():
        y = nb.exp(nb.tensor([np.inf, 0.0]))  # the inf came from the caller, not from exp
    assert np.isposinf(y.numpy()[0])
    assert not nb.is_anomaly_enabled()
    assert np.isneginf(nb.log(nb.tensor([0.0])).numpy()[0])

    @nb.set_detect_anomaly(True)
    def step():
        return nb.is_anomaly_enabled()

    assert step() and not nb.is_anomaly_enabled()


# -- post-accumulate-grad hooks ----------------------------------------------------------

def _two_layers(lib, make):
    """Leaves w1 (used twice), b1, w2 and the loss of a two-layer net; w2's only consumer
    runs first in backward, w1's last."""
    rng = np.random.default_rng(3)
    w1, b1, w2 = (make(rng.standard_normal(s)) for s in ((4, 3), (3,), (3, 2)))
    x = lib.tensor(rng.standard_normal((5, 4)))
    h = lib.tanh(x @ w1 + b1) + (w1 * w1).sum()
    return {"w1": w1, "b1": b1, "w2": w2}, ((h @ w2) ** 2).sum()


def _record_post_hooks(lib, make, backwards):
    """For each of ``backwards`` passes, what each post-accumulate hook saw: its leaf's
    .grad, whether backward had returned, the hooks that had fired before it."""
    leaves, loss = _two_layers(lib, make)
    leaves["b1"].grad = make(np.full(3, 0.5)).detach()  # an earlier gradient to add to
    leaves["b1"].register_hook(lambda g: g * 2)  # a gradient hook applies first
    passes, returned = [], []

    def hook(t, name):
        passes[-1][name] = (np.array(t.grad.detach().numpy()), bool(returned),
                            set(passes[-1]))

    for name, leaf in leaves.items():
        leaf.register_post_accumulate_grad_hook(lambda t, name=name: hook(t, name))
    for _ in range(backwards):
        passes.append({})
        returned.clear()
        loss.backward(retain_graph=True)
        returned.append(True)
    return leaves, passes


def test_post_accumulate_hooks_fire_once_per_backward_as_in_pytorch():
    torch = pytest.importorskip("torch")
    nb_leaves, nb_passes = _record_post_hooks(nb, lambda a: nb.tensor(a, requires_grad=True),
                                              2)
    t_leaves, t_passes = _record_post_hooks(
        torch, lambda a: torch.tensor(a, requires_grad=True), 2)
    for mine, theirs in zip(nb_passes, t_passes, strict=True):
        assert mine.keys() == theirs.keys() == {"w1", "b1", "w2"}
        for name, (grad, returned, _) in mine.items():
            assert not returned  # during backward, with .grad already accumulated
            np.testing.assert_allclose(grad, theirs[name][0], rtol=1e-13)
        # w2's consumer runs first and w1's last: w2's hook fires before w1's
        assert "w1" not in mine["w2"][2] and "w1" not in theirs["w2"][2]
    for name in nb_leaves:
        np.testing.assert_allclose(nb_leaves[name].grad.numpy(),
                                   t_leaves[name].grad.numpy(), rtol=1e-13)


def test_post_accumulate_hooks_keep_the_gradients_bits():
    """A hooked backward stores bitwise the gradients of an unhooked one, also when a
    hook changes its .grad in place while the engine still uses the array (add's
    backward hands the same array to both inputs)."""
    def grads(hook_a, hook_b):
        leaves, loss = _two_layers(nb, lambda a: nb.tensor(a, requires_grad=True))
        a, b = nb.tensor(np.ones(3), requires_grad=True), leaves["b1"]
        for leaf, hook in ((a, hook_a), (b, hook_b)):
            if hook:
                leaf.register_post_accumulate_grad_hook(hook)
        (loss + ((a + b * 3) * nb.tensor([1.0, 2.0, 3.0])).sum()).backward()
        return {**leaves, "a": a}

    def zero(t):
        t.grad.data[...] = 0

    plain, hooked = grads(None, None), grads(zero, lambda t: None)
    assert (hooked["a"].grad.numpy() == 0).all()
    for name in ("w1", "b1", "w2"):
        np.testing.assert_array_equal(hooked[name].grad.numpy(), plain[name].grad.numpy())


def test_post_accumulate_hooks_under_create_graph_grad_and_removal():
    x = nb.tensor(np.array([1.0, 2.0]), requires_grad=True)
    calls = []
    handle = x.register_post_accumulate_grad_hook(lambda t: calls.append(t.grad))
    nb.grad((x * x).sum(), x)  # nb.grad accumulates nothing: no call (as in PyTorch)
    assert calls == []
    (x * x * x).sum().backward(create_graph=True)
    assert len(calls) == 1 and calls[0].requires_grad  # .grad = 3x^2, differentiable
    handle.remove()
    handle.remove()  # a second remove does nothing
    (x * x).sum().backward()
    assert len(calls) == 1
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 16.0])  # 3x^2 + 2x


def test_post_accumulate_hook_on_a_root_leaf_and_on_an_unreached_leaf():
    x, unused = (nb.tensor(np.array(2.0), requires_grad=True) for _ in range(2))
    calls = []
    for t in (x, unused):
        t.register_post_accumulate_grad_hook(lambda t: calls.append(t.grad.item()))
    x.backward()
    _ = unused * 2  # in no graph that reaches it: its hook does not fire
    (x * 3).backward()
    assert calls == [1.0, 4.0]


def test_post_accumulate_hook_errors_as_in_pytorch():
    x = nb.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(RuntimeError, match="cannot be registered on non-leaf tensors"):
        (x * 2).register_post_accumulate_grad_hook(lambda t: None)
    with pytest.raises(RuntimeError, match="does not require grad"):
        nb.tensor(np.ones(3)).register_post_accumulate_grad_hook(lambda t: None)
    with pytest.raises(TypeError, match="callable"):
        x.register_post_accumulate_grad_hook(3)
    x.register_post_accumulate_grad_hook(lambda t: t)
    with pytest.raises(RuntimeError, match="returns None"):
        (x * 2).sum().backward()


# -- retain_grad -----------------------------------------------------------------------------
def test_retain_grad_keeps_and_accumulates_a_non_leaf_gradient_as_torch():
    torch = pytest.importorskip("torch")
    results = []
    for lib in (nb, torch):
        x = lib.tensor([1.0, -2.0, 3.0], dtype=lib.float64, requires_grad=True)
        y = x * x
        y.retain_grad()
        y.retain_grad()  # twice: still one hook
        other = x + 1  # not retained: no .grad
        z = (y * other).sum()
        z.backward(retain_graph=True)
        first = y.grad.numpy().copy()
        z.backward()
        results.append((first, y.grad.numpy(), y.retains_grad, other.grad, x.grad.numpy()))
    ours, theirs = results
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(np.asarray(a, dtype=object), np.asarray(b, dtype=object))


def test_retain_grad_on_a_leaf_is_a_no_op_and_refuses_without_grad():
    x = nb.tensor([1.0, 2.0], requires_grad=True)
    x.retain_grad()
    assert not x.retains_grad
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])
    with pytest.raises(RuntimeError, match="retain_grad"):
        nb.tensor([1.0]).retain_grad()


def test_a_retained_tensor_is_collected_with_its_graph():
    x = nb.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    alive = weakref.ref(y)
    del y
    gc.collect()
    assert alive() is None
