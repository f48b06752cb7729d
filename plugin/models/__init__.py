"""Model architectures this plugin brings to vLLM (through ``ModelRegistry``), where vLLM's own cannot run."""
