"""One seeded default generator (issue 42, item 4): ``nb.manual_seed`` makes every draw
without its own generator reproducible, ``nb.Generator`` objects are accepted wherever
PyTorch takes ``generator=``, and generator states round-trip (through ``nb.save`` too).
PyTorch is the oracle for shapes, dtypes and ranges; its numbers differ by design."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad import nn
from nbgrad.data import DataLoader, RandomSampler, TensorDataset, random_split
from nbgrad.examples import _common, digits

torch = pytest.importorskip("torch")


def _dataset(n=40):
    return TensorDataset(np.arange(n))


def _loader_order(loader):
    return np.concatenate([batch[0].numpy() for batch in loader])


# Every kind of draw, as a function of its generator (None: the default generator).
def _init_draw(generator):
    return nn.init.kaiming_uniform_(nb.zeros(6, 4), a=0.1, generator=generator).numpy()


def _in_place(method, *args):
    def draw(generator):
        return getattr(nb.zeros(3, 5, dtype=np.float64), method)(*args, generator=generator)
    return lambda generator: draw(generator).numpy()


DRAWS = {
    "randn": lambda g: nb.randn(4, 3, generator=g).numpy(),
    "rand": lambda g: nb.rand(7, generator=g, dtype=np.float64).numpy(),
    "randint": lambda g: nb.randint(-5, 1000, (20,), generator=g).numpy(),
    "randperm": lambda g: nb.randperm(30, generator=g).numpy(),
    "randn_like": lambda g: nb.randn_like(nb.zeros(2, 5), generator=g).numpy(),
    "rand_like": lambda g: nb.rand_like(nb.zeros(9), generator=g).numpy(),
    "randint_like": lambda g: nb.randint_like(nb.zeros(12), 3, 900, generator=g).numpy(),
    "normal_": _in_place("normal_", 2.0, 3.0),
    "normal": lambda g: nb.normal(nb.zeros(4), nb.ones(3, 1), generator=g).numpy(),
    "bernoulli": lambda g: nb.bernoulli(nb.full((40,), 0.3), generator=g).numpy(),
    "uniform_": _in_place("uniform_", -1.0, 4.0),
    "dropout": lambda g: nb.dropout(nb.ones(64), 0.5, generator=g).numpy(),
    "nn.init": _init_draw,
    "DataLoader": lambda g: _loader_order(DataLoader(_dataset(), 8, shuffle=True, generator=g)),
    "RandomSampler": lambda g: np.array(list(RandomSampler(_dataset(), generator=g))),
    "random_split": lambda g: random_split(_dataset(), [30, 10], generator=g)[0].indices,
}


# -- the issue: a script seeded with manual_seed alone repeats itself ------------------------------
def _training_script(seed):
    """A whole small run that seeds nothing but ``nb.manual_seed``: data from randn/rand,
    an unseeded random_split and shuffling loader, layers' initialisation and dropout."""
    nb.manual_seed(seed)
    x = nb.randn(96, 5)
    y = (x.numpy()[:, 0] + nb.rand(96).numpy() > 0.5).astype(np.int64)
    train, test = random_split(TensorDataset(x, nb.tensor(y)), [0.75, 0.25])
    model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2))
    opt = nb.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    for _ in range(3):
        for xb, yb in DataLoader(train, batch_size=16, shuffle=True):
            loss = nb.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    xt, yt = next(iter(DataLoader(test, batch_size=len(test))))
    with nb.no_grad():
        accuracy = float((model(xt).numpy().argmax(1) == yt.numpy()).mean())
    return accuracy, [p.numpy().copy() for p in model.parameters()]


def test_the_same_script_seeded_with_manual_seed_gives_identical_results_twice():
    accuracy, params = _training_script(7)
    again, params_again = _training_script(7)
    assert accuracy == again
    for p, q in zip(params, params_again):
        assert p.tobytes() == q.tobytes()
    _, other = _training_script(8)
    assert not all(np.array_equal(p, q) for p, q in zip(params, other))


