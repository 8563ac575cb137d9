"""neuraloperator's Darcy-flow and Burgers files: the .pt -> .npz converter (bitwise
round trip, PyTorch optional and its absence reported), the loaders against a PyTorch
reference of neuraloperator's PTDataset slicing, the loaders without PyTorch, and the
errors for missing, partial and malformed files and bad arguments."""

import subprocess
import sys

import numpy as np
import pytest
from conftest import assert_same_bits
from hypothesis import given, settings
from hypothesis import strategies as st

from nbgrad.data.dataset import TensorDataset
from nbgrad.datasets.convert import convert_neuralop, main
from nbgrad.datasets.neuralop_files import load_burgers, load_darcy_flow, read_npz
from nbgrad.tensor import Tensor

N_TRAIN, N_TEST, STEPS = 12, 6, 5  # small stand-ins for 1000 / 50 samples, 17 times


# -- files as neuraloperator publishes them ------------------------------------------------

def _darcy_pt(torch, n, res, seed):
    """{'x': bool [n, R, R], 'y': float32 [n, R, R]}, both stored column-major (strides
    (1, n, n R)) like the published files, which came from MATLAB."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(res, res, n, generator=g) > 0.5).permute(2, 0, 1)
    y = torch.randn(res, res, n, generator=g, dtype=torch.float32).permute(2, 0, 1)
    return {"x": x, "y": y}


def _burgers_pt(torch, n, res, seed):
    """{'x': float64 [n, R], 'y': float64 [n, T, R] with y[:, 0] == x, 'visc': [1, 1]}."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(res, STEPS, n, generator=g, dtype=torch.float64).permute(2, 1, 0)
    return {"x": y[:, 0], "y": y, "visc": torch.tensor([[0.01]], dtype=torch.float64)}


def _publish(torch, root):
    """The five published files (train 16; Darcy tests at 16 and 32; Burgers test 16)."""
    root.mkdir(parents=True, exist_ok=True)
    files = {"darcy_train_16": _darcy_pt(torch, N_TRAIN, 16, 1),
             "darcy_test_16": _darcy_pt(torch, N_TEST, 16, 2),
             "darcy_test_32": _darcy_pt(torch, N_TEST, 32, 3),
             "burgers_train_16": _burgers_pt(torch, N_TRAIN, 16, 4),
             "burgers_test_16": _burgers_pt(torch, N_TEST, 16, 5)}
    for name, data in files.items():
        torch.save(data, root / f"{name}.pt")
    return files


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """(the dicts of tensors, the directory of their converted .npz files)."""
    torch = pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("neuralop")
    files = _publish(torch, root / "pt")
    convert_neuralop(root / "pt", root / "npz")
    return files, root / "npz"


def _reference(torch, data, n, in_rates, out_rates, channel_dim, dtype):
    """neuraloperator's PTDataset on one file: the first n samples, [::rate] along each
    data axis, unsqueeze(channel_dim), x as float32 and y as stored; then our dtype."""
    x = data["x"][tuple([slice(0, n)] + [slice(None, None, r) for r in in_rates])]
    y = data["y"][tuple([slice(0, n)] + [slice(None, None, r) for r in out_rates])]
    x = x.unsqueeze(channel_dim).type(torch.float32)
    y = y.unsqueeze(channel_dim)
    if dtype is not None:
        x, y = x.to(dtype), y.to(dtype)
    return x.contiguous().numpy(), y.contiguous().numpy()


# -- converter ------------------------------------------------------------------------------

def test_convert_is_bitwise_with_the_same_keys(tmp_path):
    torch = pytest.importorskip("torch")
    files = _publish(torch, tmp_path)
    (tmp_path / "mini_car.pt").write_bytes(b"not one of the data files")  # skipped
    written = convert_neuralop(tmp_path)
    assert [p.name for p in written] == sorted(f"{k}.npz" for k in files)
    for name, data in files.items():
        arrays = read_npz(tmp_path / f"{name}.npz")
        assert sorted(arrays) == sorted(data)
        for key, value in data.items():
            assert_same_bits(arrays[key], value.contiguous().numpy())
    assert read_npz(tmp_path / "darcy_train_16.npz")["x"].dtype == np.bool_


