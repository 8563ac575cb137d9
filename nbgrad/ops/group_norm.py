"""Group and instance normalisation."""

__all__: list[str] = []