def test_the_script_repeats_in_a_new_process():
    """Two processes seeded alike draw alike (unseeded draws once came from the OS)."""
    import subprocess
    import sys
    code = ("import nbgrad as nb; from nbgrad.data import DataLoader, TensorDataset;"
            "import numpy as np; nb.manual_seed(3);"
            "l = DataLoader(TensorDataset(np.arange(20)), 20, shuffle=True);"
            "print(nb.randn(3).numpy().tolist(), nb.rand(2).numpy().tolist(),"
            " next(iter(l))[0].numpy().tolist())")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout for _ in range(2)]
    assert runs[0] == runs[1] and runs[0].strip()


# -- the default generator ----------------------------------------------------------------------
@pytest.mark.parametrize("name", DRAWS)
def test_manual_seed_repeats_every_draw_and_seeds_differ(name):
    draw = DRAWS[name]
    nb.manual_seed(123)
    first, second = draw(None), draw(None)
    nb.manual_seed(123)
    np.testing.assert_array_equal(draw(None), first)
    np.testing.assert_array_equal(draw(None), second)
    assert not np.array_equal(first, second), "a draw must advance the default generator"
    nb.manual_seed(124)
    assert not np.array_equal(draw(None), first)


@pytest.mark.parametrize("name", DRAWS)
def test_a_generator_passed_in_is_advanced_and_the_default_is_not_touched(name):
    draw = DRAWS[name]
    nb.manual_seed(5)
    before = nb.get_rng_state()
    g = nb.Generator().manual_seed(42)
    first, second = draw(g), draw(g)
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(nb.get_rng_state(), before)
    np.testing.assert_array_equal(draw(nb.Generator().manual_seed(42)), first)
    np.testing.assert_array_equal(draw(np.random.default_rng(42)), first)  # the numpy form
    assert not np.array_equal(draw(nb.Generator().manual_seed(43)), first)


def test_layers_are_initialised_from_the_default_generator():
    def build():
        return [p.numpy().copy() for p in nn.Linear(4, 3).parameters()]
    nb.manual_seed(9)
    first = build()
    nb.manual_seed(9)
    assert all(np.array_equal(p, q) for p, q in zip(first, build()))
    nb.manual_seed(10)
    assert not np.array_equal(first[0], build()[0])


def test_a_loaders_epoch_order_is_fixed_when_its_iterator_is_made():
    loader = DataLoader(_dataset(), 8, shuffle=True)
    nb.manual_seed(1)
    expected = _loader_order(loader)
    nb.manual_seed(1)
    batches = iter(loader)
    nb.manual_seed(2)  # after iter(): does not change this epoch's order
    np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in batches]), expected)
    nb.manual_seed(1)
    assert np.array_equal(_loader_order(loader), expected)  # the seed at iter() counts
    nb.manual_seed(1)
    np.testing.assert_array_equal(np.array(list(RandomSampler(_dataset()))), expected)


def test_seed_arguments_keep_their_numbers_and_leave_the_default_alone():
    nb.manual_seed(0)
    before = nb.get_rng_state()
    a = nb.randn(5, seed=11).numpy()
    np.testing.assert_array_equal(a, nb.randn(5, generator=nb.Generator().manual_seed(11)).numpy())
    np.testing.assert_array_equal(
        a, np.random.default_rng(11).standard_normal(5).astype(np.float32))
    np.testing.assert_array_equal(nb.rand(4, seed=2, dtype=np.float64).numpy(),
                                  np.random.default_rng(2).random(4))
    split = random_split(_dataset(10), [5, 5], seed=4)[0].indices
    np.testing.assert_array_equal(split, np.random.default_rng(4).permutation(10)[:5])
    np.testing.assert_array_equal(_loader_order(DataLoader(_dataset(10), 10, shuffle=True, seed=3)),
                                  np.random.default_rng(3).permutation(10))
    np.testing.assert_array_equal(nb.get_rng_state(), before)


def test_manual_seed_returns_the_default_generator_and_initial_seed():
    g = nb.manual_seed(77)
    assert g is nb.default_generator and nb.initial_seed() == 77
    s = nb.seed()
    assert 0 <= s < 2 ** 64 and nb.initial_seed() == s
    a = nb.randn(3).numpy()
    nb.manual_seed(s)
    np.testing.assert_array_equal(nb.randn(3).numpy(), a)


