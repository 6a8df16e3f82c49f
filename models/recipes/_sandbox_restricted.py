"""The restricted run of a sandbox child (:mod:`_sandbox_worker`; loaded by path, imports nothing of
Agora): RestrictedPython's policy, a small set of built-ins, an import hook that admits only the
allowed modules, a guarded ``getattr``, and a ``print`` that collects at most ``output_bytes``.
"""

from __future__ import annotations

import ast
import string
import types

import _string
from RestrictedPython import RestrictingNodeTransformer
from RestrictedPython.Eval import default_guarded_getitem, default_guarded_getiter
from RestrictedPython.Guards import (guarded_iter_unpack_sequence, guarded_unpack_sequence, safe_builtins,
                                     safer_getattr)

_BUILTIN_NAMES = ("abs", "all", "any", "bin", "bool", "chr", "complex", "dict", "divmod", "enumerate", "filter",
                  "float", "format", "frozenset", "hash", "hex", "int", "isinstance", "issubclass", "iter", "len",
                  "list", "map", "max", "min", "next", "oct", "ord", "pow", "range", "repr", "reversed", "round",
                  "set", "slice", "sorted", "str", "sum", "tuple", "zip", "object", "property", "staticmethod",
                  "classmethod", "callable", "ascii", "bytes", "bytearray", "super")


class _OutputLimit(Exception):
    pass


class _Printer:
    """RestrictedPython's ``_print_``: collects printed text, at most ``cap`` bytes."""

    def __init__(self, cap: int):
        self.parts: list[str] = []
        self.size, self.cap, self.over = 0, cap, False

    def __call__(self, _getattr_=None) -> "_Printer":  # one collector per program (and per function)
        return self

    def write(self, text: str) -> None:
        self.size += len(text.encode("utf-8", "replace"))
        if self.size > self.cap:
            self.over = True
            raise _OutputLimit(f"the program printed more than {self.cap} bytes")
        self.parts.append(text)

    def _call_print(self, *objects, **kwargs) -> None:
        kwargs.pop("file", None)
        print(*objects, file=self, **kwargs)


def _importer(allowed: frozenset[str]):
    real = __import__

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level != 0 or name.split(".")[0] not in allowed:
            raise ImportError(f"import of {name!r} is not allowed (allowed: {', '.join(sorted(allowed))})")
        module = real(name, globals, locals, fromlist, level)
        for item in fromlist or ():
            if item == "*":
                continue
            value = getattr(module, item, None)
            if isinstance(value, types.ModuleType) and value.__name__.split(".")[0] not in allowed:
                raise ImportError(f"{name}.{item} is the module {value.__name__!r}, which is not allowed")
        return module

    return guarded_import


class _SafeFormatter(string.Formatter):
    """``str.format`` whose fields go through the guarded ``getattr``/item access (RestrictedPython
    refuses ``str.format`` outright, since ``"{0.__class__}".format(x)`` would reach private
    attributes; programs format numbers with it)."""

    def __init__(self, guarded_getattr):
        self.guarded_getattr = guarded_getattr

    def get_field(self, field_name, args, kwargs):
        first, rest = _string.formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, key in rest:
            obj = self.guarded_getattr(obj, key) if is_attr else default_guarded_getitem(obj, key)
        return obj, first


def _getattr_guard(allowed: frozenset[str]):
    def guarded_getattr(obj, name, default=None):
        if isinstance(obj, str) and name in ("format", "format_map"):
            formatter = _SafeFormatter(guarded_getattr)
            if name == "format":
                return lambda *args, **kwargs: formatter.vformat(obj, args, kwargs)
            return lambda mapping: formatter.vformat(obj, (), mapping)
        value = safer_getattr(obj, name, default)
        if isinstance(value, types.ModuleType) and value.__name__.split(".")[0] not in allowed:
            raise AttributeError(f"{name!r} is the module {value.__name__!r}, which is not allowed")
        return value

    return guarded_getattr


def _inplacevar(op: str, x, y):
    ops = {"+=": lambda: x + y, "-=": lambda: x - y, "*=": lambda: x * y, "/=": lambda: x / y,
           "//=": lambda: x // y, "%=": lambda: x % y, "**=": lambda: x ** y, "<<=": lambda: x << y,
           ">>=": lambda: x >> y, "|=": lambda: x | y, "^=": lambda: x ^ y, "&=": lambda: x & y,
           "@=": lambda: x @ y}
    if op not in ops:
        raise SyntaxError(f"operator {op} is not allowed")
    return ops[op]()


class _Policy(RestrictingNodeTransformer):
    """RestrictedPython's policy, with ``x[i] += y`` and ``obj.a += y`` read as ``x[i] = x[i] + y``
    (RestrictedPython refuses augmented assignment of items and attributes; programs count with it)."""

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        if isinstance(node.target, (ast.Subscript, ast.Attribute)):
            load = ast.parse(ast.unparse(node.target), mode="eval").body
            assign = ast.Assign(targets=[node.target], value=ast.BinOp(left=load, op=node.op, right=node.value))
            ast.copy_location(assign, node)
            ast.fix_missing_locations(assign)
            return self.visit(assign)
        return super().visit_AugAssign(node)


