"""Vector and matrix norms under torch.linalg's names."""

__all__: list[str] = []
