"""nbgrad vs PyTorch CPU on the workloads the issues name (``python -m benchmarks``)."""