def test_convert_destinations(tmp_path):
    torch = pytest.importorskip("torch")
    _publish(torch, tmp_path / "pt")
    one = tmp_path / "pt" / "darcy_test_16.pt"
    assert convert_neuralop(one) == [tmp_path / "pt" / "darcy_test_16.npz"]
    assert convert_neuralop(str(one), tmp_path / "a" / "b.npz") == [tmp_path / "a" / "b.npz"]
    out = convert_neuralop([one, tmp_path / "pt" / "burgers_test_16.pt"], tmp_path / "new")
    assert sorted(p.name for p in out) == ["burgers_test_16.npz", "darcy_test_16.npz"]
    with pytest.raises(ValueError, match="names one .npz file but src gives 5 files"):
        convert_neuralop(tmp_path / "pt", tmp_path / "x.npz")


def test_convert_command_line(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    _publish(torch, tmp_path / "pt")
    assert main([str(tmp_path / "pt"), "--out", str(tmp_path / "npz")]) == 0
    assert len(capsys.readouterr().out.split()) == 5
    assert main([str(tmp_path / "nowhere")]) == 1
    assert "does not exist" in capsys.readouterr().err
    run = subprocess.run([sys.executable, "-m", "nbgrad.datasets.convert",
                          str(tmp_path / "pt" / "darcy_test_32.pt"), "--out",
                          str(tmp_path / "cli")], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "cli" / "darcy_test_32.npz").is_file()


def test_convert_rejects_what_it_cannot_represent(tmp_path):
    torch = pytest.importorskip("torch")
    cases = {"a_tensor.pt": torch.zeros(3), "a_list.pt": {"x": [1, 2]},
             "bf16.pt": {"x": torch.zeros(2, dtype=torch.bfloat16)}, "empty.pt": {}}
    for name, value in cases.items():
        torch.save(value, tmp_path / name)
    (tmp_path / "garbage.pt").write_bytes(b"\x00garbage")
    for name, why in [("a_tensor.pt", "not a dict of tensors"),
                      ("a_list.pt", r"\['x'\] is a list"),
                      ("bf16.pt", "NumPy cannot hold"), ("empty.pt", "not a dict"),
                      ("garbage.pt", "cannot read")]:
        with pytest.raises(ValueError, match=why):
            convert_neuralop(tmp_path / name)
    with pytest.raises(FileNotFoundError, match="no neuraloperator data files"):
        convert_neuralop(tmp_path)
    with pytest.raises(ValueError, match="src is empty"):
        convert_neuralop([])


def test_convert_without_torch_says_how_to_install_it(tmp_path, monkeypatch):
    (tmp_path / "darcy_test_16.pt").write_bytes(b"whatever")
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    with pytest.raises(ImportError, match=r"pip install nbgrad\[torch\]"):
        convert_neuralop(tmp_path)
    assert not (tmp_path / "darcy_test_16.npz").exists()


# -- loaders against the reference -----------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(n_train=st.integers(0, N_TRAIN), n16=st.integers(1, N_TEST),
       n32=st.integers(0, N_TEST),
       rate=st.one_of(st.none(), st.integers(0, 5),
                      st.lists(st.integers(1, 5), min_size=2, max_size=2)),
       channel_dim=st.sampled_from([1, 2, 3, -1]),
       dtype=st.sampled_from([None, np.float32, np.float64]))
def test_darcy_matches_the_reference(published, n_train, n16, n32, rate, channel_dim,
                                     dtype):
    import torch
    files, root = published
    (x, y), tests = load_darcy_flow(root, n_train, [n16, n32], subsampling_rate=rate,
                                    channel_dim=channel_dim, dtype=dtype, as_arrays=True)
    rates = [1, 1] if not rate else rate if isinstance(rate, list) else [rate, rate]
    tdtype = {None: None, np.float32: torch.float32, np.float64: torch.float64}[dtype]
    for got, name, n in [((x, y), "darcy_train_16", n_train),
                         (tests[16], "darcy_test_16", n16), (tests[32], "darcy_test_32", n32)]:
        want = _reference(torch, files[name], n, rates, rates, channel_dim, tdtype)
        assert_same_bits(got[0], want[0])
        assert_same_bits(got[1], want[1])
    assert sorted(tests) == [16, 32]


@settings(max_examples=25, deadline=None)
@given(n_train=st.integers(0, N_TRAIN), n_test=st.integers(0, N_TEST),
       t=st.one_of(st.none(), st.integers(0, 6)), s=st.one_of(st.none(), st.integers(0, 7)),
       channel_dim=st.sampled_from([1, -1]), dtype=st.sampled_from([None, np.float32]))
