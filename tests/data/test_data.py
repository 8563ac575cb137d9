"""nbgrad.data: batches and orders against plain NumPy, reproducible epochs, the fast
TensorDataset path against collating items, default_collate's rules, random_split and
Subset, and len(loader) against torch.utils.data (oracle)."""

import collections
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.data import (
    DataLoader,
    Dataset,
    Subset,
    TensorDataset,
    default_collate,
    random_split,
)


def _epoch_order(seed, epoch, n):
    """The documented order of a shuffling loader: default_rng(seed) jumped epoch times."""
    return np.random.Generator(np.random.PCG64(seed).jumped(epoch)).permutation(n)


def _reference_batches(order, batch_size, drop_last):
    stop = len(order) - len(order) % batch_size if drop_last else len(order)
    return [order[i:min(i + batch_size, stop)] for i in range(0, stop, batch_size)]


def _dataset(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 3)), rng.integers(0, 10, n)


def _assert_batches(loader, x, y, index_batches):
    batches = list(loader)
    assert len(batches) == len(index_batches) == len(loader)
    for (bx, by), idx in zip(batches, index_batches):
        assert isinstance(bx, nb.Tensor) and isinstance(by, nb.Tensor)
        np.testing.assert_array_equal(bx._data, x[idx])
        np.testing.assert_array_equal(by._data, y[idx])
        assert bx.dtype == np.float64 and by.dtype == np.int64


# -- order and contents --------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size, drop_last", [(1, False), (3, False), (4, False),
                                                   (10, False), (11, False), (1, True),
                                                   (3, True), (4, True), (10, True)])
def test_sequential_batches_are_numpy_slices(batch_size, drop_last):
    x, y = _dataset(10)
    loader = DataLoader(TensorDataset(x, y), batch_size, drop_last=drop_last)
    _assert_batches(loader, x, y, _reference_batches(np.arange(10), batch_size, drop_last))


@pytest.mark.parametrize("drop_last", [False, True])
def test_shuffled_batches_follow_the_seeded_permutation_of_each_epoch(drop_last):
    x, y = _dataset(23)
    loader = DataLoader(TensorDataset(x, y), 5, shuffle=True, drop_last=drop_last, seed=7)
    for epoch in range(3):
        order = _epoch_order(7, epoch, 23)
        _assert_batches(loader, x, y, _reference_batches(order, 5, drop_last))
    # Epoch 0 is default_rng(seed)'s first permutation.
    np.testing.assert_array_equal(_epoch_order(7, 0, 23),
                                  np.random.default_rng(7).permutation(23))


def _flat_order(loader):
    """One epoch's item ids: the last tensor of each batch, joined."""
    return np.concatenate([batch[-1]._data for batch in loader])


def test_iterations_are_successive_epochs_and_set_epoch_resumes_them():
    ds = TensorDataset(np.zeros((50, 1)), np.arange(50))
    loader = DataLoader(ds, 8, shuffle=True, seed=3)
    epochs = [_flat_order(loader) for _ in range(4)]
    assert not any(np.array_equal(epochs[i], epochs[i + 1]) for i in range(3))
    again = DataLoader(ds, 8, shuffle=True, seed=3)
    assert all(np.array_equal(e, _flat_order(again)) for e in epochs)
    resumed = DataLoader(ds, 8, shuffle=True, seed=3)
    resumed.set_epoch(2)
    np.testing.assert_array_equal(_flat_order(resumed), epochs[2])
    np.testing.assert_array_equal(_flat_order(resumed), epochs[3])  # then epoch 3
    resumed.set_epoch(2)
    np.testing.assert_array_equal(_flat_order(resumed), epochs[2])


def test_epoch_orders_are_the_same_in_another_process():
    code = ("import numpy as np; from nbgrad.data import DataLoader, TensorDataset\n"
            "l = DataLoader(TensorDataset(np.arange(30)), 30, shuffle=True, seed=11)\n"
            "l.set_epoch(5); print(next(iter(l))[0].data.tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONHASHSEED": "123"}).stdout
    loader = DataLoader(TensorDataset(np.arange(30)), 30, shuffle=True, seed=11)
    loader.set_epoch(5)
    assert eval(out) == next(iter(loader))[0].data.tolist()


def test_without_a_seed_the_orders_come_from_the_default_generator():
    ds = TensorDataset(np.arange(40))
    nb.manual_seed(21)
    loader = DataLoader(ds, 40, shuffle=True)
    assert loader.seed is None
    first = [_flat_order(loader) for _ in range(2)]
    assert not np.array_equal(*first)
    nb.manual_seed(21)
    assert all(np.array_equal(order, _flat_order(loader)) for order in first)
    with pytest.raises(RuntimeError, match="set_epoch.*default generator"):
        loader.set_epoch(1)


