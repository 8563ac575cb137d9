"""The Numba runtime under nbgrad's kernels (docs/architecture.md):

* ``startup``: what ``import nbgrad`` sets before anything compiles (malloc, vector
  width, the collector paused while Numba's tables load);
* ``threads``: the size of Numba's thread pool, ``nb.set_num_threads``;
* ``jit``: the compile presets every kernel is declared with, the serial/parallel policy
  (``for_work``) and ``compiled_once``;
* ``cache``: Numba's disk cache, checked against damaged and mismatched files;
* ``notices``: the notice of a long first-use compile, and a record of compile times;
* ``compile_ahead``: the helper process that compiles backward kernels while the forward
  pass goes on; the core reaches it through one object, ``compile_hook``.

Nothing here imports from nbgrad above ``runtime``; importing the package imports none of
its modules, so ``startup`` can act before Numba loads."""