# -- Generator objects and states ---------------------------------------------------------------
def test_generator_methods():
    g = nb.Generator()
    assert g.initial_seed() == 0 and g.device == "cpu"
    np.testing.assert_array_equal(nb.randn(4, generator=g).numpy(),
                                  nb.randn(4, generator=nb.Generator().manual_seed(0)).numpy())
    assert g.manual_seed(2 ** 64 - 1) is g and g.initial_seed() == 2 ** 64 - 1
    seeds = {g.seed() for _ in range(3)}
    assert len(seeds) == 3 and g.initial_seed() in seeds
    state = g.get_state()
    assert state.dtype == np.uint8 and state.ndim == 1
    a = nb.randn(6, generator=g).numpy()
    assert g.set_state(state) is g
    np.testing.assert_array_equal(nb.randn(6, generator=g).numpy(), a)
    assert g.initial_seed() in seeds
    assert "Generator" in repr(g)


def test_a_state_keeps_the_cached_half_of_a_64_bit_draw():
    """float32 uniforms use 32 bits of a 64-bit draw and keep the other half for the next."""
    g = nb.Generator().manual_seed(8)
    nb.rand(1, generator=g)  # leaves a cached half
    state = g.get_state()
    a = nb.rand(5, generator=g).numpy()
    g.manual_seed(0)
    g.set_state(state)
    np.testing.assert_array_equal(nb.rand(5, generator=g).numpy(), a)


def test_get_and_set_rng_state_round_trip():
    nb.manual_seed(31)
    nb.randn(3)
    state = nb.get_rng_state()
    a = [draw(None) for draw in DRAWS.values()]
    nb.manual_seed(0)
    assert nb.set_rng_state(state) is None
    assert nb.initial_seed() == 31
    for expected, draw in zip(a, DRAWS.values()):
        np.testing.assert_array_equal(draw(None), expected)
    # a uint8 tensor of the state works as well as the array
    nb.set_rng_state(nb.tensor(state, dtype=np.uint8))
    np.testing.assert_array_equal(DRAWS["randn"](None), a[0])


def test_states_go_through_nb_save_and_nb_load(tmp_path):
    nb.manual_seed(4)
    g = nb.Generator().manual_seed(6)
    nb.randn(2, generator=g)
    nb.save({"rng": nb.get_rng_state(), "g": g.get_state()}, tmp_path / "state.npz")
    expected = nb.randn(5).numpy(), nb.randn(5, generator=g).numpy()
    nb.manual_seed(0)
    loaded = nb.load(tmp_path / "state.npz")
    nb.set_rng_state(loaded["rng"])
    h = nb.Generator().set_state(loaded["g"])
    np.testing.assert_array_equal(nb.randn(5).numpy(), expected[0])
    np.testing.assert_array_equal(nb.randn(5, generator=h).numpy(), expected[1])
    assert h.initial_seed() == 6


def _mlp_epoch(model, opt, loader):
    model.train()
    for xb, yb in loader:
        loss = nb.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()


def _mlp_run(seed):
    nb.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))
    return model, nb.optim.Adam(model.parameters(), lr=0.01)


def test_a_checkpoint_resumes_with_the_same_random_numbers(tmp_path):
    """Dropout masks and an unseeded loader's order after a resume are the uninterrupted
    run's: the examples' checkpoints carry the default generator's state."""
    data = np.random.default_rng(0)
    ds = TensorDataset(data.standard_normal((48, 4)).astype(np.float32),
                       data.integers(0, 3, 48))
    model, opt = _mlp_run(0)
    _mlp_epoch(model, opt, DataLoader(ds, 8, shuffle=True))
    _common.save_checkpoint({"model": model.state_dict(), "optimizer": opt.state_dict()},
                            tmp_path / "ckpt.npz")
    _mlp_epoch(model, opt, DataLoader(ds, 8, shuffle=True))

    resumed, resumed_opt = _mlp_run(1)  # other weights, another generator state
    state = _common.read_checkpoint(tmp_path / "ckpt.npz")
    resumed.load_state_dict(state["model"])
    resumed_opt.load_state_dict(state["optimizer"])
    _mlp_epoch(resumed, resumed_opt, DataLoader(ds, 8, shuffle=True))
    for (name, p), (_, q) in zip(model.named_parameters(), resumed.named_parameters()):
        assert p.numpy().tobytes() == q.numpy().tobytes(), name