def test_a_generator_draws_each_epochs_permutation_from_its_state():
    ds = TensorDataset(np.arange(12))
    loader = DataLoader(ds, 12, shuffle=True, generator=np.random.default_rng(5))
    reference = np.random.default_rng(5)
    for _ in range(3):
        np.testing.assert_array_equal(_flat_order(loader), reference.permutation(12))
    with pytest.raises(RuntimeError, match="set_epoch.*generator"):
        loader.set_epoch(1)


# -- the TensorDataset fast path -------------------------------------------------------------------
def _assert_same_batches(fast, slow):
    assert len(fast) == len(slow)
    for a, b in zip(fast, slow):
        assert type(a) is type(b) is tuple and len(a) == len(b)
        for ta, tb in zip(a, b):
            assert ta.dtype == tb.dtype and ta.shape == tb.shape
            assert ta._data.tobytes() == tb._data.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fast_path_equals_collating_the_items(dtype):
    x = np.random.default_rng(1).standard_normal((17, 2, 3)).astype(dtype)
    ds = TensorDataset(x, np.arange(17), nb.tensor(np.arange(17) % 2 == 0))
    fast = list(DataLoader(ds, 4, shuffle=True, seed=2))
    slow = list(DataLoader(ds, 4, shuffle=True, seed=2, collate_fn=default_collate))
    _assert_same_batches(fast, slow)


def test_fast_path_through_nested_subsets():
    x, y = _dataset(30)
    ds = TensorDataset(x, y)
    outer = Subset(Subset(ds, np.arange(29, -1, -1)), [3, 0, 7, 7, 12, -1])
    fast = list(DataLoader(outer, 4))
    slow = list(DataLoader(outer, 4, collate_fn=default_collate))
    _assert_same_batches(fast, slow)
    rows = np.arange(29, -1, -1)[[3, 0, 7, 7, 12, -1]]
    np.testing.assert_array_equal(np.concatenate([b[0]._data for b in fast]), x[rows])


def test_fast_path_keeps_the_graph_of_a_dataset_tensor_that_requires_grad():
    x = nb.tensor(np.arange(6.0), requires_grad=True)
    batch, = next(iter(DataLoader(TensorDataset(x), 4, shuffle=True, seed=0)))
    batch.sum().backward()
    expected = np.zeros(6)
    expected[_epoch_order(0, 0, 6)[:4]] = 1
    np.testing.assert_array_equal(x.grad._data, expected)


def test_fast_path_batches_of_constant_tensors_are_copies_outside_the_graph():
    x = np.arange(12.0).reshape(6, 2)
    ds = TensorDataset(x)
    batch, = next(iter(DataLoader(ds, 4, shuffle=True, seed=0)))
    assert not batch.requires_grad and batch.grad_fn is None
    np.testing.assert_array_equal(batch._data, x[_epoch_order(0, 0, 6)[:4]])
    batch._data[...] = -1  # a copy: the dataset keeps its rows
    np.testing.assert_array_equal(ds.tensors[0]._data, np.arange(12.0).reshape(6, 2))


def test_a_subclass_overriding_getitem_is_collated_item_by_item():
    class Doubled(TensorDataset):
        def __getitem__(self, index):
            return tuple(t[index] * 2 for t in self.tensors)

    batch, = next(iter(DataLoader(Doubled(np.arange(4.0)), 4)))
    np.testing.assert_array_equal(batch._data, [0.0, 2.0, 4.0, 6.0])


# -- default_collate -----------------------------------------------------------------------------
class _Items(Dataset):
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


def test_default_collate_structures():
    Point = collections.namedtuple("Point", "x y")
    items = [{"image": np.full((2, 2), i, np.float32), "label": i, "weight": i / 2,
              "name": f"s{i}", "pair": (nb.tensor([i, i]), [True, False]),
              "point": Point(np.float32(i), np.int64(i))} for i in range(3)]
    batch = next(iter(DataLoader(_Items(items), 3)))
    assert batch["image"].shape == (3, 2, 2) and batch["image"].dtype == np.float32
    assert batch["label"].dtype == np.int64 and batch["label"].tolist() == [0, 1, 2]
    assert batch["weight"].dtype == np.float64 and batch["weight"].tolist() == [0, 0.5, 1]
    assert batch["name"] == ["s0", "s1", "s2"]
    pair = batch["pair"]
    assert type(pair) is tuple and pair[0].shape == (3, 2)
    assert type(pair[1]) is list and pair[1][0].dtype == np.bool_
    assert type(batch["point"]) is Point and batch["point"].x.dtype == np.float32


