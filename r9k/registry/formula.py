"""Memory formulas: bytes a GPU as an expression of a model's dims, the TP size and knob values.

A formula is parsed once (a syntax error is a located schema error of the variant file) and evaluated by
walking its tree: arithmetic, comparisons, ``a if c else b``, names and a few functions; nothing else.
"""
from __future__ import annotations

import ast
import math
import operator
from functools import lru_cache


class FormulaError(ValueError):
    pass


_FUNCS = {"max", "min", "knob", "on", "sizes_max", "num", "ceil"}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_ORDER = {ast.Gt: operator.gt, ast.Lt: operator.lt, ast.GtE: operator.ge, ast.LtE: operator.le}


class Formula:
    """A memory formula: arithmetic over names (the model's dims, ``tp``, ``value``), comparisons,
    ``a if c else b`` and ``knob(NAME)``, ``on(NAME)``, ``sizes_max(v, default)``, ``num(v, default)``,
    ``max``, ``min``, ``ceil``. Nothing else is evaluated."""

    def __init__(self, text: str, where: str = "formula"):
        self.text, self.where = text, where
        try:
            self.tree = ast.parse(text, mode="eval")
        except SyntaxError as exc:
            raise FormulaError(f"{where}: not an expression: {exc.msg}") from None
        for node in ast.walk(self.tree):
            ok = isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp,
                                   ast.Constant, ast.Name, ast.Load, ast.Call, ast.operator, ast.unaryop,
                                   ast.cmpop, ast.boolop))
            if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _FUNCS):
                ok = False
            if not ok:
                raise FormulaError(f"{where}: '{ast.unparse(node) if hasattr(node, 'lineno') else text}' is not "
                                   "allowed in a memory formula")

    @staticmethod
    def env(model, tp: int, values: Mapping[str, Optional[str]], variants: Mapping) -> dict:
        names: dict = {"tp": tp}
        names.update(model.dims)
        for k, expr in model.derived.items():  # in order: a derived quantity may use the ones above it
            names[k] = parsed(expr, f"{model.name}.derived.{k}").eval(names, None, values, variants)
        return {"names": names, "values": values, "variants": variants}

    def bytes(self, env: dict, value: Optional[str]) -> float:
        return float(self.eval(env["names"], value, env["values"], env["variants"]))

    def eval(self, names: dict, value, values, variants):
        def num(v, default=0):
            if v is None or v == "":
                return default
            if isinstance(v, (int, float)):
                return v
            try:
                return float(v)
            except ValueError:
                return v  # a string value (compared with ==)

        def knob(name):
            return num(values.get(name))

        def on(name):
            v = values.get(name)
            var = variants.get(name)
            stock = var.stock if var is not None else None
            return 0 if v is None or v == stock or v in ("", "0", "stock") else 1

        def sizes_max(v, default=0):
            parts = [p for p in str(v or "").split(",") if p.strip()]
            return max((float(p) for p in parts), default=default)

        funcs = {"max": max, "min": min, "knob": knob, "on": on, "sizes_max": sizes_max, "num": num,
                 "ceil": math.ceil}
        scope = dict(names)
        scope["value"] = num(value)

        def ev(n):
            if isinstance(n, ast.Expression):
                return ev(n.body)
            if isinstance(n, ast.Constant):
                return n.value
            if isinstance(n, ast.Name):
                if n.id not in scope:
                    raise FormulaError(f"{self.where}: unknown name '{n.id}' (known: {', '.join(sorted(scope))})")
                return scope[n.id]
            if isinstance(n, ast.BinOp):
                a, b = ev(n.left), ev(n.right)
                return _BINARY[type(n.op)](a, b)
            if isinstance(n, ast.UnaryOp):
                return _UNARY[type(n.op)](ev(n.operand))
            if isinstance(n, ast.Compare):
                left = ev(n.left)
                for op, right in zip(n.ops, n.comparators):
                    r = ev(right)
                    if isinstance(op, (ast.Eq, ast.NotEq)):
                        ok = (left == r) == isinstance(op, ast.Eq)
                    elif isinstance(left, (int, float)) and isinstance(r, (int, float)):
                        ok = _ORDER[type(op)](left, r)
                    else:
                        raise FormulaError(f"{self.where}: cannot order {left!r} and {r!r}")
                    if not ok:
                        return 0
                    left = r
                return 1
            if isinstance(n, ast.BoolOp):
                vals = [ev(x) for x in n.values]
                return int(all(vals)) if isinstance(n.op, ast.And) else int(any(vals))
            if isinstance(n, ast.IfExp):
                return ev(n.body) if ev(n.test) else ev(n.orelse)
            if isinstance(n, ast.Call):
                return funcs[n.func.id](*[ev(a) for a in n.args])
            raise FormulaError(f"{self.where}: cannot evaluate {ast.dump(n)}")

        out = ev(self.tree)
        if isinstance(out, str):
            raise FormulaError(f"{self.where}: gives the string {out!r}, not a number of bytes")
        return out


@lru_cache(maxsize=512)
def parsed(text: str, where: str = "formula") -> Formula:
    """A formula, parsed once per text."""
    return Formula(text, where)
