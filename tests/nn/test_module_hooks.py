"""Module forward hooks and forward pre-hooks against PyTorch's: call order, arguments,
replaced inputs and outputs, prepend, with_kwargs, always_call, removal."""

import numpy as np
import pytest

import nbgrad as nb

torch = pytest.importorskip("torch")


class Scale:
    """The same module in both libraries: forward(x, factor=2.0) = x * factor."""

    @staticmethod
    def make(lib):
        class Module(lib.nn.Module):
            def forward(self, x, factor=2.0):
                return x * factor
        return Module()


def _run(lib, register):
    log = []
    m = Scale.make(lib)
    handles = register(m, log)
    x = lib.tensor(np.array([1.0, -2.0]))
    out = m(x, factor=3.0)
    for h in handles:
        h.remove()
    after = m(x)
    return log, out.numpy(), after.numpy()


def _numbers(v):
    return v.numpy().tolist() if hasattr(v, "numpy") else v


@pytest.mark.parametrize("case", ["order", "replace", "kwargs", "prepend"])
def test_hooks_behave_as_torch(case):
    def register(m, log):
        def pre(mod, args):
            log.append(("pre", [_numbers(a) for a in args]))
            return (args[0] + 1,) if case == "replace" else None

        def post(mod, args, output):
            log.append(("post", _numbers(output)))
            return output * 10 if case == "replace" else None

        def pre_kw(mod, args, kwargs):
            log.append(("pre_kw", sorted(kwargs)))
            return args, {**kwargs, "factor": 5.0}

        def post_kw(mod, args, kwargs, output):
            log.append(("post_kw", kwargs["factor"], _numbers(output)))

        def first(mod, args, output):
            log.append(("first",))

        if case == "kwargs":
            return [m.register_forward_pre_hook(pre_kw, with_kwargs=True),
                    m.register_forward_hook(post_kw, with_kwargs=True)]
        handles = [m.register_forward_pre_hook(pre), m.register_forward_hook(post)]
        if case == "prepend":
            handles.append(m.register_forward_hook(first, prepend=True))
        return handles

    ours, theirs = _run(nb, register), _run(torch, register)
    assert ours[0] == theirs[0]
    np.testing.assert_array_equal(ours[1], theirs[1])
    np.testing.assert_array_equal(ours[2], theirs[2])


def test_always_call_runs_when_forward_raises_and_bad_hooks():
    for lib in (nb, torch):
        calls = []

        class Broken(lib.nn.Module):
            def forward(self, x):
                raise ValueError("broken")

        m = Broken()
        m.register_forward_hook(lambda mod, args, out, c=calls: c.append(out),
                                always_call=True)
        m.register_forward_hook(lambda mod, args, out, c=calls: c.append("never"))
        with pytest.raises(ValueError, match="broken"):
            m(lib.tensor([1.0]))
        assert calls == [None]
    with pytest.raises(TypeError, match="register_forward_hook"):
        nb.nn.Linear(2, 2).register_forward_hook(3)


def test_a_hook_sees_a_submodule_inside_sequential():
    seen = []
    model = nb.nn.Sequential(nb.nn.Linear(3, 4), nb.nn.ReLU(), nb.nn.Linear(4, 1))
    model[1].register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    model(nb.ones(5, 3))
    assert seen == [(5, 4)]