def test_default_collate_dtypes_match_torch():
    pytest.importorskip("torch")
    from torch.utils.data import default_collate as torch_collate
    for items in ([1.5, 2.0], [1, 2], [True, False], [np.float32(1), np.float32(2)],
                  [np.arange(3, dtype=np.float64), np.arange(3, dtype=np.float64)]):
        ours, theirs = default_collate(items), torch_collate(items)
        assert str(ours.dtype) == str(theirs.dtype).replace("torch.", "nbgrad.")
        np.testing.assert_array_equal(ours._data, theirs.numpy())


def test_default_collate_errors():
    with pytest.raises(ValueError, match="default_collate: the sequences of a batch must "
                                         r"have one length, got lengths \[1, 2\]"):
        default_collate([(1,), (1, 2)])
    with pytest.raises(ValueError, match="tensors of a batch must have one shape"):
        default_collate([nb.tensor([1.0]), nb.tensor([1.0, 2.0])])
    with pytest.raises(TypeError, match="cannot batch items of type object"):
        default_collate([object()])
    with pytest.raises(ValueError, match="the batch is empty"):
        default_collate([])


# -- len and batch sizes against torch (oracle), properties --------------------------------------
@given(n=st.integers(1, 60), batch_size=st.integers(1, 70), drop_last=st.booleans())
def test_len_matches_torch(n, batch_size, drop_last):
    torch_data = pytest.importorskip("torch.utils.data")
    expected = len(torch_data.DataLoader(range(n), batch_size=batch_size,
                                         drop_last=drop_last))
    if expected == 0:
        with pytest.raises(ValueError, match="an epoch would have no batches"):
            DataLoader(TensorDataset(np.arange(n)), batch_size, drop_last=drop_last)
        return
    loader = DataLoader(TensorDataset(np.arange(n)), batch_size, drop_last=drop_last)
    assert len(loader) == expected


@given(n=st.integers(1, 60), batch_size=st.integers(1, 20), drop_last=st.booleans(),
       seed=st.integers(0, 2**32), epoch=st.integers(0, 5))
def test_every_epoch_is_a_permutation_cut_into_batches(n, batch_size, drop_last, seed, epoch):
    if drop_last and n < batch_size:
        return
    loader = DataLoader(TensorDataset(np.arange(n)), batch_size, shuffle=True,
                        drop_last=drop_last, seed=seed)
    loader.set_epoch(epoch)
    batches = [b[0]._data for b in loader]
    sizes = [len(b) for b in batches]
    assert len(batches) == len(loader)
    assert all(s == batch_size for s in sizes[:-1]) and 1 <= sizes[-1] <= batch_size
    order = _epoch_order(seed, epoch, n)
    kept = len(loader) * batch_size if drop_last else n
    np.testing.assert_array_equal(np.concatenate(batches), order[:kept])
    if not drop_last:
        assert sorted(np.concatenate(batches).tolist()) == list(range(n))


