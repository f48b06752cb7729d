"""The decode step: one TP4 rank of Qwen3.8-Flash-Next at decode, built from the project's ops, and its
benchmark per profile (``r9kctl bench decode-step``, ``r9kctl gate --pairs``): :mod:`.config` (dimensions),
:mod:`.dispatch` (choosing implementations), :mod:`.model`, :mod:`.run` and :mod:`.report` (the benchmark).
"""
