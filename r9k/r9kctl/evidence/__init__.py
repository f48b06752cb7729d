"""Evidence for default changes: gates (``gate``, ``pairs``, ``junit``), paired evaluations (``dataset``,
``record``, ``results``, ``mcnemar``, ``quality``) and bisects (``bisect``); imported lazily by the commands.
"""
