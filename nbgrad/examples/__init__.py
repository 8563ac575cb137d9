"""Runnable examples: ``python -m nbgrad.examples NAME [options]`` (``--help`` lists them)."""