def test_burgers_matches_the_reference(published, n_train, n_test, t, s, channel_dim, dtype):
    import torch
    files, root = published
    (x, y), tests = load_burgers(root, n_train, [n_test], temporal_subsample=t,
                                 spatial_subsample=s, channel_dim=channel_dim, dtype=dtype,
                                 as_arrays=True)
    tdtype = None if dtype is None else torch.float32
    for got, name, n in [((x, y), "burgers_train_16", n_train),
                         (tests[16], "burgers_test_16", n_test)]:
        want = _reference(torch, files[name], n, [s or 1], [t or 1, s or 1], channel_dim,
                          tdtype)
        assert_same_bits(got[0], want[0])
        assert_same_bits(got[1], want[1])
    assert y.dtype == (np.float64 if dtype is None else np.float32)  # as stored: float64


def test_loaders_return_tensor_datasets(published):
    _, root = published
    train, tests = load_darcy_flow(root, 10, 4)
    assert isinstance(train, TensorDataset) and len(train) == 10
    assert [len(tests[r]) for r in (16, 32)] == [4, 4]
    x, y = tests[32][0]
    assert isinstance(x, Tensor) and x.shape == (1, 32, 32) and y.shape == (1, 32, 32)
    assert str(x.dtype).endswith("float32") and str(y.dtype).endswith("float32")
    train, tests = load_burgers(root, 3, [2])
    assert train.tensors[0].shape == (3, 1, 16) and train.tensors[1].shape == (3, 1, STEPS, 16)
    assert read_npz(root / "burgers_test_16.npz")["visc"].tolist() == [[0.01]]


# -- loaders without PyTorch ------------------------------------------------------------------

def _darcy_npz(root, split, res, n, x=None, y=None):
    """A Darcy .npz written with NumPy alone: x[k, i, j] = (k + i + j) % 2 == 0,
    y[k, i, j] = 1000 k + 100 i + j."""
    root.mkdir(parents=True, exist_ok=True)
    k, i, j = np.meshgrid(np.arange(n), np.arange(res), np.arange(res), indexing="ij")
    x = (k + i + j) % 2 == 0 if x is None else x
    y = (1000.0 * k + 100.0 * i + j).astype(np.float32) if y is None else y
    np.savez(root / f"darcy_{split}_{res}.npz", x=x, y=y)


def test_loaders_work_without_torch(tmp_path, monkeypatch):
    _darcy_npz(tmp_path, "train", 16, 5)
    _darcy_npz(tmp_path, "test", 16, 3)
    monkeypatch.setitem(sys.modules, "torch", None)
    (x, y), tests = load_darcy_flow(tmp_path, 4, [2], test_resolutions=[16],
                                    subsampling_rate=[3, 5], as_arrays=True)
    assert x.shape == y.shape == (4, 1, 6, 4) and x.dtype == y.dtype == np.float32
    for k in range(4):
        for a in range(6):
            for b in range(4):  # point (a, b) of the subsampled grid is (3a, 5b)
                assert y[k, 0, a, b] == 1000 * k + 100 * 3 * a + 5 * b
                assert x[k, 0, a, b] == float((k + 3 * a + 5 * b) % 2 == 0)
    assert tests[16][1].shape == (2, 1, 6, 4)
    train, _ = load_darcy_flow(tmp_path, 5, 3, test_resolutions=16)  # train 16 read once
    assert len(train) == 5


# -- missing, partial and malformed files --------------------------------------------------------

