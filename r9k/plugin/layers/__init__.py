"""vLLM layer adapters: subclasses of vLLM's pluggable layers that route one fused op through the
dispatch table. Imported only in processes that build a model (see :mod:`r9k.plugin.install`)."""