def test_the_digits_checkpoint_saves_and_restores_the_generator(tmp_path):
    nb.manual_seed(0)
    model = digits.build_model()
    opt = digits.make_optimizer(model, "sgd", None)
    _common.save_checkpoint({"model": model.state_dict(), "optimizer": opt.state_dict(),
                             "epoch": 3}, tmp_path / "digits.npz")
    expected = nb.randn(4).numpy()
    nb.manual_seed(1)
    fresh = digits.build_model()
    assert digits.load_checkpoint(tmp_path / "digits.npz", fresh,
                                  digits.make_optimizer(fresh, "sgd", None)) == 3
    np.testing.assert_array_equal(nb.randn(4).numpy(), expected)


# -- shapes, dtypes and ranges against PyTorch -----------------------------------------------------
_shapes = st.lists(st.integers(0, 5), max_size=4).map(tuple)
_floats = st.sampled_from([np.float32, np.float64])
_TORCH = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
          np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64}


def _same_kind_as_torch(ours, theirs):
    assert ours.shape == tuple(theirs.shape)
    assert _TORCH[np.dtype(ours.numpy().dtype)] == theirs.dtype


@given(shape=_shapes, dtype=_floats, seed=st.integers(0, 2 ** 64 - 1))
def test_float_draws_match_torch_in_shape_and_dtype_and_repeat(shape, dtype, seed):
    for ours, theirs in ((nb.randn, torch.randn), (nb.rand, torch.rand)):
        x = ours(*shape, generator=nb.Generator().manual_seed(seed), dtype=dtype)
        _same_kind_as_torch(x, theirs(shape, dtype=_TORCH[np.dtype(dtype)]))
        y = ours(shape, generator=nb.Generator().manual_seed(seed), dtype=dtype)
        assert x.numpy().tobytes() == y.numpy().tobytes()
    u = nb.rand(shape, generator=nb.Generator().manual_seed(seed), dtype=dtype).numpy()
    assert np.all((u >= 0) & (u < 1))
    like = nb.randn_like(nb.zeros(*shape, dtype=dtype), generator=nb.Generator())
    _same_kind_as_torch(like, torch.randn_like(torch.zeros(shape, dtype=_TORCH[np.dtype(dtype)])))


@given(shape=_shapes, low=st.integers(-2 ** 40, 2 ** 40), span=st.integers(1, 2 ** 20),
       dtype=st.sampled_from([np.int32, np.int64, np.float64]), seed=st.integers(0, 2 ** 32))
def test_randint_matches_torch_in_shape_dtype_and_range(shape, low, span, dtype, seed):
    if np.dtype(dtype) == np.int32:
        low = low % 2 ** 20
    x = nb.randint(low, low + span, shape, generator=nb.Generator().manual_seed(seed),
                   dtype=dtype)
    _same_kind_as_torch(x, torch.randint(low, low + span, shape, dtype=_TORCH[np.dtype(dtype)]))
    values = x.numpy()
    assert np.all((values >= low) & (values < low + span))
    same = nb.randint(low, low + span, shape, generator=nb.Generator().manual_seed(seed))
    np.testing.assert_array_equal(values, same.numpy().astype(dtype))  # dtype-independent


def test_randint_excludes_high_and_randperm_is_a_permutation_as_in_torch():
    ours = nb.randint(5, (4000,), generator=nb.Generator().manual_seed(1)).numpy()
    theirs = torch.randint(5, (4000,)).numpy()
    assert set(ours.tolist()) == set(theirs.tolist()) == {0, 1, 2, 3, 4}
    ours = nb.randint(-2, 0, (1000,)).numpy()
    assert set(ours.tolist()) == set(torch.randint(-2, 0, (1000,)).tolist()) == {-2, -1}
    assert nb.randint(high=3, size=(2, 2)).shape == (2, 2)
    for n in (0, 1, 17):
        perm, reference = nb.randperm(n), torch.randperm(n)
        _same_kind_as_torch(perm, reference)
        np.testing.assert_array_equal(np.sort(perm.numpy()), np.arange(n))
    assert nb.randperm(5, dtype=np.float32).dtype == np.float32
    x = nb.randint_like(nb.zeros(3, 2, dtype=np.int32), 7)
    _same_kind_as_torch(x, torch.randint_like(torch.zeros(3, 2, dtype=torch.int32), 7))
    assert x.numpy().max() < 7


