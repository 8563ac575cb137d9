"""Scaled dot-product attention (PyTorch's F.scaled_dot_product_attention)."""

__all__: list[str] = []
