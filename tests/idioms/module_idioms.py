"""49 idioms of everyday PyTorch scripts around ``nn``, ``optim`` and ``utils.data``,
written against ``torch``, ``F``, ``nn`` and ``np`` like ``tensor_idioms.py`` and run the same
way: once with PyTorch's names, once with nbgrad's, the two ``out`` compared.

Each idiom runs after ``PRELUDE`` (run with the same names): ``fixed_(model)`` sets every
parameter to a fixed ramp, so that two libraries' models start from the same weights, and
``x = torch.tensor(a)``. The data of ``tensor_idioms.py`` are there too, plus ``path``, a
fresh file name for checkpoints.
"""

from idioms.tensor_idioms import VALUE

PRELUDE = """
def fixed_(model):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.linspace(-0.5, 0.5, p.numel()).reshape(p.shape))
    return model

x = torch.tensor(a)
"""

MLP = "m = fixed_(nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3)))\n"


def _steps(n: int) -> str:
    """``n`` optimiser and scheduler steps, the learning rates in ``out``."""
    return (f"lrs = []\nfor _ in range({n}):\n    opt.step()\n    sched.step()\n"
            "    lrs.append(sched.get_last_lr()[0])\nout = lrs")


MODULE_IDIOMS: list[tuple[str, str, str]] = [
    # -- layers' forward passes ----------------------------------------------------------------
    ("linear_shape", "m = nn.Linear(5, 3)\ny = m(x)\n"
     "out = (y.shape, m.weight.shape, m.bias.shape, y.requires_grad)", VALUE),
    ("linear_values", "m = nn.Linear(5, 3)\nnn.init.constant_(m.weight, 0.1)\n"
     "nn.init.zeros_(m.bias)\nout = m(x)", VALUE),
    ("sequential_forward", MLP + "out = (m(x), m[0].weight.shape, len(m))", VALUE),
    ("conv2d", "m = fixed_(nn.Conv2d(3, 4, 3, padding=1))\n"
     "s = nn.Conv2d(3, 4, kernel_size=3, stride=2)\n"
     "out = (m(torch.tensor(img)), s(torch.tensor(img)).shape)", VALUE),
    ("batchnorm2d", "bn = nn.BatchNorm2d(3)\ny = bn(torch.tensor(img))\n"
     "stats = (bn.running_mean.clone(), bn.running_var.clone())\nbn.eval()\n"
     "out = (y, stats, bn(torch.tensor(img)))", VALUE),
    ("layernorm", "ln = nn.LayerNorm(8)\nout = (ln(torch.tensor(seq)), ln.weight.shape)", VALUE),
    ("dropout_train_eval", "d = nn.Dropout(0.5)\ny = d(torch.ones(50, 4))\nd.eval()\n"
     "out = (bool(((y == 0) | (y == 2)).all()), d(x))", VALUE),
    ("embedding", "e = fixed_(nn.Embedding(10, 4))\ny = e(torch.tensor([[1, 2], [3, 9]]))\n"
     "out = (y, bool((y[0, 0] == e.weight[1]).all()), e.weight.shape)", VALUE),
    ("maxpool2d_flatten", "y = nn.MaxPool2d(2)(torch.tensor(img))\n"
     "out = (y, nn.Flatten()(y).shape)", VALUE),
    ("custom_module", "class Net(nn.Module):\n"
     "    def __init__(self):\n"
     "        super().__init__()\n"
     "        self.fc1 = nn.Linear(5, 8)\n"
     "        self.fc2 = nn.Linear(8, 3)\n"
     "    def forward(self, x):\n"
     "        return self.fc2(F.relu(self.fc1(x)))\n"
     "net = fixed_(Net())\n"
     "out = (net(x), [n for n, _ in net.named_parameters()])", VALUE),
    ("parameters_count", MLP + "out = (sum(p.numel() for p in m.parameters()), "
     "sum(p.numel() for p in m.parameters() if p.requires_grad), len(list(m.parameters())))",
     VALUE),
    ("named_parameters", MLP + "out = [(n, p.shape) for n, p in m.named_parameters()]", VALUE),
    ("state_dict_keys", "m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())\n"
     "out = [(k, v.shape) for k, v in m.state_dict().items()]", VALUE),
    ("load_state_dict_numpy", "m1 = fixed_(nn.Linear(5, 3))\nm2 = nn.Linear(5, 3)\n"
     "sd = {k: v.detach().numpy() for k, v in m1.state_dict().items()}\n"
     "m2.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})\n"
     "out = (m2(x), torch.equal(m1(x), m2(x)))", VALUE),
    ("train_eval", MLP + "m.eval()\nflags = (m.training, m[0].training)\nm.train()\n"
     "out = flags + (m.training, m[2].training)", VALUE),
    ("freeze", MLP + "m[0].requires_grad_(False)\nm(x).sum().backward()\n"
     "out = ([p.requires_grad for p in m.parameters()], m[0].weight.grad is None, "
     "m[2].weight.grad)", VALUE),
    ("apply_init", "def init_fn(mod):\n"
     "    if isinstance(mod, nn.Linear):\n"
     "        nn.init.constant_(mod.weight, 0.01)\n"
     "        nn.init.zeros_(mod.bias)\n"
     "m = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2))\nm.apply(init_fn)\n"
     "out = m(x)", VALUE),
    ("init_xavier_kaiming", "w = torch.empty(30, 20)\nnn.init.xavier_uniform_(w)\n"
     "k = torch.empty(16, 3, 3, 3)\nnn.init.kaiming_normal_(k, mode='fan_out', "
     "nonlinearity='relu')\nout = (w.shape, bool(w.abs().max() <= (6 / 50) ** 0.5), k.shape, "
     "k.dtype)", VALUE),
    # -- optimisers -----------------------------------------------------------------------
    ("zero_grad", MLP + "opt = torch.optim.SGD(m.parameters(), lr=0.1)\nm(x).sum().backward()\n"
     "opt.zero_grad()\nout = [p.grad is None for p in m.parameters()]", VALUE),
    ("sgd_momentum", MLP + "opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)\n"
     "for _ in range(3):\n    opt.zero_grad()\n    (m(x) ** 2).mean().backward()\n"
     "    opt.step()\nout = list(m.parameters())", VALUE),
    ("adam", MLP + "opt = torch.optim.Adam(m.parameters(), lr=1e-2)\n"
     "for _ in range(3):\n    opt.zero_grad()\n    (m(x) ** 2).mean().backward()\n"
     "    opt.step()\nout = list(m.parameters())", VALUE),
    ("adamw", MLP + "opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1)\n"
     "for _ in range(3):\n    opt.zero_grad()\n    (m(x) ** 2).mean().backward()\n"
     "    opt.step()\nout = list(m.parameters())", VALUE),
    ("param_groups", MLP + "opt = torch.optim.SGD([{'params': m[0].parameters()}, "
     "{'params': m[2].parameters(), 'lr': 0.01}], lr=0.1)\n"
     "(m(x) ** 2).mean().backward()\nopt.step()\n"
     "out = ([g['lr'] for g in opt.param_groups], list(m.parameters()))", VALUE),
    ("clip_grad_norm", MLP + "(m(x) ** 2).sum().backward()\n"
     "total = torch.nn.utils.clip_grad_norm_(m.parameters(), max_norm=1.0)\n"
     "out = (total, [p.grad for p in m.parameters()])", VALUE),
    # -- schedulers -------------------------------------------------------------------------
    ("step_lr", "opt = torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)\n"
     "sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)\n"
     + _steps(5), VALUE),
    ("cosine_annealing_lr", "opt = torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)\n"
     "sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4, eta_min=0.01)\n"
     + _steps(6), VALUE),
    ("one_cycle_lr", "opt = torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1, momentum=0.9)\n"
     "sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10)\nlrs = []\n"
     "for _ in range(9):\n    opt.step()\n    sched.step()\n"
     "    lrs.append((sched.get_last_lr()[0], opt.param_groups[0]['momentum']))\nout = lrs", VALUE),
    ("lambda_lr", "opt = torch.optim.Adam(nn.Linear(2, 1).parameters(), lr=0.1)\n"
     "sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.9 ** epoch)\n"
     + _steps(4), VALUE),
    ("reduce_lr_on_plateau", "opt = torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)\n"
     "sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode='min', factor=0.5, "
     "patience=1)\nlrs = []\nfor loss in [1.0, 0.9, 0.95, 0.95, 0.95, 0.95]:\n"
     "    sched.step(loss)\n    lrs.append(sched.get_last_lr()[0])\nout = lrs", VALUE),
    # -- data ----------------------------------------------------------------------------------
    ("dataloader_batches", "ds = torch.utils.data.TensorDataset(torch.arange(20.0).view(10, 2), "
     "torch.arange(10))\ndl = torch.utils.data.DataLoader(ds, batch_size=4)\n"
     "out = (len(ds), len(dl), [(xb, yb) for xb, yb in dl], ds[3])", VALUE),
    ("dataloader_shuffle", "ds = torch.utils.data.TensorDataset(torch.arange(10))\n"
     "g = torch.Generator().manual_seed(0)\n"
     "dl = torch.utils.data.DataLoader(ds, batch_size=3, shuffle=True, generator=g)\n"
     "out = (torch.cat([b for b, in dl]).sort().values, [len(b) for b, in dl])", VALUE),
    ("dataloader_drop_last", "ds = torch.utils.data.TensorDataset(torch.arange(10))\n"
     "dl = torch.utils.data.DataLoader(ds, batch_size=3, shuffle=True, drop_last=True)\n"
     "out = (len(dl), [b.shape for b, in dl])", VALUE),
    ("dataloader_workers", "ds = torch.utils.data.TensorDataset(torch.arange(12.0).view(6, 2))\n"
     "dl = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=2)\n"
     "out = [b for b, in dl]", VALUE),
    ("random_split", "ds = torch.utils.data.TensorDataset(torch.arange(10))\n"
     "tr, va = torch.utils.data.random_split(ds, [8, 2], "
     "generator=torch.Generator().manual_seed(0))\n"
     "out = (len(tr), len(va), sorted([int(tr[i][0]) for i in range(8)] + "
     "[int(va[i][0]) for i in range(2)]) == list(range(10)))", VALUE),
    ("save_load", MLP + "torch.save(m.state_dict(), path)\n"
     "m2 = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))\n"
     "m2.load_state_dict(torch.load(path))\nout = m2(x)", VALUE),
    # -- more layers -------------------------------------------------------------------------
    ("multihead_attention", "mha = nn.MultiheadAttention(8, 2, batch_first=True)\n"
     "q = torch.tensor(seq)\ny, w = mha(q, q, q)\nout = (y.shape, w.shape)", VALUE),
    ("transformer_encoder_layer", "layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, "
     "dim_feedforward=16, dropout=0.0, batch_first=True)\nout = layer(torch.tensor(seq)).shape",
     VALUE),
    ("group_norm", "gn = nn.GroupNorm(1, 3)\nout = gn(torch.tensor(img))", VALUE),
    ("upsample", "out = (nn.Upsample(scale_factor=2, mode='nearest')(torch.tensor(img)), "
     "nn.Upsample(size=(5, 5), mode='bilinear')(torch.tensor(img)))", VALUE),
    ("adaptive_avg_pool2d", "out = nn.AdaptiveAvgPool2d((1, 1))(torch.tensor(img))", VALUE),
    ("pixel_shuffle", "out = nn.PixelShuffle(2)(torch.arange(32.0).view(1, 8, 2, 2))", VALUE),
    ("unflatten", "out = nn.Unflatten(2, (2, 4))(torch.tensor(seq))", VALUE),
    ("lbfgs", "w = torch.zeros(2, requires_grad=True)\n"
     "opt = torch.optim.LBFGS([w], lr=1, max_iter=20)\n"
     "def closure():\n    opt.zero_grad()\n"
     "    loss = ((w - torch.tensor([1.0, -2.0])) ** 2).sum()\n    loss.backward()\n"
     "    return loss\nopt.step(closure)\nout = w", VALUE),
    ("parameters_to_vector", MLP + "v = torch.nn.utils.parameters_to_vector(m.parameters())\n"
     "out = v", VALUE),
    # -- a training script's structure ----------------------------------------------------------
    ("training_loop", MLP + "opt = torch.optim.SGD(m.parameters(), lr=0.05)\n"
     "loss_fn = nn.CrossEntropyLoss()\ny = torch.tensor(labels) % 3\nlosses = []\n"
     "for _ in range(3):\n    opt.zero_grad()\n    loss = loss_fn(m(x), y)\n    loss.backward()\n"
     "    opt.step()\n    losses.append(loss.item())\n"
     "out = (losses, losses[2] < losses[0])", VALUE),
    ("module_to_cpu", MLP + "out = (m.to('cpu') is m, m.to(torch.float64)[0].weight.dtype)",
     VALUE),
    ("modulelist_moduledict", "layers = nn.ModuleList([nn.Linear(5, 5) for _ in range(3)])\n"
     "heads = nn.ModuleDict({'a': nn.Linear(5, 2), 'b': nn.Linear(5, 1)})\n"
     "h = x\nfor layer in fixed_(layers):\n    h = torch.tanh(layer(h))\n"
     "out = (h, len(layers), list(heads.keys()), heads['b'](h).shape, "
     "len(list(heads.parameters())))", VALUE),
    ("register_buffer", "class Scaler(nn.Module):\n    def __init__(self):\n"
     "        super().__init__()\n        self.register_buffer('scale', torch.full((5,), 2.0))\n"
     "    def forward(self, x):\n        return x * self.scale\n"
     "s = Scaler()\nout = (s(x), list(s.state_dict().keys()), len(list(s.parameters())), "
     "[n for n, _ in s.named_buffers()])", VALUE),
    ("forward_hook", MLP + "seen = []\n"
     "h = m[0].register_forward_hook(lambda mod, inp, outp: seen.append(outp.shape))\n"
     "m(x)\nh.remove()\nm(x)\nout = seen", VALUE),
]