def test_in_place_draws_keep_identity_shape_and_dtype_and_bump_the_version():
    t = nb.zeros(4, 3, dtype=np.float64)
    version = t._version
    assert t.normal_(1.0, 0.5) is t and t.dtype == np.float64 and t.shape == (4, 3)
    assert t.uniform_(2, 3) is t and np.all((t.numpy() >= 2) & (t.numpy() < 3))
    assert t._version == version + 2
    w = nb.zeros(5, requires_grad=True)
    with nb.no_grad():
        w.normal_()
    assert np.count_nonzero(w.numpy()) == 5 and w.requires_grad


# -- distributions (fixed seeds, bounds of five standard errors) -----------------------------------
N = 200_000


def _assert_moments(x, mean, var, kurtosis):
    """Mean and variance within five standard errors (the variance's: sqrt((kurtosis - 1)
    var^2 / N))."""
    x = np.asarray(x, np.float64)
    assert abs(x.mean() - mean) < 5 * np.sqrt(var / N)
    assert abs(x.var() - var) < 5 * np.sqrt((kurtosis - 1) * var ** 2 / N)


def test_normal_draws_have_their_moments():
    g = nb.Generator().manual_seed(2024)
    _assert_moments(nb.randn(N, generator=g).numpy(), 0.0, 1.0, 3.0)
    _assert_moments(nb.zeros(N, dtype=np.float64).normal_(3.0, 2.0, generator=g).numpy(),
                    3.0, 4.0, 3.0)


def test_uniform_draws_have_their_moments_and_range():
    g = nb.Generator().manual_seed(2025)
    u = nb.rand(N, generator=g).numpy()
    assert u.min() >= 0 and u.max() < 1
    _assert_moments(u, 0.5, 1 / 12, 1.8)
    v = nb.zeros(N, dtype=np.float64).uniform_(-2.0, 5.0, generator=g).numpy()
    assert v.min() >= -2 and v.max() < 5
    _assert_moments(v, 1.5, 49 / 12, 1.8)


def test_randint_and_randperm_are_uniform():
    g = nb.Generator().manual_seed(2026)
    counts = np.bincount(nb.randint(10, (N,), generator=g).numpy(), minlength=10)
    assert np.all(np.abs(counts - N / 10) < 5 * np.sqrt(N * 0.1 * 0.9))
    firsts = np.bincount([nb.randperm(4, generator=g).numpy()[0] for _ in range(4000)],
                         minlength=4)
    assert np.all(np.abs(firsts - 1000) < 5 * np.sqrt(4000 * 0.25 * 0.75))


