"""Version counters: in-place writes bump a storage's version, views share it, and a
backward through a node whose saved input or output was overwritten since raises
PyTorch's error instead of computing gradients from the new values."""

import threading

import numpy as np
import pytest

import nbgrad as nb

MODIFIED = "modified by an inplace operation"


def _raises_like_torch(build):
    """``build(lib)`` returns the loss after its in-place change; both libraries refuse
    its backward."""
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        build(torch).backward()
    with pytest.raises(RuntimeError, match=MODIFIED):
        build(nb).backward()


def _leaf(lib, values=(0.5, -1.0, 2.0)):
    return lib.tensor(values, dtype=lib.float64, requires_grad=True)


def test_a_saved_input_changed_in_place_is_refused():
    def build(lib):
        x = _leaf(lib)
        h = x * 1.0
        y = h * h  # saves h
        h.add_(1.0)
        return y.sum()
    _raises_like_torch(build)


def test_a_saved_output_changed_in_place_is_refused():
    def build(lib):
        y = _leaf(lib).exp()  # exp saves its output
        y.mul_(2.0)
        return y.sum()
    _raises_like_torch(build)


def test_a_change_through_a_view_is_seen_by_the_base():
    def build(lib):
        x = _leaf(lib)
        h = x.tanh()  # saves its output
        with lib.no_grad():
            h[1:].zero_()  # a view of h: one storage, one counter
        return h.sum()
    _raises_like_torch(build)


def test_an_optimiser_step_between_two_backwards_is_refused():
    """The issue's case: without a version counter the second backward computed the
    gradient from the updated weights ([-2, -4] instead of [2, 4])."""
    torch = pytest.importorskip("torch")
    for lib in (nb, torch):
        w = lib.nn.Parameter(lib.tensor([1.0, 2.0]))
        opt = lib.optim.SGD([w], lr=1.0)
        loss = (w * w).sum()
        loss.backward(retain_graph=True)
        np.testing.assert_array_equal(np.asarray(w.grad), [2.0, 4.0])
        opt.step()
        opt.zero_grad()
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()


def test_the_message_names_the_op_and_both_versions():
    x = _leaf(nb)
    y = x.sigmoid()
    y.add_(1.0)
    y.add_(1.0)
    with pytest.raises(RuntimeError) as info:
        y.sum().backward()
    message = str(info.value)
    assert "sigmoidBackward" in message and "output" in message
    assert "is at version 2; expected version 0 instead" in message
    assert "float64 [3]]" in message


def test_versions_count_writes_and_views_share_them():
    x = nb.zeros(2, 3)
    assert x._version == 0
    x.add_(1.0)
    x[0] = 2.0
    assert x._version == 2
    row = x[1]
    flat = x.reshape(6)
    row.mul_(3.0)
    assert x._version == row._version == flat._version == 3
    copy = x[np.array([0, 1])]  # advanced indexing copies: its own counter
    copy.fill_(0.0)
    assert x._version == 3 and copy._version == 1
    assert x.clone()._version == 0


def test_changes_that_backward_does_not_need_are_allowed():
    """add saves nothing of its inputs, so changing one after the forward is fine (as in
    PyTorch), and so is a change after the backward."""
    x = _leaf(nb)
    h = x * 1.0
    y = (h + 1.0).sum()
    h.mul_(5.0)
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), 1.0)
    z = (x * x).sum()
    z.backward()
    with nb.no_grad():
        x.add_(1.0)  # after the backward: nothing is refused


def test_threads_running_backward_into_shared_leaves_give_the_serial_sums():
    w = nb.tensor(np.zeros(64, np.float32), requires_grad=True)
    b = nb.tensor(np.zeros(64, np.float32), requires_grad=True)

    def work():
        for _ in range(200):
            (w * 1.0 + b * 2.0).sum().backward()

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(w.grad.numpy(), 600.0)
    np.testing.assert_array_equal(b.grad.numpy(), 1200.0)


def test_a_tensor_a_hook_returns_is_copied_before_it_becomes_grad():
    kept = nb.tensor(np.full(3, 5.0))
    w = nb.tensor(np.ones(3), requires_grad=True)
    w.register_hook(lambda g: kept)
    (w * 2.0).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), 5.0)
    opt = nb.optim.SGD([w], lr=0.1)
    opt.zero_grad(set_to_none=False)
    nb.nn.utils.clip_grad_norm_([w], 1.0)
    np.testing.assert_array_equal(kept.numpy(), 5.0)  # the caller's tensor is untouched


# -- every registered op: what its backward reads is what its node checks ------------------------
def _gradients(call, inputs, change=None):
    """d<call(inputs), w>/d(float inputs), after ``change(inputs, outputs)`` if given."""
    out = call(*inputs)
    outs = [o for o in (out if isinstance(out, tuple) else (out,))
            if o.requires_grad]
    if change is not None:
        with nb.no_grad():
            change(outs)
    weights = [nb.tensor(np.random.default_rng(7).standard_normal(o.shape)) for o in outs]
    wrt = [x for x in inputs if isinstance(x, nb.Tensor) and x.requires_grad]
    return [None if g is None else g.numpy()
            for g in nb.grad(outs, wrt, grad_outputs=weights)]


@pytest.mark.parametrize("name", sorted(nb.REGISTRY))
def test_a_registered_op_reads_in_backward_only_what_its_node_checks(name):
    """Changing an input the node did not save leaves the gradients as they were (the
    backward does not read it), and changing what it saved is refused: no op keeps an
    alias of an input or output that the version check cannot see."""
    from nbgrad.testing import sample_call, saved_by

    call, inputs = sample_call(name)
    saved = saved_by(name)
    expected = _gradients(call, inputs)
    for i, x in enumerate(inputs):
        if not (isinstance(x, nb.Tensor) and x.requires_grad):
            continue
        original = x.numpy().copy()
        if f"input {i}" in saved:
            with pytest.raises(RuntimeError, match=MODIFIED):
                _gradients(call, inputs, lambda outs, x=x: x.add_(0.5))
            with nb.no_grad():
                x.copy_(original)
            continue
        changed = _gradients(call, inputs, lambda outs, x=x: x.add_(0.5))
        with nb.no_grad():
            x.copy_(original)
        for got, want in zip(changed, expected):
            np.testing.assert_array_equal(got, want, err_msg=f"{name}: input {i} changed")
    for k in [int(w.split()[1]) for w in saved if w.startswith("output")]:
        with pytest.raises(RuntimeError, match=MODIFIED):
            _gradients(call, inputs, lambda outs, k=k: outs[k].add_(0.5))
