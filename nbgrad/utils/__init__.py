"""``nbgrad.utils.data``: ``nbgrad.data`` under PyTorch's path (``torch.utils.data``), so
that ``from torch.utils.data import DataLoader`` ports by its import line alone."""