def test_random_sampler_with_replacement_and_more_samples_than_items():
    g = nb.Generator().manual_seed(3)
    drawn = list(RandomSampler(_dataset(5), replacement=True, num_samples=N // 10, generator=g))
    counts = np.bincount(drawn, minlength=5)
    assert len(drawn) == N // 10
    assert np.all(np.abs(counts - N / 50) < 5 * np.sqrt(N / 10 * 0.2 * 0.8))
    order = list(RandomSampler(_dataset(5), num_samples=12, generator=g))
    assert sorted(order[:5]) == sorted(order[5:10]) == list(range(5)) and len(order) == 12
    reference = list(torch.utils.data.RandomSampler(range(5), num_samples=12))
    assert len(reference) == len(order)


# -- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize("call, error, message", [
    (lambda: nb.manual_seed(-1), ValueError, r"manual_seed: seed must be in \[0, 2\*\*64\)"),
    (lambda: nb.manual_seed(2 ** 64), ValueError, r"manual_seed: seed must be in"),
    (lambda: nb.manual_seed(1.5), TypeError, "manual_seed: seed must be an int, got float"),
    (lambda: nb.manual_seed(True), TypeError, "manual_seed: seed must be an int, got bool"),
    (lambda: nb.Generator().manual_seed(-3), ValueError, "Generator.manual_seed: seed must"),
    (lambda: nb.Generator("cuda"), ValueError, "Generator: nbgrad runs on the CPU"),
    (lambda: nb.randn(2, generator="g"), TypeError, "randn: generator must be an nb.Generator"),
    (lambda: nb.rand(2, generator=1.0), TypeError, "rand: generator must be"),
    (lambda: nb.randn(2, seed=-1), ValueError, "randn: seed must be in"),
    (lambda: nb.randn(2, seed=1, generator=nb.Generator()), ValueError,
     "randn: pass seed or generator, not both"),
    (lambda: nb.randn(2, dtype=np.int64), TypeError, "randn: dtype must be float32 or float64"),
    (lambda: nb.randint(5, 5, (2,)), ValueError, r"randint: expects low < high \(high is "
     r"excluded\), got low=5, high=5"),
    (lambda: nb.randint(0, 10), TypeError, "randint: missing the argument size"),
    (lambda: nb.randint(0, 2.5, (3,)), TypeError, "randint: high must be an int, got float"),
    (lambda: nb.randint(0, 10, 3), TypeError, "randint: size must be a tuple"),
    (lambda: nb.randint(0, 2 ** 31 + 1, (3,), dtype=np.int32), ValueError,
     "randint: the values 0 .. 2147483648 do not fit int32"),
    (lambda: nb.randint(0, 3, (3,), generator=[]), TypeError, "randint: generator must be"),
    (lambda: nb.randint(0, 3, (3,), requires_grad=True), TypeError,
     "randint: only float32/float64 tensors can require gradients"),
    (lambda: nb.randperm(-1), ValueError, "randperm: n must be >= 0, got -1"),
    (lambda: nb.randperm(3, dtype=np.bool_), TypeError, "randperm: dtype must be one of"),
    (lambda: nb.randn_like(nb.zeros(2, dtype=np.int64)), TypeError,
     "randn_like: dtype must be one of float32, float64, got int64"),
    (lambda: nb.rand_like([1.0]), TypeError, "rand_like: input must be a Tensor, got list"),
    (lambda: nb.randint_like(nb.zeros(2)), TypeError, "randint_like: missing the argument high"),
    (lambda: nb.zeros(2).normal_(0, -1), ValueError, "normal_: std must be >= 0, got -1.0"),
    (lambda: nb.zeros(2).normal_(generator="x"), TypeError, "normal_: generator must be"),
    (lambda: nb.zeros(2).uniform_(2, 1), ValueError, "uniform_: expects from_ <= to"),
    (lambda: nb.zeros(2, dtype=np.int64).uniform_(), TypeError,
     "uniform_: needs a float32 or float64 tensor, got int64"),
    (lambda: nb.zeros(2, requires_grad=True).normal_(), RuntimeError,
     "normal_: a leaf Variable that requires grad is being used in an in-place"),
    (lambda: nb.dropout(nb.ones(3), generator="x"), TypeError, "dropout: generator must be"),
    (lambda: nn.init.normal_(nb.zeros(3), generator=2.0), TypeError, "init: generator must be"),
    (lambda: DataLoader(_dataset(), shuffle=True, generator=7), TypeError,
     "DataLoader: generator must be a numpy.random.Generator or an nb.Generator, got int"),
    (lambda: RandomSampler(_dataset(), generator="x"), TypeError,
     "RandomSampler: generator must be"),
    (lambda: RandomSampler(_dataset(), num_samples=0), ValueError,
     "RandomSampler: num_samples must be a positive int"),
    (lambda: random_split(_dataset(4), [2, 2], generator=1), TypeError,
     "random_split: generator must be"),
    (lambda: random_split(_dataset(4), [2, 2], nb.Generator()), TypeError,
     "random_split: seed must be an int or None, got Generator; pass an nb.Generator as "
     "generator="),
])
def test_bad_arguments_name_the_function_and_the_argument(call, error, message):
    before = nb.get_rng_state()
    with pytest.raises(error, match=message):
        call()
    np.testing.assert_array_equal(nb.get_rng_state(), before)  # nothing was drawn


def test_a_loader_without_seed_cannot_set_its_epoch():
    g = nb.Generator()
    with pytest.raises(RuntimeError, match="set_epoch: this loader draws its orders from "
                                           "generator=; save and restore its state"):
        DataLoader(_dataset(), 4, shuffle=True, generator=g).set_epoch(1)
    DataLoader(_dataset(), 4).set_epoch(1)  # an unshuffled loader's order has no epoch


def _state_with(index, value):
    state = nb.get_rng_state().copy()
    state[index] = value
    return state


