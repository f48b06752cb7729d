"""Evidence for default changes: gates, paired evaluations and bisects.

Modules (imported lazily by the ``r9kctl`` commands, so ``r9kctl --help`` stays cheap):

``results``   the per-question result file format (JSONL) and its reader / writer.
``mcnemar``   paired comparison of two result files: accuracies, discordant counts, exact McNemar p,
              a confidence interval for the accuracy difference, identical-output share.
``dataset``   question sets (the native format, GSM8K and HumanEval files) and their graders.
``record``    runs a question set against an OpenAI-compatible server at concurrency 1.
``gate``      runs declared gate tests through pytest and records them in the ledger
              (``r9k.registry.ledger``).
``bisect``    plans / drives the search for the knob that moved a result between two profiles.
``quality``   appends a comparison as a quality record to a release file (TOML, comments kept).
"""