# -- random_split and Subset ---------------------------------------------------------------------
def _split_warned(split, *args, **kwargs):
    """split(*args, **kwargs) and whether it warned (of an empty split)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parts = split(*args, **kwargs)
    return parts, bool(caught)


@pytest.mark.parametrize("n, lengths", [(10, [0.3, 0.3, 0.4]), (7, [0.5, 0.5]),
                                        (5, [0.1] * 10), (11, [0.8, 0.2]), (10, [3, 7])])
def test_random_split_sizes_match_torch_and_order_is_the_seeded_permutation(n, lengths):
    torch_data = pytest.importorskip("torch.utils.data")
    parts, warned = _split_warned(random_split, TensorDataset(np.arange(n)), lengths, seed=4)
    expected, torch_warned = _split_warned(torch_data.random_split, range(n), lengths)
    assert [len(p) for p in parts] == [len(p) for p in expected]
    assert warned == torch_warned
    joined = np.concatenate([p.indices for p in parts])
    np.testing.assert_array_equal(joined, np.random.default_rng(4).permutation(n))
    assert parts[0][0][0].item() == joined[0]


def test_random_split_with_a_generator_and_loading_a_split():
    x, y = _dataset(20)
    train, val = random_split(TensorDataset(x, y), [15, 5], generator=np.random.default_rng(9))
    order = np.random.default_rng(9).permutation(20)
    np.testing.assert_array_equal(train.indices, order[:15])
    bx, by = next(iter(DataLoader(val, 5)))
    np.testing.assert_array_equal(bx._data, x[order[15:]])
    np.testing.assert_array_equal(by._data, y[order[15:]])


def test_subset_items_and_list_indexing():
    ds = TensorDataset(np.arange(10) * 10)
    sub = Subset(ds, [4, 2, 9])
    assert len(sub) == 3 and sub[1][0].item() == 20
    assert sub[[0, 2]][0].tolist() == [40, 90]


# -- bad input -----------------------------------------------------------------------------------
def test_tensor_dataset_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"same size in the first dimension; got shapes "
                                         r"\(10, 3\), \(9,\)"):
        TensorDataset(np.zeros((10, 3)), np.zeros(9))
    with pytest.raises(ValueError, match=r"got shapes \(\)"):
        TensorDataset(nb.tensor(1.0))
    with pytest.raises(TypeError, match="argument 1 is a list"):
        TensorDataset(np.zeros(3), [1, 2, 3])
    with pytest.raises(ValueError, match="at least one tensor"):
        TensorDataset()


@pytest.mark.parametrize("kwargs, error, message", [
    ({"batch_size": 0}, ValueError, "batch_size must be >= 1, got 0"),
    ({"batch_size": -2}, ValueError, "batch_size must be >= 1, got -2"),
    ({"batch_size": 2.0}, TypeError, "batch_size must be an int, got float 2.0"),
    ({"batch_size": True}, TypeError, "batch_size must be an int, got bool"),
    ({"batch_size": 8, "drop_last": True}, ValueError,
     r"an epoch would have no batches \(a dataset of 5 items, batch_size=8, drop_last=True\)"),
    ({"seed": -1}, ValueError, "seed must be >= 0"),
    ({"seed": 1.5}, TypeError, "seed must be an int or None, got float"),
    ({"seed": 1, "generator": np.random.default_rng()}, ValueError,
     "pass seed or generator, not both"),
    ({"generator": 3}, TypeError, "generator must be a numpy.random.Generator"),
    ({"collate_fn": 3}, TypeError, "collate_fn must be callable"),
])
def test_loader_errors_name_the_argument(kwargs, error, message):
    with pytest.raises(error, match="DataLoader: " + message):
        DataLoader(TensorDataset(np.arange(5)), **kwargs)


def test_empty_dataset_and_bad_epochs():
    with pytest.raises(ValueError, match="a dataset of 0 items"):
        DataLoader(TensorDataset(np.zeros((0, 2))), 4)
    with pytest.raises(TypeError, match="map-style Dataset"):
        DataLoader(iter([1, 2]))
    loader = DataLoader(TensorDataset(np.arange(5)), 2, shuffle=True, seed=0)
    with pytest.raises(ValueError, match="set_epoch: epoch must be >= 0"):
        loader.set_epoch(-1)
    with pytest.raises(TypeError, match="set_epoch: epoch must be an int"):
        loader.set_epoch(1.0)
    with pytest.raises(NotImplementedError, match="_Bare does not implement __len__"):
        len(type("_Bare", (Dataset,), {})())


@pytest.mark.parametrize("lengths, error, message", [
    ([3, 3], ValueError, r"the lengths \[3, 3\] sum to 6, but the dataset has 10 items"),
    ([0.5, 0.4], ValueError, r"the fractions \[0.5, 0.4\] must each lie in \[0, 1\] and sum to 1"),
    ([1.5, -0.5], ValueError, r"lengths\[1\] is negative"),
    ([True, 9], TypeError, r"lengths\[0\] is True"),
    ([], ValueError, "lengths is empty"),
])
def test_random_split_errors(lengths, error, message):
    with pytest.raises(error, match="random_split: " + message):
        random_split(TensorDataset(np.arange(10)), lengths, seed=0)


def test_random_split_seed_errors_and_subset_range():
    ds = TensorDataset(np.arange(4))
    with pytest.raises(TypeError, match="pass a numpy Generator as generator="):
        random_split(ds, [2, 2], np.random.default_rng())
    with pytest.raises(IndexError, match="Subset: index 4 is out of range for a dataset of "
                                         "4 items"):
        Subset(ds, [0, 4])
    with pytest.raises(TypeError, match="Subset: indices must be a 1-D sequence of ints"):
        Subset(ds, [0.5])