def _restricted_globals(printer: _Printer, allowed: frozenset[str]) -> dict:
    import builtins

    names = dict(safe_builtins)
    names.update({n: getattr(builtins, n) for n in _BUILTIN_NAMES if hasattr(builtins, n)})
    for n in ("open", "compile", "eval", "exec", "globals", "locals", "vars", "dir", "input", "breakpoint",
              "memoryview", "help", "setattr", "delattr", "getattr"):
        names.pop(n, None)
    guarded_getattr = _getattr_guard(allowed)
    names["__import__"] = _importer(allowed)
    names["getattr"] = guarded_getattr
    names["hasattr"] = lambda obj, name: not name.startswith("_") and hasattr(obj, name)
    return {"__builtins__": names, "__name__": "__main__", "__metaclass__": type,
            "_print_": printer, "_getattr_": guarded_getattr, "_getitem_": default_guarded_getitem,
            "_getiter_": default_guarded_getiter, "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
            "_unpack_sequence_": guarded_unpack_sequence, "_write_": lambda ob: ob, "_inplacevar_": _inplacevar,
            "_apply_": lambda f, *a, **k: f(*a, **k)}


class _RestrictedSympyEval:
    """A replacement for ``sympy.parsing.sympy_parser.eval_expr`` in the child: sympy turns a string
    (``sympify("...")``, ``parse_expr``, any sympy function given a string) into Python code and
    ``eval``s it, which would hand back what RestrictedPython takes away (``__import__('os')``). Here
    that code is compiled by RestrictedPython too (no name or attribute with a leading ``_``) and run
    with the program's guarded built-ins and hooks. A code object (``evaluate=False``) is refused."""

    def __init__(self, restricted: dict):
        self.restricted = restricted

    def __call__(self, code, local_dict, global_dict):
        from RestrictedPython import compile_restricted

        if not isinstance(code, str):
            raise ValueError("sympy parsing with evaluate=False is not available in the sandbox")
        compiled = compile_restricted(code, filename="<sympy string>", mode="eval", policy=_Policy)
        import builtins

        allowed = self.restricted["__builtins__"]
        # sympy copies Python's built-in functions (open, eval, exec...) into its parser's globals:
        # only those the program has stay
        env = {k: v for k, v in global_dict.items()
               if not k.startswith("_") and (k not in vars(builtins) or allowed.get(k) is v)}
        env.update({k: v for k, v in self.restricted.items() if k.startswith("_")})
        return eval(compiled, env, local_dict)  # noqa: S307 - restricted code, in the limited child


def _route_sympy(restricted: dict) -> None:
    """Route the child's library paths back to the restricted policy: sympy's string evaluation (when
    sympy is loaded), ``lambdify``'s names, ``operator.attrgetter``/``methodcaller``."""
    import sys

    parser = sys.modules.get("sympy.parsing.sympy_parser")
    if parser is not None:
        parser.eval_expr = _RestrictedSympyEval(restricted)
    _route_lambdify()
    _route_operator()


def _checked_lambdify(original):
    """``sympy.lambdify`` for the child: it ``exec``s code printed from the expression, so a symbol or
    function named ``__import__('os')...`` would run; names must be plain identifiers without a
    leading ``_``, and a program's own ``printer`` is refused."""

    def lambdify(args, expr, *rest, **kwargs):
        import keyword

        import sympy
        from sympy.core.function import AppliedUndef

        if rest[2:3] or "printer" in kwargs:
            raise ValueError("lambdify with a printer of the program's is not available in the sandbox")
        for item in (args, expr):
            for obj in sympy.preorder_traversal(sympy.sympify(item)) if not isinstance(item, (list, tuple)) else [
                    a for it in item for a in sympy.preorder_traversal(sympy.sympify(it))]:
                name = getattr(obj, "name", None) if isinstance(obj, sympy.Symbol) else (
                    type(obj).__name__ if isinstance(obj, AppliedUndef) else None)
                if name is not None and (not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_")):
                    raise ValueError(f"lambdify of the name {name!r} is not allowed in the sandbox")
        return original(args, expr, *rest, **kwargs)

    return lambdify


def _route_lambdify() -> None:
    import sys

    for name in ("sympy", "sympy.utilities", "sympy.utilities.lambdify"):
        module = sys.modules.get(name)
        if module is not None and callable(getattr(module, "lambdify", None)):
            if not hasattr(module.lambdify, "__wrapped_by_sandbox__"):
                wrapped = _checked_lambdify(module.lambdify)
                wrapped.__wrapped_by_sandbox__ = True
                module.lambdify = wrapped


def _route_operator() -> None:
    """``operator.attrgetter('__class__')`` and ``methodcaller('__reduce_ex__', 2)`` reach what
    RestrictedPython's attribute rule refuses; in the child they refuse names with a leading ``_``
    (in any dotted part)."""
    import operator

    attrgetter, methodcaller = operator.attrgetter, operator.methodcaller
    if getattr(attrgetter, "__sandboxed__", False):
        return

    def check(name):
        if not isinstance(name, str) or any(part.startswith("_") for part in name.split(".")):
            raise AttributeError(f"{name!r} is an invalid attribute name because it starts with \"_\"")

    def guarded_attrgetter(*names):
        for name in names:
            check(name)
        return attrgetter(*names)

    def guarded_methodcaller(name, *args, **kwargs):
        check(name)
        return methodcaller(name, *args, **kwargs)

    guarded_attrgetter.__sandboxed__ = True
    operator.attrgetter, operator.methodcaller = guarded_attrgetter, guarded_methodcaller
