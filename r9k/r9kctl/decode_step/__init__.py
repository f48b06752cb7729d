"""The decode step: one TP4 rank of Qwen3.8-Flash-Next at decode, built from the project's ops, and its
benchmark per profile (``r9kctl bench decode-step``, ``r9kctl gate --pairs``).

* :mod:`.config`   dimensions (Flash-Next TP4 rank; a tiny configuration for CPU tests);
* :mod:`.dispatch` choosing each op's implementation once from a resolved profile;
* :mod:`.model`    synthetic weights, the per-profile model and the plain parts shared by every profile, its
  memory accounting;
* ``r9k.kernels._triton.launches``  launch counting (any machine) and CUDA-graph node counting (driver);
* :mod:`.run`, :mod:`.report`  the benchmark: plan (JSON), run, tables/release records.

No op is registered here (this package uses the op table, it adds nothing to it).
"""
