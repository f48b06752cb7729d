"""The ``out=`` convention of every op: the result written into the caller's tensor, which is returned."""
from __future__ import annotations


def into(out, value):
    """``value`` copied into ``out`` and ``out`` returned; ``value`` itself when ``out`` is None."""
    if out is None:
        return value
    out.copy_(value)
    return out
