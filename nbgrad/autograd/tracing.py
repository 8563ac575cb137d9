"""The switch ``nb.compile`` traces through (``nbgrad/compiler/trace.py``).

While a function is traced, ``recorder`` is its ``Recorder``, and the core hands it every
call that leaves or enters the op table: an op's ``apply``, ``backward`` and ``grad``, an
optimiser's ``step`` and ``zero_grad``, and the events a replay could not repeat -- a
value read into Python (``item``, ``bool``, ``numpy``, ``tolist``), an in-place write, a
random draw, a gradient set by hand, a tensor cut from the graph (``detach``, ``.data``,
``astype``). Otherwise it is None and each site costs one comparison.

``mode_epoch`` counts ``Module.train()`` / ``eval()`` calls: a compiled program is
specialised on the modules' modes, so a change of mode makes it trace again.
"""

from typing import Any

recorder: Any = None
mode_epoch = 0


def modes_changed() -> None:
    """Count a change of a module's training mode."""
    global mode_epoch
    mode_epoch += 1