@pytest.mark.parametrize("state, error, message", [
    ([1, 2, 3], TypeError, "new_state must be a uint8 array or tensor made by get_state\\(\\), "
                           "got list"),
    (np.zeros(50, np.int64), TypeError, "got dtype int64"),
    (np.zeros(49, np.uint8), ValueError, r"new_state must have shape \(50,\)"),
    (np.zeros((5, 10), np.uint8), ValueError, r"got shape \(5, 10\)"),
    (np.zeros(50, np.uint8), ValueError, "not a generator state made by get_state"),
    (_state_with(4, 9), ValueError, "its header is wrong"),
    (_state_with(29, 0), ValueError, "new_state is corrupt"),  # an even PCG increment
])
def test_bad_states_are_refused_and_change_nothing(state, error, message):
    nb.manual_seed(12)
    before = nb.get_rng_state()
    with pytest.raises(error, match="set_rng_state: .*" + message):
        nb.set_rng_state(state)
    np.testing.assert_array_equal(nb.get_rng_state(), before)
    g = nb.Generator().manual_seed(3)
    with pytest.raises(error, match="Generator.set_state: .*" + message):
        g.set_state(state)
    assert g.initial_seed() == 3


@pytest.mark.parametrize("draw", [lambda d: nb.randint(0, 3, (2,), device=d),
                                  lambda d: nb.randperm(3, device=d),
                                  lambda d: nb.randn_like(nb.zeros(2), device=d),
                                  lambda d: nb.rand_like(nb.zeros(2), device=d),
                                  lambda d: nb.randint_like(nb.zeros(2), 3, device=d)])
def test_draws_take_the_cpu_device_and_refuse_others(draw):
    assert draw("cpu").device == nb.device("cpu")
    with pytest.raises(RuntimeError, match="nbgrad runs on the CPU; got 'cuda'"):
        draw("cuda")


def test_a_draw_in_place_on_a_tensor_in_the_graph_is_recorded_as_in_torch():
    """The filled values are constants: the old value gets no gradient."""
    torch = pytest.importorskip("torch")
    grads = []
    for lib in (nb, torch):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x * 2.0
        y.normal_()
        (y + x * x).sum().backward()
        grads.append(np.asarray(x.grad))
    np.testing.assert_array_equal(grads[0], grads[1])


def test_normal_and_bernoulli_take_torch_forms_shapes_dtypes_and_moments():
    cases = [(2.0, 3.0, (500, 40)), (np.zeros((3, 1), np.float64), 2.0),
             (1.0, np.full((2, 5), 0.5, np.float32)),
             (np.zeros(4, np.float32), np.ones((3, 1), np.float32))]
    for args in cases:
        ours = nb.normal(*[nb.tensor(a) if isinstance(a, np.ndarray) else a for a in args])
        theirs = torch.normal(*[torch.tensor(a) if isinstance(a, np.ndarray) else a
                                for a in args])
        _same_kind_as_torch(ours, theirs)
    big = nb.normal(2.0, 3.0, (500, 40), generator=nb.Generator().manual_seed(5)).numpy()
    assert abs(big.mean() - 2.0) < 0.2 and abs(big.std() - 3.0) < 0.2
    coin = nb.bernoulli(nb.full((20000,), 0.25, dtype=np.float64))
    _same_kind_as_torch(coin, torch.bernoulli(torch.full((20000,), 0.25, dtype=torch.float64)))
    assert set(np.unique(coin.numpy())) == {0.0, 1.0} and abs(coin.numpy().mean() - 0.25) < 0.02
    assert nb.bernoulli(nb.zeros(5), p=1.0).numpy().tolist() == [1.0] * 5
    for call, error, words in [(lambda: nb.normal(0.0, 1.0), TypeError, "normal: give mean"),
                               (lambda: nb.normal(nb.zeros(2), -1.0), ValueError, "std must"),
                               (lambda: nb.normal(nb.zeros(2), nb.ones(3)), ValueError,
                                r"mean of shape \(2,\) and std of shape \(3,\)"),
                               (lambda: nb.bernoulli(nb.full((2,), 1.5)), ValueError,
                                "bernoulli: every probability"),
                               (lambda: nb.bernoulli(nb.zeros(2, dtype=np.int64)), TypeError,
                                "bernoulli: input must be float")]:
        with pytest.raises(error, match=words):
            call()
