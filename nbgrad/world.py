"""Which process of a data-parallel job this one is: ``nbgrad.distributed.init`` records
it here and ``DistributedSampler`` takes its defaults from here, so the data layer never
imports the MPI layer."""

from __future__ import annotations


class _Job:
    size: int | None = None  # None: not part of a distributed job
    rank: int = 0


job = _Job()