def test_missing_files_are_listed(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist.*darcy_train_16.npz"):
        load_darcy_flow(tmp_path / "nowhere", 1, [1, 1])
    with pytest.raises(FileNotFoundError, match="missing darcy_train_16.npz, "
                       "darcy_test_16.npz, darcy_test_32.npz in") as err:
        load_darcy_flow(tmp_path, 1, [1, 1])
    assert "Zenodo" in str(err.value) and "nbgrad.datasets.convert" in str(err.value)
    _darcy_npz(tmp_path, "train", 16, 2)
    _darcy_npz(tmp_path, "test", 16, 2)
    with pytest.raises(FileNotFoundError, match=r"missing darcy_test_32.npz in .*\(expected "
                       "darcy_train_16.npz, darcy_test_16.npz, darcy_test_32.npz\\)"):
        load_darcy_flow(tmp_path, 1, [1, 1])
    (tmp_path / "darcy_test_32.pt").write_bytes(b"a pickle")  # only the .pt file
    with pytest.raises(FileNotFoundError, match=r"darcy_test_32.pt are there: convert them "
                       r"once .*pip install nbgrad\[torch\]"):
        load_darcy_flow(tmp_path, 1, [1, 1])
    with pytest.raises(FileNotFoundError, match="missing burgers_train_16.npz, "
                       "burgers_test_16.npz"):
        load_burgers(tmp_path, 1, [1])


def test_malformed_files_are_named(tmp_path):
    def check(match, x=None, y=None, res=16, n=2, n_train=1):
        _darcy_npz(tmp_path, "train", res, n, x, y)
        with pytest.raises(ValueError, match=match):
            load_darcy_flow(tmp_path, n_train, [1], test_resolutions=[res], train_resolution=res)

    _darcy_npz(tmp_path, "test", 16, 2)
    np.savez(tmp_path / "darcy_train_16.npz", a=np.zeros((2, 16, 16)), u=np.zeros((2, 16, 16)))
    with pytest.raises(ValueError, match=r"darcy_train_16.npz has no array 'x' .*\['a', 'u'\]"):
        load_darcy_flow(tmp_path, 1, [1], test_resolutions=[16])
    check(r"must hold x of shape \[n, 16, 16\] .* got x \(2, 16, 8\)",
          x=np.zeros((2, 16, 8), bool))
    check(r"\['y'\] must be \[n, R, R\], got shape \(2, 256\)", y=np.zeros((2, 256)))
    check(r"got x \(2, 16, 16\) and y \(3, 16, 16\)", y=np.zeros((3, 16, 16), np.float32))
    check("non-finite", y=np.full((2, 16, 16), np.nan, np.float32))
    check("must hold real numbers", y=np.zeros((2, 16, 16), complex))
    check("n_train=3 but darcy_train_16.npz holds 2 samples", n_train=3)
    np.savez(tmp_path / "darcy_train_16.npz", x=np.zeros((2, 16, 16), bool),
             y=np.array([{"evil": 1}] * 2, dtype=object))
    with pytest.raises(ValueError, match="pickled Python objects"):
        load_darcy_flow(tmp_path, 1, [1], test_resolutions=[16])
    (tmp_path / "darcy_train_16.npz").write_bytes(b"truncated")
    with pytest.raises(ValueError, match="not a readable .npz file"):
        load_darcy_flow(tmp_path, 1, [1], test_resolutions=[16])
    import zipfile
    with zipfile.ZipFile(tmp_path / "darcy_train_16.npz", "w") as z:  # torch.save's layout
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        z.writestr("archive/data/0", b"\x00" * 8)
    with pytest.raises(ValueError, match="is a PyTorch .pt file"):
        load_darcy_flow(tmp_path, 1, [1], test_resolutions=[16])
    np.savez(tmp_path / "burgers_train_16.npz", x=np.zeros((2, 16)), y=np.zeros((2, 16)))
    np.savez(tmp_path / "burgers_test_16.npz", x=np.zeros((2, 16)), y=np.zeros((2, 3, 16)))
    with pytest.raises(ValueError, match=r"load_burgers: burgers_train_16.npz\['y'\] must be "
                       r"\[n, T, R\]"):
        load_burgers(tmp_path, 1, [1])


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(n_train=-1), ValueError, "n_train must be an integer >= 0"),
    (dict(n_tests=[1]), ValueError, r"n_tests must give one sample count per test "
                                    r"resolution \(2\)"),
    (dict(n_tests=[1, -2]), ValueError, "n_tests must be an integer >= 0"),
    (dict(test_resolutions=[]), ValueError, "test_resolutions must be a non-empty list"),
    (dict(train_resolution=0), ValueError, "train_resolution must be an integer >= 1"),
    (dict(subsampling_rate=-2), ValueError, "subsampling_rate must be an integer >= 1"),
    (dict(subsampling_rate=[2]), ValueError,
     r"subsampling_rate must give one rate per data axis \(2\)"),
    (dict(channel_dim=0), ValueError, r"channel_dim must be an integer in 1..3"),
    (dict(channel_dim=-4), ValueError, "channel_dim"),
    (dict(dtype=np.int32), TypeError, "dtype must be a floating-point dtype"),
    (dict(as_arrays="yes"), ValueError, "as_arrays must be True or False"),
])
def test_bad_arguments_name_the_argument(tmp_path, kwargs, error, match):
    args = dict(n_train=1, n_tests=[1, 1]) | kwargs
    with pytest.raises(error, match=f"load_darcy_flow: {match}"):
        load_darcy_flow(tmp_path, **args)


def test_burgers_bad_subsampling_names_the_argument(tmp_path):
    with pytest.raises(ValueError, match="load_burgers: temporal_subsample must be"):
        load_burgers(tmp_path, 1, [1], temporal_subsample=-1)
    with pytest.raises(ValueError, match="load_burgers: spatial_subsample must be"):
        load_burgers(tmp_path, 1, [1], spatial_subsample=1.5)
