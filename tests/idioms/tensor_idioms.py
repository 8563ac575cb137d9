"""125 tensor idioms of everyday PyTorch scripts, each a few lines of code written against
``torch``, ``F`` (torch.nn.functional), ``nn`` (torch.nn) and ``np``; ``test_idioms.py``
runs each one with PyTorch's names and again with nbgrad's, then compares the ``out`` of
the two runs.

Besides those names the code sees fixed NumPy data (the same arrays on both runs):
``a`` float32 (4, 5), ``b`` float32 (5, 3), ``img`` float32 (2, 3, 8, 8), ``seq`` float32
(2, 6, 8) and ``labels`` int64 (4,) in [0, 5).

An idiom is ``(name, code, mode)``: ``"value"`` compares values (allclose), shapes and
dtypes; ``"structure"`` only shapes, dtypes and types, for results that are random by
nature (the two libraries draw different numbers from the same seed).
"""

VALUE, STRUCTURE = "value", "structure"

TENSOR_IDIOMS: list[tuple[str, str, str]] = [
    # -- creation ---------------------------------------------------------------------
    ("tensor_literals", "out = (torch.tensor([[1, 2], [3, 4]]), torch.tensor([1.0, 2.5, -3.0]), "
     "torch.tensor(3.5))", VALUE),
    ("tensor_dtype", "out = torch.tensor([1, 2, 3], dtype=torch.float32)", VALUE),
    ("tensor_from_array", "out = torch.tensor(a)", VALUE),
    ("zeros_ones_full", "out = (torch.zeros(2, 3), torch.zeros((2, 3), dtype=torch.long), "
     "torch.ones(3, 2, dtype=torch.float64), torch.full((2, 2), 7.0))", VALUE),
    ("arange", "out = (torch.arange(10), torch.arange(0, 1, 0.25), torch.arange(2, 8, 2))", VALUE),
    ("linspace_logspace", "out = (torch.linspace(0, 1, 5), torch.logspace(0, 2, 3))", VALUE),
    ("eye", "out = torch.eye(3)", VALUE),
    ("empty_shape", "out = torch.empty(3, 4).shape", VALUE),
    ("zeros_ones_like", "x = torch.tensor(a)\n"
     "out = (torch.zeros_like(x), torch.ones_like(x, dtype=torch.int64))", VALUE),
    ("rand_like_shape", "out = torch.rand_like(torch.tensor(a)).shape", VALUE),
    ("randn_rand_like", "out = (torch.randn_like(torch.tensor(a)), torch.randn(2, 3), "
     "torch.rand(4))", STRUCTURE),
    ("randint_shape_dtype", "r = torch.randint(0, 10, (3, 4))\n"
     "out = (r.shape, r.dtype, bool(((r >= 0) & (r < 10)).all()))", VALUE),
    ("from_numpy_shares", "arr = np.arange(6.0).reshape(2, 3)\nt = torch.from_numpy(arr)\n"
     "arr[0, 0] = 100.0\nout = t", VALUE),
    ("as_tensor", "out = torch.as_tensor([1.5, 2.5], dtype=torch.float64)", VALUE),
    ("meshgrid_ij", "gx, gy = torch.meshgrid(torch.arange(3), torch.arange(2), indexing='ij')\n"
     "out = (gx, gy)", VALUE),
    ("meshgrid_xy", "gx, gy = torch.meshgrid(torch.linspace(0, 1, 3), torch.arange(2.0), "
     "indexing='xy')\nout = (gx, gy)", VALUE),
    # -- dtypes and devices -------------------------------------------------------------
    ("dtype_equals", "x = torch.tensor(a)\n"
     "out = (x.dtype == torch.float32, x.dtype, torch.arange(2).dtype == torch.int64)", VALUE),
    ("dtype_conversions", "x = torch.tensor([0.0, 1.7, -2.3])\n"
     "out = (x.double(), x.long(), x.int(), x.bool(), torch.arange(4).float())", VALUE),
    ("to_dtype_device", "x = torch.tensor(a)\nout = (x.to(torch.float64), x.to('cpu').cpu())",
     VALUE),
    ("device_pick", "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
     "x = torch.ones(2, device=device)\nout = (str(x.device), x.device == device)", VALUE),
    ("type_as", "out = torch.arange(3).type_as(torch.tensor(a))", VALUE),
    ("int_promotion", "out = (torch.arange(5) / 2, torch.arange(3) * 0.5)", VALUE),
    # -- shapes -------------------------------------------------------------------------
    ("view", "out = torch.arange(12).view(3, 4)", VALUE),
    ("reshape_minus_one", "x = torch.tensor(img)\nout = (x.reshape(2, -1), x.view(x.size(0), -1))",
     VALUE),
    ("permute", "out = torch.tensor(img).permute(0, 2, 3, 1)", VALUE),
    ("transpose_T", "out = (torch.tensor(seq).transpose(1, 2), torch.tensor(a).T)", VALUE),
    ("squeeze_unsqueeze", "x = torch.zeros(3, 1, 4)\n"
     "out = (x.squeeze().shape, x.squeeze(1).shape, x.unsqueeze(0).shape, x[:, None].shape)",
     VALUE),
    ("flatten", "x = torch.tensor(img)\nout = (x.flatten(1), torch.flatten(x, start_dim=2))",
     VALUE),
    ("cat", "x = torch.tensor(a)\nout = (torch.cat([x, x * 2], dim=1), torch.cat((x, x)))",
     VALUE),
    ("stack", "x = torch.tensor(a)\nout = (torch.stack([x, x + 1]), torch.stack([x, x], dim=-1))",
     VALUE),
    ("split", "x = torch.arange(10)\n"
     "out = (x.split(3), torch.split(torch.tensor(a), [2, 3], dim=1))", VALUE),
    ("chunk", "out = torch.arange(10).chunk(3)", VALUE),
    ("expand_expand_as", "x = torch.tensor([[1.0], [2.0]])\n"
     "out = (x.expand(2, 3), x.expand(-1, 4), x.expand_as(torch.zeros(2, 5)))", VALUE),
    ("repeat_tile", "out = (torch.tensor([1, 2]).repeat(2, 3), "
     "torch.tile(torch.tensor([[1, 2]]), (2, 2)))", VALUE),
    ("flip_roll", "x = torch.tensor(a)\nr = torch.arange(6)\n"
     "out = (x.flip(0), torch.flip(x, dims=[0, 1]), torch.roll(r, shifts=2), "
     "torch.roll(r.view(2, 3), 1, dims=1))", VALUE),
    ("contiguous_view_as", "x = torch.tensor(a)\n"
     "out = (x.transpose(0, 1).contiguous().view(-1), torch.arange(20.0).view_as(x))", VALUE),
    ("dim_size_numel", "x = torch.tensor(img)\nB, C, H, W = x.shape\n"
     "out = (x.dim(), x.ndim, x.size(), x.size(1), x.size(-1), x.numel(), x.shape[2], "
     "B * C, len(x.shape))", VALUE),
    # -- indexing and item assignment --------------------------------------------------------
    ("mask_assign", "x = torch.tensor(a)\nx[x < 0] = 0\nout = x", VALUE),
    ("row_column_assign", "y = torch.zeros(3, 4)\ny[0] = 1.0\ny[:, 2] = torch.arange(3.0)\n"
     "out = y", VALUE),
    ("slicing", "x = torch.tensor(a)\nout = (x[1:, ::2], x[..., -1], x[:, None, :2], x[-1])",
     VALUE),
    ("fancy_index", "x = torch.tensor(a)\n"
     "out = (x[[0, 2, 3]], x[torch.tensor([0, 2]), torch.tensor([1, 3])], "
     "x[torch.arange(4), torch.tensor(labels)])", VALUE),
    ("bool_mask_select", "x = torch.tensor(a)\n"
     "out = (x[x > 0], torch.masked_select(x, x > 0.5))", VALUE),
    ("masked_fill", "x = torch.tensor(a)\nout = x.masked_fill(x < 0, -1e9)", VALUE),
    ("causal_mask", "mask = torch.triu(torch.ones(4, 4), diagonal=1).bool()\n"
     "out = F.softmax(torch.tensor(a)[:, :4].masked_fill(mask, float('-inf')), dim=-1)", VALUE),
    ("index_select", "out = torch.tensor(a).index_select(1, torch.tensor([4, 0]))", VALUE),
    ("gather", "logp = F.log_softmax(torch.tensor(a), dim=1)\n"
     "out = logp.gather(1, torch.tensor(labels).unsqueeze(1)).squeeze(1)", VALUE),
    ("scatter_", "y = torch.tensor(labels)\nidx = torch.tensor([0, 1, 0, 2])\n"
     "out = (torch.zeros(4, 5).scatter_(1, y.unsqueeze(1), 1.0), "
     "torch.zeros(3).scatter_add(0, idx, torch.tensor([1.0, 2.0, 3.0, 4.0])))", VALUE),
    ("where", "x = torch.tensor(a)\n"
     "out = (torch.where(x > 0, x, torch.zeros_like(x)), torch.where(x > 0, x, 0.0))", VALUE),
    ("nonzero", "x = torch.tensor(a)\n"
     "out = (torch.nonzero(x > 0), (x > 0).nonzero(as_tuple=True))", VALUE),
    # -- math ------------------------------------------------------------------------------
    ("sum_mean", "x = torch.tensor(img)\n"
     "out = (x.sum(), x.sum(dim=1, keepdim=True), x.sum(0), torch.sum(x, dim=(0, 1)), "
     "x.mean(), x.mean(dim=(2, 3)), x.mean(dim=[0, 2, 3], keepdim=True))", VALUE),
    ("std_var", "x = torch.tensor(a)\n"
     "out = (x.std(), x.std(dim=0), x.var(dim=1, unbiased=False), x.var(1, keepdim=True))",
     VALUE),
    ("max_min", "x = torch.tensor(a)\nv, i = x.max(dim=1)\n"
     "out = (v, i, x.max(1).values, x.max(dim=0).indices, x.max(), x.min(dim=0)[0], "
     "torch.maximum(x, -x), torch.max(x, torch.zeros_like(x)))", VALUE),
    ("argmax", "x = torch.tensor(a)\n"
     "out = (x.argmax(dim=1), x.argmax(), torch.argmin(x, dim=0))", VALUE),
    ("cumsum_cumprod_diff", "x = torch.tensor(a)\nout = (x.cumsum(dim=1), "
     "torch.cumprod(x, dim=0), torch.diff(torch.tensor([1, 4, 9, 16])))", VALUE),
    ("sort_argsort", "x = torch.tensor(a)\nvals, idx = torch.sort(x, dim=1, descending=True)\n"
     "out = (vals, idx, x.sort().values, x.argsort(dim=0))", VALUE),
    ("topk", "x = torch.tensor(a)\n"
     "out = (x.topk(2, dim=1), torch.topk(x.flatten(), 3).indices)", VALUE),
    ("unique_counts", "out = torch.unique(torch.tensor([3, 1, 2, 3, 1, 3]), return_counts=True)",
     VALUE),
    ("clamp", "x = torch.tensor(a)\n"
     "out = (x.clamp(-0.5, 0.5), x.clamp(min=0), torch.clamp(x, max=0.1), x.clamp_min(0.2))",
     VALUE),
    ("exp_log_sqrt", "x = torch.tensor(a)\n"
     "out = (x.abs(), x.exp(), torch.log(x.abs() + 1e-8), x.abs().log1p(), x.expm1(), "
     "x.abs().sqrt(), torch.logsumexp(x, dim=1), x.prod(dim=1))", VALUE),
    ("rounding", "x = torch.tensor(a) * 3\n"
     "out = (x.floor(), x.ceil(), x.round(), x.trunc(), torch.round(x, decimals=1))", VALUE),
    ("sign_reciprocal_rsqrt", "x = torch.tensor(a)\n"
     "out = (x.sign(), x.reciprocal(), (x.abs() + 0.1).rsqrt())", VALUE),
    ("sigmoid_tanh_methods", "x = torch.tensor(a)\n"
     "out = (x.sigmoid(), x.tanh(), torch.sigmoid(x))", VALUE),
    ("floordiv_mod_fmod", "x = torch.arange(-5, 5)\nf = torch.tensor(a) * 4\n"
     "out = (x // 3, x % 3, torch.fmod(f, 1.5), torch.remainder(f, 1.5), f % 1.5)", VALUE),
    ("pow", "x = torch.tensor(a)\nout = (x ** 2, x.pow(3), 2 ** x, torch.pow(x.abs(), 0.5))",
     VALUE),
    ("matmul_at", "out = torch.tensor(a) @ torch.tensor(b)", VALUE),
    ("matmul_batched", "q = torch.tensor(seq)\nout = (q @ q.transpose(-2, -1), "
     "torch.matmul(q, torch.ones(8)))", VALUE),
    ("bmm", "q = torch.tensor(seq)\nout = torch.bmm(q, q.transpose(1, 2))", VALUE),
    ("addmm", "out = torch.addmm(torch.ones(3), torch.tensor(a), torch.tensor(b))", VALUE),
    ("outer", "out = torch.outer(torch.arange(3.0), torch.arange(4.0))", VALUE),
    ("einsum_matmul", "out = torch.einsum('ij,jk->ik', torch.tensor(a), torch.tensor(b))",
     VALUE),
    ("einsum_batched", "q = torch.tensor(seq)\nh = torch.tensor(img)\n"
     "out = (torch.einsum('bqd,bkd->bqk', q, q), "
     "torch.einsum('bhqd,bhkd->bhqk', h, h) / 8 ** 0.5)", VALUE),
    ("einsum_trace_dot", "x = torch.tensor(a)[:, :4]\n"
     "out = (torch.einsum('ii->', x), torch.einsum('i,i->', x[0], x[1]), "
     "torch.einsum('ij->j', x))", VALUE),
    ("diag_diagonal", "x = torch.tensor(a)\n"
     "out = (torch.diag(torch.tensor([1.0, 2.0])), torch.diag(x), x.diagonal(), "
     "torch.diagonal(x, offset=1))", VALUE),
    ("tril_triu", "x = torch.tensor(a)\nout = (torch.tril(x), x.triu(1), torch.tril(x, -1))",
     VALUE),
    ("linalg_norm", "x = torch.tensor(a)\n"
     "out = (torch.linalg.norm(x), torch.linalg.norm(x, dim=1))", VALUE),
    ("linalg_vector_norm", "x = torch.tensor(a)\n"
     "out = (torch.linalg.vector_norm(x, ord=1, dim=0), torch.linalg.vector_norm(x))", VALUE),
    ("tensor_norm_dim", "x = torch.tensor(a)\n"
     "out = (x.norm(dim=1), x.norm(), x.norm(p=1, dim=0))", VALUE),
    # -- comparisons and logic -----------------------------------------------------------------
    ("accuracy", "pred = torch.tensor(a).argmax(dim=1)\ny = torch.tensor(labels)\n"
     "out = ((pred == y).float().mean(), (pred == y).sum().item())", VALUE),
    ("compare_logic", "x = torch.tensor(a)\n"
     "out = (x != 0, x < 0.5, x >= x.mean(), 0.0 > x, (x > 0) & (x < 1), "
     "(x < -1) | (x > 1), ~(x > 0))", VALUE),
    ("any_all", "x = torch.tensor(a)\n"
     "out = ((x > 0).any(), (x > -5).all(), (x > 0).all(dim=1), torch.any(x > 2, dim=0))",
     VALUE),
    ("isnan_allclose_equal", "x = torch.tensor([1.0, float('nan'), float('inf')])\n"
     "y = torch.tensor(a)\nout = (torch.isnan(x), x.isinf(), torch.isfinite(x), "
     "torch.allclose(y, y + 1e-9), torch.equal(y, y.clone()), torch.equal(y, y + 1))", VALUE),
    ("item", "x = torch.tensor(a)\n"
     "out = (x.sum().item(), x[0, 0].item(), torch.tensor(3).item())", VALUE),
    # -- autograd ------------------------------------------------------------------------------
    ("backward_grad", "x = torch.tensor(a, requires_grad=True)\n(x ** 2).sum().backward()\n"
     "out = x.grad", VALUE),
    ("grad_accumulates", "x = torch.tensor(a, requires_grad=True)\n"
     "for _ in range(2):\n    (3 * x).sum().backward()\nout = x.grad", VALUE),
    ("backward_with_gradient", "x = torch.tensor(a, requires_grad=True)\ny = x.sin()\n"
     "y.backward(torch.ones_like(y))\nout = x.grad", VALUE),
    ("retain_grad", "x = torch.tensor(a, requires_grad=True)\ny = x * 2\ny.retain_grad()\n"
     "(y ** 2).sum().backward()\nout = (y.grad, x.grad)", VALUE),
    ("no_grad", "x = torch.tensor(a, requires_grad=True)\n"
     "with torch.no_grad():\n    y = x * 2\n"
     "out = (y.requires_grad, (x * 2).requires_grad, torch.is_grad_enabled())", VALUE),
    ("detach", "x = torch.tensor(a, requires_grad=True)\n"
     "out = (x.detach().requires_grad, x.detach() * 2, x.is_leaf, (x * 2).is_leaf)", VALUE),
    ("requires_grad_", "x = torch.tensor(a).requires_grad_()\n"
     "out = (x.requires_grad, x.requires_grad_(False).requires_grad)", VALUE),
    ("autograd_grad", "x = torch.tensor(a, requires_grad=True)\n"
     "g, = torch.autograd.grad((x ** 3).sum(), x)\nout = (g, x.grad is None)", VALUE),
    ("second_derivative", "x = torch.tensor(a, requires_grad=True)\n"
     "g, = torch.autograd.grad((x ** 3).sum(), x, create_graph=True)\n"
     "g2, = torch.autograd.grad(g.sum(), x)\nout = (g, g2)", VALUE),
    ("grad_reset", "x = torch.tensor(a, requires_grad=True)\nx.sum().backward()\n"
     "x.grad = None\n(2 * x).sum().backward()\nfirst = x.grad.clone()\n"
     "x.grad.zero_()\nout = (first, x.grad)", VALUE),
    ("manual_sgd_update", "w = torch.tensor(a, requires_grad=True)\n(w ** 2).sum().backward()\n"
     "with torch.no_grad():\n    w -= 0.1 * w.grad\nout = (w, w.requires_grad)", VALUE),
    # -- in place --------------------------------------------------------------------------
    ("add_mul_iadd", "x = torch.tensor(a)\nx.add_(1.0)\nx.mul_(2)\n"
     "x += torch.ones(5)\nx *= 0.5\nout = x", VALUE),
    ("clamp_zero_fill_", "x = torch.tensor(a)\nx.clamp_(-0.1, 0.1)\n"
     "y = torch.ones(3)\ny.zero_()\nout = (x, y, torch.empty(2).fill_(4.0))", VALUE),
    ("copy_", "x = torch.zeros(4, 5)\nx.copy_(torch.tensor(a))\nout = x", VALUE),
    # -- random numbers -----------------------------------------------------------------------
    ("manual_seed_repeats", "torch.manual_seed(1)\nr1 = torch.randn(3)\ntorch.manual_seed(1)\n"
     "out = torch.equal(r1, torch.randn(3))", VALUE),
    ("generator_seed", "g = torch.Generator().manual_seed(0)\n"
     "r1 = torch.randn(3, generator=g)\n"
     "g.manual_seed(0)\nout = torch.equal(r1, torch.randn(3, generator=g))", VALUE),
    ("randperm_sorted", "out = torch.randperm(10).sort().values", VALUE),
    # -- conversion -----------------------------------------------------------------------
    ("numpy", "x = torch.tensor(a, requires_grad=True)\n"
     "out = (x.detach().numpy(), x.detach().cpu().numpy().shape)", VALUE),
    ("tolist_float_int_len", "x = torch.tensor(a)\n"
     "out = (x.tolist(), torch.arange(3).tolist(), float(x.sum()), int(torch.tensor(7)), "
     "len(x), float(x[1, 2]))", VALUE),
    ("iterate_rows", "out = [row.sum() for row in torch.tensor(a)]", VALUE),
    ("new_factories", "x = torch.tensor(a).double()\n"
     "out = (x.new_zeros(2, 3), x.new_ones((2,)), x.new_full((2, 2), 3.0), "
     "x.new_tensor([1.0, 2.0]))", VALUE),
    ("clone", "x = torch.tensor(a)\ny = x.clone()\ny[0] = 0\nout = (x, y)", VALUE),
    # -- torch.nn.functional on tensors ----------------------------------------------------------
    ("F_activations", "x = torch.tensor(a)\n"
     "out = (F.relu(x), x.relu(), torch.relu(x), F.leaky_relu(x, 0.2), F.silu(x), "
     "F.softplus(x), F.elu(x), torch.tanh(x))", VALUE),
    ("F_softmax", "x = torch.tensor(a)\nout = (F.softmax(x, dim=1), x.softmax(dim=-1))", VALUE),
    ("F_log_softmax", "out = F.log_softmax(torch.tensor(a), dim=1)", VALUE),
    ("F_cross_entropy", "x = torch.tensor(a)\ny = torch.tensor(labels)\n"
     "out = (F.cross_entropy(x, y), F.cross_entropy(x, y, reduction='sum'), "
     "F.nll_loss(F.log_softmax(x, dim=1), y), F.cross_entropy(x, y, label_smoothing=0.1))",
     VALUE),
    ("F_mse_loss", "x = torch.tensor(a)\n"
     "out = (F.mse_loss(x, torch.zeros_like(x)), F.l1_loss(x, x.flip(0), reduction='none'))",
     VALUE),
    ("F_one_hot", "out = (F.one_hot(torch.tensor(labels), num_classes=6), "
     "F.one_hot(torch.tensor([0, 2])))", VALUE),
    ("F_pad", "x = torch.tensor(img)\n"
     "out = (F.pad(x, (1, 1, 2, 0)), F.pad(torch.tensor(a), (0, 2), value=-1.0))", VALUE),
    ("F_normalize", "x = torch.tensor(a)\n"
     "out = (F.normalize(x, dim=1), F.normalize(x, p=1, dim=0))", VALUE),
    ("F_interpolate", "x = torch.tensor(img)\n"
     "out = (F.interpolate(x, scale_factor=2, mode='nearest'), "
     "F.interpolate(x, size=(4, 4), mode='bilinear', align_corners=False))", VALUE),
    ("F_scaled_dot_product_attention", "q = torch.tensor(img)\n"
     "out = F.scaled_dot_product_attention(q, q, q, is_causal=True)", VALUE),
    ("F_gelu_tanh", "x = torch.tensor(a)\nout = (F.gelu(x), F.gelu(x, approximate='tanh'))",
     VALUE),
    ("F_dropout_eval", "out = F.dropout(torch.tensor(a), p=0.5, training=False)", VALUE),
    ("F_dropout_train", "y = F.dropout(torch.ones(100, 10), p=0.5)\n"
     "out = (y.shape, bool(((y == 0) | (y == 2)).all()))", VALUE),
    ("F_cosine_similarity", "x = torch.tensor(a)\n"
     "out = (F.cosine_similarity(x, x.flip(0), dim=1), "
     "F.cosine_similarity(x[0], x[1], dim=0))", VALUE),
    ("F_binary_cross_entropy", "x = torch.tensor(a)\np = torch.sigmoid(x)\n"
     "t = (x > 0).float()\n"
     "out = (F.binary_cross_entropy(p, t), F.binary_cross_entropy_with_logits(x, t))", VALUE),
    ("F_kl_div", "x = torch.tensor(a)\nout = F.kl_div(F.log_softmax(x, dim=1), "
     "F.softmax(x.flip(0), dim=1), reduction='batchmean')", VALUE),
    ("F_group_norm", "out = F.group_norm(torch.tensor(img)[:, :2], num_groups=2)", VALUE),
    ("F_adaptive_avg_pool2d", "x = torch.tensor(img)\n"
     "out = (F.adaptive_avg_pool2d(x, (1, 1)), F.adaptive_avg_pool2d(x, 3))", VALUE),
    ("F_pixel_shuffle", "out = F.pixel_shuffle(torch.arange(32.0).view(1, 8, 2, 2), 2)", VALUE),
    ("F_max_avg_pool2d", "x = torch.tensor(img)\n"
     "out = (F.max_pool2d(x, 2), F.avg_pool2d(x, kernel_size=2, stride=2))", VALUE),
    ("F_linear_conv2d", "x = torch.tensor(img)\nw = torch.ones(4, 3, 3, 3) / 27\n"
     "out = (F.conv2d(x, w, padding=1), F.linear(torch.tensor(a), torch.tensor(b).T))", VALUE),
]
