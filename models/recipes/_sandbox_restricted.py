"""The restricted run of a sandbox child (:mod:`_sandbox_worker`; loaded by path, imports nothing of
Agora): RestrictedPython's policy, a small set of built-ins, an import hook that admits only the
allowed modules, a guarded ``getattr``, a guarded write, and a ``print`` that collects at most
``output_bytes``.

sympy: an allow-list, not a deny-list. A program may hold a sympy module, function or class only
when it comes from :data:`SYMPY_PACKAGES` / :data:`SYMPY_MODULES` (the mathematics: core, numbers,
functions, polys, solvers, simplify, matrices, ntheory, combinatorics, sets, series, integrals,
calculus, concrete, stats, geometry, logic, printing to strings...). Everything else of sympy
(``lambdify``'s module, ``printing.preview``, ``interactive.session``, ``testing``, ``plotting``,
``external``, ``utilities.autowrap``/``pkgdata``/``runtests``/``source``, ``parsing.latex`` and the
other parsers, ``physics``, ``codegen`` where Landlock does not confine writes...) is unreachable,
whatever path leads to it. The check is on *what the program gets*, not on how it asked, since the
paths are many (``import a.b``, ``from a import b``, ``from a import *``, ``a.b``, ``getattr``,
``str.format`` fields, ``operator.attrgetter``): the guarded ``getattr`` and the import hook hand
back a value only after :func:`_refused` has judged it: a module by its name; a function, class,
method or other callable by its ``__module__`` (the module that defined it, which sympy's
re-exports keep: ``sympy.preview`` is ``sympy.printing.preview``'s, hence refused). ``from m
import *`` gets a copy of ``m`` with only the names that pass. A from-import needs no holdable
``m`` (the program gets the names, not ``m``) unless a name is data (a table has no module of its own,
so it is judged by ``m``); a plain ``import a.b`` binds ``a.b`` (``as``) and needs it. What a call
returns, and what a table holds, no hook sees: the sandbox's importers return only holdable modules,
and a test scans the holdable modules' tables.

Why not a proxy module per sympy module: a proxy must also wrap every sympy object's attributes
(``x.func``, ``Matrix.applyfunc``, a class's methods), that is re-implement the guarded ``getattr``;
and sympy's own code would see proxies where it expects modules. RestrictedPython already routes
every attribute read of the program through ``_getattr_`` (and refuses names starting with ``_``
and frame/code attributes like ``gi_frame``, ``f_globals``, ``co_code`` at compile time and in
``getattr``): one check there covers every path.

RestrictedPython leaves attribute *writes* to the ``_write_`` hook; it was the identity, so a
program could ``del sympy.parsing.ast_parser.compile`` (the sandbox's replacement) and have sympy
compile its string with the interpreter's own ``compile``. :func:`_write_guard` refuses writing or
deleting attributes of modules, of classes and functions the program did not define, and of the
sandbox's own routing objects; items (``m[0, 0] = 1``) and the program's own objects stay writable.

A name the sandbox checks (an attribute's, a dict key that would become a variable, a module's)
must be a plain ``str`` (:func:`_plain`): a subclass, easy to make with a reachable metaclass
(``numbers.ABCMeta('S', (str,), {...})``), answers ``startswith``, ``split``, ``==`` and ``'__' +
name`` with the program's code, so it can pass a check and name something else where it is used.
The root of that class is closed for ``class`` statements (:func:`_guarded_build_class`): no
metaclass, no metaclass of the program's, no subclass of a built-in value type with attributes of
its own; and for calls of a metaclass written in Python (``numbers.ABCMeta('S', (str,), {...})``,
sympy's ``FunctionClass``): each checks the same before the class exists (:func:`_route_metaclasses`).
``type`` itself, which no hook can wrap (its ``__new__`` cannot be replaced), is never the
program's value, though library code hands it out (``collections.Counter.copy(int)`` is
``int.__class__(int)``, ``sympy.Basic.func.fget(int)`` is ``int.__class__``): the second pass of
the policy (:class:`_CallResults`) checks every call's result, loop variable, parameter, decorator
result, ``with`` target and received ``yield`` value, and the item and unpacking hooks check theirs.
What the program never holds, C code could still pass along (``itertools.starmap(operator.call,
[list(map(Counter.copy, [int])) + [...]])`` called ``type`` with arguments of the program's): so
``type`` is also refused where it comes from. Its origins in a program's reach are library
functions that expect an instance and are given a class (``Counter.copy``, ``UserList.copy``,
the getter of ``sympy.Basic.func``: a scan of every function and method of the holdable modules
and their tables, called with classes, found no others), and the guarded ``getattr`` hands out a
library's Python function read from anything but a module (a class, a property, a super object)
with its result checked, whoever calls it (:func:`_result_checked`); the unpacked arguments of a
``f(*args)`` call are checked too. The checks where names are used stay, as the last defence.

``sympify``/``parse_expr`` of a string stay: sympy turns the string into Python code and
``eval``s it, and here that code is compiled by RestrictedPython with the program's built-ins and
hooks (:class:`_RestrictedSympyEval`): the string can do no more than the program itself could, and
models write ``sympify("x**2 - 4")`` and ``solve("x**2 - 4")`` often.
"""

from __future__ import annotations

import ast
import collections
import operator
import re
import string
import types

import _string
from RestrictedPython import RestrictingNodeTransformer
from RestrictedPython.Eval import default_guarded_getitem, default_guarded_getiter
from RestrictedPython.Guards import (guarded_unpack_sequence, safe_builtins,
                                     safer_getattr)

_BUILTIN_NAMES = ("abs", "all", "any", "bin", "bool", "chr", "complex", "dict", "divmod", "enumerate", "filter",
                  "float", "format", "frozenset", "hash", "hex", "int", "isinstance", "issubclass", "iter", "len",
                  "list", "map", "max", "min", "next", "oct", "ord", "pow", "range", "repr", "reversed", "round",
                  "set", "slice", "sorted", "str", "sum", "tuple", "zip", "object", "property", "staticmethod",
                  "classmethod", "callable", "ascii", "bytes", "bytearray", "super")


class _OutputLimit(Exception):
    pass


class _Printer:
    """RestrictedPython's ``_print_``: collects printed text, at most ``cap`` bytes. RestrictedPython
    calls it once per program and per function for their collector (:class:`_PrintScope`); the
    program never holds the printer itself."""

    def __init__(self, cap: int):
        self.parts: list[str] = []
        self.size, self.cap, self.over = 0, cap, False

    def __call__(self, _getattr_=None) -> "_PrintScope":
        return _PrintScope(self)

    def write(self, text: str) -> None:
        """Collect ``text`` (a ``str``, kept as a plain one). Raises ``TypeError`` for anything else
        (as a text file's ``write`` does), :class:`_OutputLimit` past the cap."""
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {str.__str__(type(text).__name__)}")
        text = str.__str__(text)  # a subclass's ``encode`` or ``__len__`` is no measure
        self.size += len(text.encode("utf-8", "replace"))
        if self.size > self.cap:
            self.over = True
            raise _OutputLimit(f"the program printed more than {self.cap} bytes")
        self.parts.append(text)

    def flush(self) -> None:  # ``print(..., flush=True)``: nothing is buffered
        return None

    def _call_print(self, *objects, **kwargs) -> None:
        kwargs.pop("file", None)
        print(*objects, file=self, **kwargs)


class _PrintScope:
    """The collector RestrictedPython keeps as ``_print`` (a name the program cannot write): its
    ``print(...)`` goes to the :class:`_Printer`, and ``printed`` (``_print()``) is the text printed
    so far, a ``str``. (The printer itself was ``printed``: a program could append a non-string to
    its parts, or raise its cap.)"""

    __slots__ = ("_printer",)

    def __init__(self, printer: _Printer) -> None:
        self._printer = printer

    def __call__(self) -> str:
        return "".join(self._printer.parts)

    def _call_print(self, *objects, **kwargs) -> None:
        self._printer._call_print(*objects, **kwargs)


class _Stdout:
    """The child's ``sys.stdout`` while the program runs (the worker sets it): what library code
    prints (``sympy.pprint``, mpmath's ``nprint``, ``re.DEBUG``) goes to the program's
    :class:`_Printer`, under its cap. Only ``write``, ``flush`` and ``encoding``; the printer is kept
    in a slot with a leading ``_``, out of the program's reach."""

    __slots__ = ("_printer",)
    encoding = "utf-8"

    def __init__(self, printer: _Printer) -> None:
        self._printer = printer

    def write(self, text: str) -> int:
        self._printer.write(text)
        return len(text)

    def flush(self) -> None:
        return None


#: Modules the C code of an allowed module imports when a program calls it, which the program itself
#: may not import: ``datetime``'s ``strftime`` and ``timetuple`` import ``time``, its ``strptime``
#: ``_strptime``. C code imports through the import hook of the running program's globals
#: (``PyImport_Import``) with a ``list`` as ``fromlist`` (empty; ``['__doc__']`` before Python
#: 3.11); an import statement passes ``None`` or a tuple, and a program cannot call the hook itself
#: (``__import__`` is a name RestrictedPython refuses). The module goes to the C code, not to the
#: program.
_C_IMPORTS = frozenset({"time", "_strptime"})

#: What ``from __future__ import ...`` may name (typed code starts with ``... import annotations``).
_FUTURE_FEATURES = frozenset(__import__("__future__").all_feature_names)


def _importer(allowed: frozenset[str]):
    real = __import__

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if (type(name) is str and name in _C_IMPORTS and type(fromlist) is list and fromlist in ([], ["__doc__"])
                and level == 0):
            return real(name, globals, locals, fromlist, level)
        if (type(name) is str and name == "__future__" and level == 0 and type(fromlist) is tuple and fromlist
                and all(type(item) is str and item in _FUTURE_FEATURES for item in fromlist)):
            # ``from __future__ import annotations``: a compiler directive; binds only the feature's
            # record (``_Feature``: its releases and flag), never the module
            return real(name, globals, locals, fromlist, level)
        if level != 0 or name.split(".")[0] not in allowed:
            raise ImportError(f"import of {name!r} is not allowed (allowed: {', '.join(sorted(allowed))})")
        for full in (name, *(f"{name}.{item}" for item in fromlist or () if isinstance(item, str))):
            if why := _closed_module(full):  # ``from sympy import testing`` too, before it loads
                raise ImportError(f"import of {full!r} is not allowed ({why})")
        # ``import a.b`` (``as c``) binds the module ``a.b``; ``from a.b import c`` binds only ``c``
        if not fromlist and (why := _library_refused(name)):
            raise ImportError(f"import of {name!r} is not allowed ({why})")
        module = real(name, globals, locals, fromlist, level)
        if fromlist and "*" in fromlist:
            return _star_view(module, allowed)
        for item in fromlist or ():
            # ``from m import x`` reads the attribute without the guarded getattr: the same checks here
            if why := _imported_refused(name, getattr(module, item, None), allowed):
                raise ImportError(f"{name}.{item} {why}")
        return module

    guarded_import.allowed_modules = allowed  # its own attribute: the program never holds this function
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


#: Modules whose functions and classes a program may not reach through an allowed module's
#: attributes (``sympy.utilities.autowrap.check_output`` is ``subprocess``'s, ``sympy.core.cache
#: .import_module`` is ``importlib``'s): their top-level names, C halves included. ``dataclasses``
#: (``sympy.integrals.manualintegrate.dataclass``) writes a class's field names into the source of the
#: methods it ``exec``s with the interpreter's built-ins: a field named ``"a,__import__('os')..."`` ran.
#: ``traceback``, ``dis`` and the debuggers and profilers hand out frames and code objects. ``xml``
#: (``sympy.printing.mathml``'s ``dom.implementation.createDOMBuilder``: a builder whose ``parseURI``
#: opens URLs through ``urllib``), ``codecs`` (``codecs.open``), ``logging`` (file handlers), the
#: compressed-file modules and the mail and network clients open files or connections.
_UNREACHABLE = frozenset({
    "os", "posix", "nt", "posixpath", "ntpath", "genericpath", "sys", "subprocess", "_posixsubprocess", "socket",
    "_socket", "shutil", "pathlib", "io", "_io", "importlib", "_frozen_importlib", "_frozen_importlib_external",
    "_imp", "zipimport", "pkgutil", "runpy", "ctypes", "_ctypes", "multiprocessing", "_multiprocessing",
    "threading", "_thread", "concurrent", "signal", "_signal", "resource", "pickle", "_pickle", "marshal", "shelve",
    "dbm", "tempfile", "glob", "fnmatch", "urllib", "http", "requests", "asyncio", "code", "codeop", "inspect",
    "gc", "pty", "select", "selectors", "mmap", "sqlite3", "types", "zipfile", "tarfile", "webbrowser",
    "linecache", "tokenize", "timeit", "site", "sysconfig", "faulthandler", "tracemalloc", "atexit", "fcntl", "termios",
    "platform", "dataclasses", "traceback", "dis", "pdb", "bdb", "trace", "profile", "cProfile", "xml", "xmlrpc",
    "pyexpat", "codecs", "logging", "gzip", "bz2", "lzma", "email", "mailbox", "smtplib", "ftplib", "poplib",
    "imaplib", "ssl", "_ssl"})


def _dangerous_builtins() -> frozenset[int]:
    """``id``s of the interpreter's own built-ins, and the types that make code and functions, that a
    program may never hold (a library module that keeps a reference to one hands it out as an attribute)."""
    import builtins
    import io

    import _operator

    names = ("open", "eval", "exec", "compile", "__import__", "globals", "locals", "vars", "dir", "input",
             "breakpoint", "getattr", "setattr", "delattr", "memoryview", "help", "exit", "quit", "type")
    made = (io.open, types.FunctionType, types.CodeType, types.CellType, types.FrameType, types.TracebackType,
            # ``type.mro`` unbound (``typing.Type.mro``, ``super(M, M).mro`` of a metaclass ``M``):
            # ``mro(numbers.ABCMeta)`` is a list that holds ``type``, which C code can call
            type.__dict__["mro"])
    # the originals of ``operator.attrgetter``/``methodcaller`` read any attribute (``'__class__'``); a child's
    # ``operator`` module holds guarded ones (:func:`_route_operator`), but sympy's modules keep the
    # originals (``sympy.core.add.attrgetter``)
    by_name = (_operator.attrgetter, _operator.methodcaller)
    return (frozenset(id(getattr(builtins, n)) for n in names if hasattr(builtins, n)) | {id(v) for v in made}
            | {id(v) for v in by_name})


_DANGEROUS = _dangerous_builtins()


#: ``typing``'s functions and classes a program may not hold, and why (the rest of ``typing``, what
#: annotations use, is a program's: ``List``, ``Optional``, ``TypeVar``, ``Generic``, ``cast``...).
_TYPING_REFUSED = {
    "get_type_hints": "it hands out annotations' objects, the built-in type among them",
    "get_origin": "get_origin(Type) is the built-in type", "get_args": "it hands out what an alias holds",
    "ForwardRef": "it evaluates a string", "final": "it writes onto what it is given",
    "no_type_check": "it writes onto what it is given", "no_type_check_decorator": "it writes onto what it is given",
    "runtime_checkable": "it writes onto what it is given", "dataclass_transform": "it writes onto what it is given",
    "get_overloads": "it hands out other modules' functions", "clear_overloads": "it empties a registry of typing's"}


def _refused_library_functions() -> dict[int, str]:
    """``id``s of library functions and classes of allowed modules that a program may not hold, and
    why: ``enum.global_enum`` writes an enum's members into the module its ``__module__`` names (any
    loaded module, the worker's own ``__main__``), ``enum.pickle_by_enum_name`` returns the
    interpreter's ``getattr``; ``typing``'s of :data:`_TYPING_REFUSED`."""
    import enum
    import typing

    whys = {"global_enum": "it writes into any module", "pickle_by_enum_name": "it hands out getattr"}
    found = {id(getattr(enum, n)): why for n, why in whys.items() if hasattr(enum, n)}
    found.update({id(getattr(typing, n)): why for n, why in _TYPING_REFUSED.items() if hasattr(typing, n)})
    return found


_REFUSED_FUNCTIONS = _refused_library_functions()
_MISSING = object()


def _plain(name) -> bool:
    """``name`` is a ``str`` itself, not an instance of a subclass. A ``str`` subclass is the
    program's code: its ``startswith``, ``split``, ``__eq__``, ``__hash__``, ``__radd__``,
    ``__format__`` can answer a check one way and the lookup the check guards another
    (``S('__dict__')`` whose ``startswith('_')`` is ``False``; a dict key whose ``__eq__`` says
    ``'_write_'`` only from its second call on). Every name the sandbox checks must pass this first."""
    return type(name) is str


def _plain_keys(mapping) -> dict:
    """The items of ``mapping`` whose key is a plain ``str`` (:func:`_plain`) not starting with ``_``."""
    return {k: v for k, v in mapping.items() if type(k) is str and not k.startswith("_")}
#: Built-in value types whose instances libraries use as names, dict keys and source text: a program's
#: class statement may derive from them only with an empty body (:func:`_class_statement_refused`).
_VALUE_TYPES = (str, bytes, bytearray, int, float, complex, tuple, frozenset, dict, list, set)
#: The names a class body always has (or may have without defining behaviour).
_CLASS_BOOKKEEPING = frozenset({"__module__", "__qualname__", "__doc__", "__slots__", "__firstlineno__",
                                "__static_attributes__"})


def _library_class(cls) -> bool:
    """``cls`` is the object its module holds under its qualified name (a class a library defined at
    import). A class a program makes (a statement, or a metaclass call that sets ``__module__`` to
    ``'sympy.core.basic'``) is not: the module holds another object or nothing there, and a program
    cannot write a module's attributes. Reads the type's own slots (a metaclass's
    ``__getattribute__`` is not consulted)."""
    import sys

    namespace = type.__dict__["__dict__"].__get__(cls)
    module = sys.modules.get(namespace.get("__module__")) if _plain(namespace.get("__module__")) else None
    qualname = type.__dict__["__qualname__"].__get__(cls)
    if module is None or not _plain(qualname) or "<" in qualname:
        return False
    found = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found is cls


def _library_type(cls) -> bool:
    """``cls`` is a library's class: one a module holds under its name (:func:`_library_class`), or
    a static type of C code (``collections.defaultdict``; a program makes only heap types)."""
    return not type.__dict__["__flags__"].__get__(cls) & (1 << 9) or _library_class(cls)  # Py_TPFLAGS_HEAPTYPE


def _typing_makes() -> tuple[tuple[type, type], ...]:
    """``typing``'s metaclasses whose classes derive from a built-in value type whatever their bases
    say: ``NamedTupleMeta`` (a ``tuple`` class: ``class P(NamedTuple)`` with a ``count`` of its own
    answered for ``tuple``'s) and ``_TypedDictMeta`` (a ``dict`` class), with that type."""
    import typing

    makes = ((getattr(typing, "NamedTupleMeta", None), tuple), (getattr(typing, "_TypedDictMeta", None), dict))
    return tuple((meta, made) for meta, made in makes if isinstance(meta, type))


_TYPING_MAKES = _typing_makes()


def _class_statement_refused(bases: tuple, namespace: dict, meta, name=None, maker=None) -> str | None:
    """Why a program's ``class`` statement may not make a class (``None`` when it may). Refused: a
    metaclass (a class deriving from ``type``); a class whose metaclass the program made (not
    ``type`` and not a library's, :func:`_library_class`); a class deriving from a built-in value type
    (:data:`_VALUE_TYPES`) whose body, or a base the program made, defines anything (its methods would
    answer ``==``, ``hash``, ``+``, ``split``... where a library takes it for a name or a key), but an
    ``Enum`` of members and new methods (:func:`_enum_body`; ``name`` is the class's, ``maker`` the
    metaclass that makes it when ``meta`` is not; ``typing``'s ``NamedTupleMeta`` and ``_TypedDictMeta``
    count as deriving from ``tuple`` and ``dict``, :func:`_typing_makes`). ``class S(str): pass`` stays."""
    mros = [type.__dict__["__mro__"].__get__(b) for b in bases]
    for maker_, made in _TYPING_MAKES:  # ``typing``'s metaclasses that make a tuple or dict class
        if meta is maker_:
            mros.append(type.__dict__["__mro__"].__get__(made))
    if any(type in mro for mro in mros):
        return "a class deriving from type (a metaclass)"
    if meta is not type and not _library_class(meta):
        return "a class whose metaclass the program made"
    if any(v in mro for mro in mros for v in _VALUE_TYPES):
        if set(namespace) - _CLASS_BOOKKEEPING and not _enum_body(name, mros, namespace, maker or meta):
            return "a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own"
        for mro in mros:
            for klass in mro:
                own = set(type.__dict__["__dict__"].__get__(klass)) - _CLASS_BOOKKEEPING - {"__dict__", "__weakref__"}
                if klass is not object and klass not in _VALUE_TYPES and not _library_type(klass) and own:
                    return "a subclass of a built-in value type (str, int, tuple, dict...) with attributes of its own"
    return None


#: Values an ``Enum`` member of a class with a value type may have (and tuples and frozensets of them).
_MEMBER_VALUES = (bool, int, float, complex, str, bytes, type(None))


def _member_value(value, enum, depth: int = 0) -> bool:
    """``value`` is a plain member value (:data:`_MEMBER_VALUES`, tuples and frozensets of them, an
    ``enum.auto()`` yet to be numbered or of one), read without the program's code (exact types only)."""
    kind = type(value)
    if kind in _MEMBER_VALUES:
        return True
    if depth >= 8:
        return False
    if kind is enum.auto:
        inner = vars(value).get("value", _MISSING)
        return inner is vars(enum).get("_auto_null", _MISSING) or _member_value(inner, enum, depth + 1)
    if kind in (tuple, frozenset):
        return all(_member_value(v, enum, depth + 1) for v in value)
    return False


def _program_function(value) -> bool:
    """``value`` is a function the program defined (its module ``__main__``), or ``None``."""
    return value is None or (type(value) is types.FunctionType and _module_of(value) == "__main__")


def _enum_body(name, mros: list, namespace, maker) -> bool:
    """A class deriving from a built-in value type and ``enum.Enum`` whose metaclass is enum's
    (``class Color(str, Enum): RED = 'red'``, ``IntEnum`` subclasses, the functional API) may have a
    body of its own: its members, each a plain value (:func:`_member_value`), and methods (the
    program's functions, as they are or as a ``property``, ``staticmethod`` or ``classmethod``). Each
    name must be an identifier not starting with ``_`` that is no attribute of any base (a member or
    method named ``startswith``, ``split``, ``value`` would answer for ``str``'s or enum's own), and
    so must the class's name (enum writes it into each member's ``str``). Enum's own methods
    (``__str__``, ``__hash__``, ``__format__``) are the library's; the program defines none."""
    import sys

    enum = sys.modules.get("enum")
    if (enum is None or not isinstance(maker, type) or enum.EnumType not in type.__dict__["__mro__"].__get__(maker)
            or not _library_class(maker) or not any(enum.Enum in mro for mro in mros)):
        return False
    if not (_plain(name) and name.isidentifier() and not name.startswith("_")):
        return False
    if type(namespace) not in (dict, getattr(enum, "_EnumDict", dict)):
        return False
    for key, value in dict.items(namespace):
        if key in _CLASS_BOOKKEEPING:
            continue
        if key == "_generate_next_value_" and (value is None or any(  # what enum's ``__prepare__`` put there
                type.__dict__["__dict__"].__get__(klass).get(key) is value for mro in mros for klass in mro)):
            continue
        if not (_plain(key) and key.isidentifier() and not key.startswith("_")):
            return False
        if any(key in type.__dict__["__dict__"].__get__(klass) for mro in mros for klass in mro):
            return False
        kind = type(value)
        if kind in (staticmethod, classmethod):
            value = value.__func__
        elif kind is property:
            if not all(_program_function(f) for f in (value.fget, value.fset, value.fdel)):
                return False
            continue
        if not (_member_value(value, enum) or (value is not None and _program_function(value))):
            return False
    return True


def _winner(metaclass, bases: tuple):
    """The metaclass a class of ``bases`` gets (the most derived of ``metaclass`` and the bases'
    metaclasses, as ``type`` computes it), by the types' own ``__mro__`` (a metaclass's
    ``__subclasscheck__`` is its maker's). Raises ``TypeError`` on a conflict."""
    meta = metaclass
    for base in bases:
        kind = type(base)
        if meta in type.__dict__["__mro__"].__get__(kind):
            meta = kind
        elif kind not in type.__dict__["__mro__"].__get__(meta):
            raise TypeError("metaclass conflict: the metaclass of a derived class must be a (non-strict) subclass "
                            "of the metaclasses of all its bases")
    return meta


def _guarded_build_class(func, name, *bases, metaclass=type, **kwargs):
    """The program's ``__build_class__`` (what a ``class`` statement calls; RestrictedPython passes
    ``metaclass=__metaclass__``, that is ``type``): the class is made by its metaclass as usual
    (:func:`_winner`: ``sympy.Function``'s for a ``Function`` subclass, with its ``__prepare__``)
    once :func:`_class_statement_refused` has judged its bases and body, before the metaclass runs
    (a library's metaclass registers the class it makes). Raises ``TypeError``."""
    import builtins

    def make(name_, bases_, namespace, **kw):
        meta = _winner(metaclass, bases_)
        if why := _class_statement_refused(bases_, namespace, meta, name_):
            raise TypeError(f"class {name_}: {why} is not allowed in the sandbox")
        return meta(name_, bases_, namespace, **kw)

    # ``__build_class__`` asks its metaclass (here ``make``) for ``__prepare__``: the real one's
    make.__prepare__ = lambda name_, bases_, **kw: _winner(metaclass, bases_).__prepare__(name_, bases_, **kw)
    return builtins.__build_class__(func, name, *bases, metaclass=make, **kwargs)


#: The sandbox's own replacements for the ``exec``/``eval``/``compile`` of sympy's and mpmath's code
#: runners (:func:`_route_code_runners`, :func:`_route_lambdify_code`), by ``id`` (the values keep
#: them alive): like the interpreter's, a program may not hold them (:func:`_refused`).
_OWN_RUNNERS: dict[int, object] = {}


def _own_runner(function):
    """Register ``function`` in :data:`_OWN_RUNNERS` and return it."""
    _OWN_RUNNERS[id(function)] = function
    return function


def _plain_namespace(mapping, what: str) -> dict:
    """A copy of the globals or locals a replaced ``exec``/``eval`` was given, with only its keys that
    are plain ``str`` (:func:`_plain`) not starting with ``_`` (RestrictedPython's hooks are such names, and a name is looked up in the locals
    first: ``{'_write_': f}`` would replace the write guard). ``None`` gives ``{}``; anything but a
    ``dict`` raises ``TypeError``."""
    if mapping is None:
        return {}
    if type(mapping) is not dict:
        raise TypeError(f"{what} must be a dict, not {type(mapping).__name__}")
    return _plain_keys(mapping)


#: Packages of allowed libraries that are no program's business, and why: sympy's test suite (its
#: ``tmpfiles.TmpFileManager.cleanup`` removes any folder it is given, ``runtests`` runs doctests);
#: sympy's interactive session (``init_python_session()`` is a ``code.InteractiveConsole`` whose
#: ``runsource`` ran any code with the interpreter's built-ins) and its timing helper (``timed(f,
#: setup=...)`` hands ``setup`` to ``timeit``, which compiles and runs it the same way).
_CLOSED_PACKAGES = {"sympy.testing": "sympy's test suite",
                    "sympy.interactive.session": "it runs code outside the sandbox",
                    "sympy.utilities.timeutils": "it runs code outside the sandbox"}


def _closed_module(name: str) -> str | None:
    """Why the module ``name`` of an allowed library may not be imported, or ``None``: a private one
    (a dotted part starting with ``_``: RestrictedPython refuses ``from sympy.utilities import
    _compilation`` but not ``import sympy.utilities._compilation.util``), or a closed package."""
    if any(part.startswith("_") for part in name.split(".")):
        return "a private module"
    return _closed_package(name)


def _closed_package(name: str) -> str | None:
    """Why ``name`` is (in) one of :data:`_CLOSED_PACKAGES`, or ``None``."""
    for package, why in _CLOSED_PACKAGES.items():
        if name == package or name.startswith(package + "."):
            return why
    return None


#: sympy's packages a program may hold, with all their modules (but their ``tests`` and ``benchmarks``):
#: the mathematics. An allow-list: a sympy module that is neither here nor in :data:`SYMPY_MODULES`
#: (nor, where Landlock confines writes, :data:`SYMPY_FILE_WRITERS`) is unreachable.
SYMPY_PACKAGES = ("sympy.abc", "sympy.algebras", "sympy.assumptions", "sympy.calculus", "sympy.combinatorics",
                  "sympy.concrete", "sympy.core", "sympy.crypto", "sympy.discrete", "sympy.functions",
                  "sympy.geometry", "sympy.holonomic", "sympy.integrals", "sympy.logic", "sympy.matrices",
                  "sympy.multipledispatch", "sympy.ntheory", "sympy.polys", "sympy.series", "sympy.sets",
                  "sympy.simplify", "sympy.solvers", "sympy.stats", "sympy.strategies", "sympy.tensor", "sympy.unify",
                  "sympy.vector", "sympy.printing.pretty")

#: Single sympy modules a program may hold: the package itself, the printers that make strings
#: (not ``preview``, ``gtk``, ``tree``, ``dot``, nor the JIT and array-library printers), the plain
#: helpers of ``utilities``, ``init_printing``, and the string parsers and plotting evaluators whose
#: ``eval``/``exec``/``compile`` the sandbox replaces (:func:`_route_sympy`; each refusal is tested).
SYMPY_MODULES = frozenset(
    {"sympy", "sympy.printing", "sympy.utilities", "sympy.parsing", "sympy.interactive", "sympy.interactive.printing",
     "sympy.utilities.misc", "sympy.utilities.iterables", "sympy.utilities.decorator", "sympy.utilities.exceptions",
     "sympy.utilities.memoization", "sympy.utilities.enumerative",
     "sympy.parsing.sympy_parser", "sympy.parsing.ast_parser", "sympy.plotting.experimental_lambdify",
     "sympy.plotting.pygletplot.plot_interval"}
    | {f"sympy.printing.{m}" for m in ("printer", "str", "repr", "latex", "precedence", "conventions", "defaults",
                                        "mathml", "tableform", "codeprinter", "pycode", "lambdarepr", "numpy", "c",
                                        "cxx", "fortran", "jscode", "julia", "octave", "maple", "mathematica",
                                        "rcode", "rust", "glsl", "smtlib", "python")})

#: Holdable sympy modules of which only these functions and classes are (an allow-list within the
#: module): ``sympy.utilities.misc`` also has ``find_executable`` (which probes the file system)
#: and ``debug`` helpers.
SYMPY_NAMES = {"sympy.utilities.misc": frozenset({"Undecidable", "as_int", "filldedent", "func_name", "ordinal",
                                                  "rawlines", "replace", "strlines", "translate"})}

#: sympy modules a program may not hold whose tables it may import: ``lambdify`` reads its
#: ``MODULES`` table (the namespaces of ``modules='math'``...; the import lines in it go through the
#: program's import check, :func:`_route_lambdify_code`).
SYMPY_TABLES = frozenset({"sympy.utilities.lambdify"})

#: sympy modules that write files where the program says (``codegen(..., to_files=True)``): held
#: only where Landlock confines the child's writes to its own folder.
SYMPY_FILE_WRITERS = frozenset({"sympy.utilities.codegen"})

#: Whether this child's writes are confined to its folder (Landlock; set by :func:`_restricted_globals`).
_WRITES_CONFINED: list[bool] = [False]


def _sympy_refused(name: str, confined: bool) -> str | None:
    """Why the sympy module ``name`` is not one a program may hold, or ``None`` (the allow-list)."""
    parts = name.split(".")
    if "tests" in parts or "benchmarks" in parts:
        return "sympy's tests"
    if name in SYMPY_MODULES or any(name == p or name.startswith(p + ".") for p in SYMPY_PACKAGES):
        return None
    if confined and name in SYMPY_FILE_WRITERS:
        return None
    return "not one of sympy's mathematical modules"


_SYMPY_VERDICTS: dict[tuple[str, bool], str | None] = {}


def _library_refused(name: str) -> str | None:
    """Why the module ``name`` of an allowed library may not be held (only sympy's are listed), or ``None``."""
    if name != "sympy" and not name.startswith("sympy."):
        return None
    key = (name, _WRITES_CONFINED[0])
    if key not in _SYMPY_VERDICTS:
        _SYMPY_VERDICTS[key] = _sympy_refused(name, key[1])
    return _SYMPY_VERDICTS[key]


def _module_of(value) -> str | None:
    """The ``__module__`` of a function, class, method or other callable (``None`` when it has none).
    sympy's ``lazy_function`` proxies (``sympy.test``, ``sympy.doctest``) say ``sympy.core.cache``
    but import and call a function of another module (the test runners): their target's module."""
    kind = type(value)
    if kind.__qualname__ == "lazy_function.<locals>.LazyFunction" and kind.__module__ == "sympy.core.cache":
        call = kind.__dict__.get("__call__")
        cells = dict(zip(getattr(getattr(call, "__code__", None), "co_freevars", ()), getattr(call, "__closure__", None) or ()))
        try:
            target = cells["module"].cell_contents
        except (KeyError, ValueError):
            target = None
        return target if isinstance(target, str) else "sympy.testing"  # unknown: refused
    try:
        module = getattr(value, "__module__", None)
    except Exception:  # noqa: BLE001 - an object whose attribute lookup raises says nothing
        return None
    return module if isinstance(module, str) else None


def _refused(value, allowed: frozenset[str]) -> str | None:
    """Why a program may not hold ``value`` (``None`` when it may): a module outside ``allowed`` or
    outside sympy's allow-list, one of the interpreter's unsafe built-ins, or a function, class or
    other callable of a module in :data:`_UNREACHABLE` or outside sympy's allow-list."""
    if isinstance(value, types.ModuleType):
        top = value.__name__.split(".")[0]
        if top not in allowed or _closed_module(value.__name__) or _library_refused(value.__name__):
            return f"is the module {value.__name__!r}, which is not allowed"
        return None
    kind = type(value)
    # (``id`` only for the kinds these are, once: each ``id`` call is an audit event of the child's hook)
    if kind is type or kind is types.BuiltinFunctionType or kind is types.MethodDescriptorType:
        ident = id(value)
        if ident in _DANGEROUS:
            return "is a built-in the sandbox does not give"
        if ident in _REFUSED_FUNCTIONS:  # ``typing.ForwardRef``
            return f"belongs to the module {_module_of(value)!r}, which is not allowed ({_REFUSED_FUNCTIONS[ident]})"
    elif kind is types.FunctionType:
        ident = id(value)
        if ident in _OWN_RUNNERS:
            return "is the sandbox's own code runner, which a program may not hold"
        if ident in _REFUSED_FUNCTIONS:
            return f"belongs to the module {_module_of(value)!r}, which is not allowed ({_REFUSED_FUNCTIONS[ident]})"
    if (isinstance(value, type) and issubclass(value, string.Formatter)) or isinstance(value, string.Formatter):
        # its ``get_field`` reads any attribute (``'0.__class__'``), and a subclass's ``super()`` reaches it
        return "is string.Formatter, which reads any attribute (format strings with str.format or f-strings)"
    if isinstance(value, type) or callable(value):
        module = _module_of(value)
        if module is None:
            return None
        top = module.split(".")[0]
        if top in _UNREACHABLE and top not in allowed:
            return f"belongs to the module {module!r}, which is not allowed"
        if why := _closed_package(module) or _library_refused(module):  # ``sympy.init_session``, ``sympy.preview``
            return f"belongs to the module {module!r}, which is not allowed ({why})"
        names = SYMPY_NAMES.get(module)
        if names is not None and getattr(value, "__name__", None) not in names:
            return f"belongs to the module {module!r}, which is not allowed (not one of its functions a program may use)"
    return None


def _imported_refused(name: str, value, allowed: frozenset[str]) -> str | None:
    """Why ``from name import x`` may not give ``value`` (``None`` when it may): :func:`_refused`; and
    data (a table, a number), which has no module of its own, is judged by the module ``name`` it
    is taken from (but :data:`SYMPY_TABLES`)."""
    if why := _refused(value, allowed):
        return why
    if (not (isinstance(value, (type, types.ModuleType)) or callable(value)) and name not in SYMPY_TABLES
            and (why := _library_refused(name))):
        return f"belongs to the module {name!r}, which is not allowed ({why})"
    return None


_STAR_VIEWS: dict[tuple[int, frozenset[str], bool], types.ModuleType] = {}


def _star_view(module: types.ModuleType, allowed: frozenset[str]) -> types.ModuleType:
    """What ``from module import *`` binds: a new module holding only the names of ``module``'s
    ``__all__`` (else its public names) that :func:`_refused` lets a program hold. Kept per module,
    allowed modules and :data:`_WRITES_CONFINED` (the worker makes sympy's before it forks:
    :func:`warm_star_views`; about 7 ms a program otherwise)."""
    key = (id(module), allowed, _WRITES_CONFINED[0])
    if key not in _STAR_VIEWS:  # (``import *`` only reads the view: the program never holds it)
        _STAR_VIEWS[key] = _new_star_view(module, allowed)
    return _STAR_VIEWS[key]


def warm_star_views(allowed: frozenset[str]) -> None:
    """Make ``from sympy import *``'s view for ``allowed``, with and without confined writes (the
    worker, before it forks, with the modules it preloads: the default imports)."""
    import sys

    module = sys.modules.get("sympy")
    if module is None:
        return
    confined = _WRITES_CONFINED[0]
    try:
        for _WRITES_CONFINED[0] in (False, True):
            _star_view(module, allowed)
    finally:
        _WRITES_CONFINED[0] = confined


def _new_star_view(module: types.ModuleType, allowed: frozenset[str]) -> types.ModuleType:
    names = getattr(module, "__all__", None)
    if not isinstance(names, (list, tuple)):
        names = [n for n in vars(module) if isinstance(n, str)]
    kept = {}
    for name in names:
        if _plain(name) and not name.startswith("_") and hasattr(module, name):
            value = getattr(module, name)
            if not _imported_refused(module.__name__, value, allowed):
                kept[name] = value
    view = types.ModuleType(module.__name__)
    vars(view).update(kept)
    view.__all__ = list(kept)
    return view


class _ItemsOnly:
    """What ``_write_`` gives for an object whose attributes the program may not change: its items
    can still be set (``_write_(obj)[k] = v``), its attributes not."""

    __slots__ = ("target",)

    def __init__(self, target):
        object.__setattr__(self, "target", target)

    def __getitem__(self, key):
        return self.target[key]

    def __setitem__(self, key, value):
        self.target[key] = value

    def __delitem__(self, key):
        del self.target[key]

    def __setattr__(self, name, value):
        raise TypeError(f"the sandbox does not let a program change the attribute {name!r} of {_described(self.target)}")

    def __delattr__(self, name):
        raise TypeError(f"the sandbox does not let a program delete the attribute {name!r} of {_described(self.target)}")


class _LibraryFieldsOnly(_ItemsOnly):
    """:class:`_ItemsOnly` for an instance of a subclass of a built-in value type, whose fields that
    a library's class declares stay writable (``collections.defaultdict``'s ``default_factory``, a
    C slot): a name that is a member or get-set descriptor in the ``__dict__`` of a class of its
    ``__mro__`` that the program did not make."""

    __slots__ = ()

    def _field(self, name) -> bool:
        if not _plain(name):
            return False
        for klass in type.__dict__["__mro__"].__get__(type(self.target)):
            found = type.__dict__["__dict__"].__get__(klass).get(name, _MISSING)
            if found is not _MISSING:
                return (type(found) in (types.MemberDescriptorType, types.GetSetDescriptorType)
                        and (klass in _VALUE_TYPES or _library_type(klass)))
        return False

    def __setattr__(self, name, value):
        if not self._field(name):
            super().__setattr__(name, value)
        setattr(self.target, name, value)

    def __delattr__(self, name):
        if not self._field(name):
            super().__delattr__(name)
        delattr(self.target, name)


def _described(obj) -> str:
    if isinstance(obj, types.ModuleType):
        return f"the module {obj.__name__!r}"
    name = getattr(obj, "__qualname__", None) or type(obj).__name__
    return f"{name!r} of the module {_module_of(obj)!r}" if _module_of(obj) else repr(name)


def _typing_objects() -> tuple[type, ...]:
    """The classes of ``typing``'s own objects (its aliases, special forms, type variables): an alias
    passes a write or delete of an attribute to the class it stands for (``typing.Counter.most_common
    = f`` wrote into ``collections.Counter``, ``Sequence.count = f``, through a sympy module, into
    ``collections.abc.Sequence``)."""
    import typing

    found = (getattr(typing, n, None) for n in ("_Final", "_BaseGenericAlias", "_SpecialForm", "TypeVar", "ParamSpec"))
    return tuple(c for c in found if isinstance(c, type))


_TYPING_OBJECTS = _typing_objects()


def _write_guard(obj):
    """RestrictedPython's ``_write_``: the object itself when the program may set and delete its
    attributes (its own objects, sympy's instances), else :class:`_ItemsOnly`: a module; a class,
    function or method the program did not define (``__module__`` other than ``__main__``); sympy's
    registries (``sympy.S``, :data:`_LIBRARY_STATE`); ``typing``'s aliases and forms
    (:func:`_typing_objects`); a class of the program's that is, or has a
    subclass that is, a subclass of a built-in value type (``class S(str): pass`` then ``S.split =
    f`` would give it the methods :func:`_class_statement_refused` refuses), and an instance of one
    (``s.startswith = f`` answers ``s.startswith('_')`` from the instance, and so would a slot made
    by a metaclass call: a ``dict`` subclass's items stay writable); the sandbox's routing objects
    (the restricted ``eval_expr``: their state is the worker's)."""
    if (isinstance(obj, (types.ModuleType, _RestrictedSympyEval, _SafeFormatter, *_TYPING_OBJECTS))
            or (_LIBRARY_STATE and isinstance(obj, _LIBRARY_STATE))):
        return _ItemsOnly(obj)
    kind = type(obj)  # (``issubclass`` of built-in types reads the C-level MRO: no metaclass's code runs)
    if issubclass(kind, _VALUE_TYPES) and kind not in _VALUE_TYPES:
        return _LibraryFieldsOnly(obj)
    if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                        types.MethodWrapperType, types.WrapperDescriptorType, types.MethodDescriptorType,
                        types.GetSetDescriptorType, types.MemberDescriptorType, property, staticmethod, classmethod)):
        if _module_of(obj) != "__main__" or (isinstance(obj, type) and _value_class(obj)):
            return _ItemsOnly(obj)
    return obj


def _value_class(cls) -> bool:
    """``cls`` or a class deriving from it (now) derives from a built-in value type
    (:data:`_VALUE_TYPES`), by the types' own ``__mro__`` and ``__subclasses__``."""
    todo, seen = [cls], set()
    while todo:
        klass = todo.pop()
        if id(klass) in seen:
            continue
        seen.add(id(klass))
        if any(v in type.__dict__["__mro__"].__get__(klass) for v in _VALUE_TYPES):
            return True
        todo.extend(type.__dict__["__subclasses__"](klass))
    return False


#: Attributes a ``super()`` object does not give a program: the formatting methods of ``str`` and
#: ``string.Formatter``, which read attributes by name without the guarded ``getattr``.
_SUPER_REFUSED = frozenset({"format", "format_map", "vformat", "get_field", "get_value"})


def _getattr_guard(allowed: frozenset[str]):
    def guarded_getattr(obj, name, default=_MISSING):
        if type(obj) is super and _plain(name) and name in _SUPER_METHODS:
            # ``super().__init__``: only of an instance of a class the program defined
            owner = super.__dict__["__self__"].__get__(obj)
            if (type(owner) is not type and not isinstance(owner, type)
                    and _module_of(type(owner)) == "__main__" and not _value_class(type(owner))):
                return getattr(obj, name)
            raise AttributeError(f"{name!r} of a super() object is not available in the sandbox (only of the "
                                 "program's own instance)")
        if isinstance(obj, super) and name in _SUPER_REFUSED:
            # ``super(S, s).format`` of a ``str`` subclass is ``str.format`` unguarded (RestrictedPython's
            # check looks at the super object, not at what it stands for)
            raise NotImplementedError(f"{name!r} of a super() object is not available in the sandbox")
        if name in ("format", "format_map") and isinstance(obj, collections.UserString):
            obj = obj.data  # its ``format`` is ``self.data.format``: the guarded one below
        if isinstance(obj, str) and name in ("format", "format_map"):
            formatter = _SafeFormatter(guarded_getattr)
            if name == "format":
                return lambda *args, **kwargs: formatter.vformat(obj, args, kwargs)
            return lambda mapping: formatter.vformat(obj, (), mapping)
        if name == "mro" and isinstance(obj, type) and type in type.__dict__["__mro__"].__get__(obj):
            # ``numbers.ABCMeta.mro(numbers.ABCMeta)`` is a list that holds the built-in ``type``
            raise AttributeError("'mro' of a metaclass is not available in the sandbox")
        if isinstance(obj, types.ModuleType) and (why := _refused(obj, allowed)):
            raise AttributeError(f"{name!r} of a module that {why.removeprefix('is ')}")
        # a missing attribute raises (RestrictedPython's default would give None: ``math.pie`` printed "None")
        value = safer_getattr(obj, name, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                getattr(obj, name)  # Python's own AttributeError
            return default
        if why := _refused(value, allowed):
            raise AttributeError(f"{name!r} {why}")
        kind = type(value)
        if kind is types.FunctionType:
            # a library's function read from a class, a property (``fget``), a super object or an
            # instance: ``collections.Counter.copy(int)`` is ``type`` (:func:`_result_checked`)
            if not isinstance(obj, types.ModuleType) and value.__module__ != "__main__":
                return _result_checked(value)
        elif kind is types.MethodType and isinstance(value.__self__, type) and type(value.__func__) is types.FunctionType:
            # a library's class method, or a metaclass's method, bound to a class
            if value.__func__.__module__ != "__main__":
                return _result_checked(value)
        return value

    return guarded_getattr


#: The result-checked stand-ins :func:`_result_checked` made in this child, by the ``id`` of the
#: function or method they stand for, with it (which keeps the ``id`` from being reused).
_RESULT_CHECKED: dict[int, tuple] = {}


def _result_checked(function):
    """A stand-in for ``function`` (a library's Python function or bound method that the guarded
    ``getattr`` hands a program from anything but a module) that raises ``TypeError``
    (:func:`_no_type`) where ``function`` returns the built-in ``type``; otherwise it returns what
    ``function`` returns. The origins of ``type`` in a program's reach are all such functions called
    with a class where they expect an instance (``collections.Counter.copy(int)`` and
    ``UserList.copy`` run ``int.__class__(int)``, the getter of ``sympy.Basic.func`` gives
    ``int.__class__``); a program's own call of one is checked inline (:class:`_CallResults`), but C
    code that calls it (``map(Counter.copy, [int])``, ``itertools.groupby``'s key, ``iter(partial(...),
    None)``, a ``defaultdict``'s factory) kept ``type`` where no check sees it, and C code then called
    it with the program's arguments (``itertools.starmap(operator.call, ...)``). Checked at the
    origin, whoever calls it. One stand-in per function (``Counter.copy is Counter.copy`` holds); its
    name, module and docstring are the original's, so it is judged as the original is (a function
    the program did not define: its attributes cannot be set, :func:`_write_guard`)."""
    key = id(function)
    entry = _RESULT_CHECKED.get(key)
    if entry is not None and entry[0] is function:
        return entry[1]

    def checked(*args, **kwargs):
        value = function(*args, **kwargs)
        if value is type:
            _no_type()
        return value

    for attribute in ("__name__", "__qualname__", "__module__", "__doc__"):
        try:
            setattr(checked, attribute, getattr(function, attribute))
        except (AttributeError, TypeError):
            pass
    if type(function) is types.FunctionType:  # (a bound method is a new object at each read, as in Python)
        _RESULT_CHECKED[key] = (function, checked)
    return checked


def _guarded_hasattr(obj, name) -> bool:
    """The program's ``hasattr``: ``False`` for a name starting with ``_``; a ``str`` subclass is read
    by its text (``str.__str__``), not by its own methods (:func:`_plain`)."""
    if not isinstance(name, str):
        raise TypeError(f"attribute name must be string, not '{type(name).__name__}'")
    name = str.__str__(name)
    return not name.startswith("_") and hasattr(obj, name)


#: RestrictedPython's augmented-assignment operators, as Python runs them: in place where the value
#: can be changed in place (``a += [2]`` extends the list ``a`` and every other name for it;
#: ``x + y`` made a new list, and an object's ``__iadd__`` was never called).
_INPLACE = {"+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
            "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "<<=": operator.ilshift,
            ">>=": operator.irshift, "|=": operator.ior, "^=": operator.ixor, "&=": operator.iand,
            "@=": operator.imatmul}
#: The same, by the operator's ``ast`` class (:meth:`_Policy.visit_AugAssign`).
_INPLACE_BY_NODE = {ast.Add: "+=", ast.Sub: "-=", ast.Mult: "*=", ast.Div: "/=", ast.FloorDiv: "//=", ast.Mod: "%=",
                    ast.Pow: "**=", ast.LShift: "<<=", ast.RShift: ">>=", ast.BitOr: "|=", ast.BitXor: "^=",
                    ast.BitAnd: "&=", ast.MatMult: "@="}


def _inplacevar(op: str, x, y):
    """RestrictedPython's ``_inplacevar_``: ``x op y`` in place (:data:`_INPLACE`); ``SyntaxError`` for
    another operator."""
    function = _INPLACE.get(op) if _plain(op) else None
    if function is None:
        raise SyntaxError(f"operator {op} is not allowed")
    return function(x, y)


def _no_type():
    """What a program gets in place of the built-in ``type``: ``TypeError``. ``type(name, bases,
    namespace)`` makes a class past the checks of a ``class`` statement (:func:`_guarded_build_class`),
    and no hook runs inside it (its ``__new__`` cannot be replaced)."""
    raise TypeError("the sandbox does not give a program the built-in type (write a class statement; "
                    "isinstance tells an object's class)")


def _type_checked(value):
    """``value``, unless it is the built-in ``type`` (:func:`_no_type`). The function form of the check
    :class:`_CallResults` writes inline; used where an assignment expression may not stand."""
    if value is type:
        _no_type()
    return value


class _ProgramType:
    """The program's ``type`` (one object, :data:`_program_type`): ``type(obj)`` is the class of
    ``obj`` (models write ``type(x) == int``); not the built-in ``type`` itself (``type(int)``), nor
    a class the program may not hold (:func:`_refused`), nor ``type(name, bases, namespace)``
    (``TypeError``). ``isinstance(x, type)`` and ``issubclass(c, type)`` answer as with the built-in."""

    __slots__ = ()

    def __call__(self, obj, *rest, **kwargs):
        if rest or kwargs:
            raise TypeError("type(name, bases, namespace) is not available in the sandbox (write a class statement)")
        kind = type(obj)
        if kind is type:
            _no_type()
        if why := _refused(kind, _ALLOWED[0]):
            raise TypeError(f"the class of that object {why}")
        return kind

    def __instancecheck__(self, obj) -> bool:
        return isinstance(obj, type)

    def __subclasscheck__(self, cls) -> bool:
        return issubclass(cls, type)

    def __repr__(self) -> str:
        return "<class 'type'>"


_program_type = _ProgramType()


def _checked_decorator(decorator):
    """A decorator that applies ``decorator`` and checks what it gives (:func:`_type_checked`):
    ``@collections.Counter.copy`` on a class is ``type(C)``, that is ``type``."""
    return lambda obj: _type_checked(decorator(obj))


def _checked_getitem(obj, index):
    """RestrictedPython's ``_getitem_`` (``obj[index]``), refusing the built-in ``type`` as the item
    (``numbers.ABCMeta.mro(numbers.ABCMeta)[1]``)."""
    value = obj[index]
    if value is type:
        _no_type()
    return value


def _checked_unpack_sequence(it, spec, _getiter_):
    """RestrictedPython's ``_unpack_sequence_`` (``a, b = it``), refusing the built-in ``type`` among
    the values."""
    values = guarded_unpack_sequence(it, spec, _getiter_)
    for value in values:
        if value is type:
            _no_type()
    return values


def _checked_iter_unpack_sequence(it, spec, _getiter_):
    """RestrictedPython's ``_iter_unpack_sequence_`` (``for a, b in it``), through
    :func:`_checked_unpack_sequence`."""
    for ob in _getiter_(it):
        yield _checked_unpack_sequence(ob, spec, _getiter_)


def _checked_apply(function, *args, **kwargs):
    """RestrictedPython's ``_apply_`` (a call with ``*args`` or ``**kwargs``), refusing the built-in
    ``type`` among the unpacked arguments (``operator.call(*L)``, ``functools.partial(*L)``)."""
    for value in args:
        if value is type:
            _no_type()
    for value in kwargs.values():
        if value is type:
            _no_type()
    return function(*args, **kwargs)


def _types_refused(values) -> None:
    """``TypeError`` (:func:`_no_type`) when one of ``values`` (a function's ``*args`` tuple, its
    ``**kwargs`` values) is the built-in ``type``."""
    for value in values:
        if value is type:
            _no_type()


#: The globals names of the checks :class:`_CallResults` writes (each program's globals hold them).
_CALL_CHECK_GLOBALS = {"_type_": type, "_no_type_": _no_type, "_type_checked_": _type_checked,
                       "_checked_decorator_": _checked_decorator, "_types_refused_": _types_refused}


def _is_type(name: str) -> ast.expr:
    return ast.Compare(left=ast.Name(name, ast.Load()), ops=[ast.Is()], comparators=[ast.Name("_type_", ast.Load())])


def _refuse_call() -> ast.expr:
    return ast.Call(func=ast.Name("_no_type_", ast.Load()), args=[], keywords=[])


def _names_check(names: list[str], packed: list[ast.expr]) -> list[ast.stmt]:
    """Statements that raise (:func:`_no_type`) when a variable of ``names`` holds the built-in
    ``type``, or one of the values of ``packed`` (expressions of collections) does."""
    checks: list[ast.stmt] = []
    if names:
        test = _is_type(names[0]) if len(names) == 1 else ast.BoolOp(op=ast.Or(), values=[_is_type(n) for n in names])
        checks.append(ast.If(test=test, body=[ast.Expr(_refuse_call())], orelse=[]))
    for values in packed:
        checks.append(ast.Expr(ast.Call(func=ast.Name("_types_refused_", ast.Load()), args=[values], keywords=[])))
    return checks


class _CallResults(ast.NodeTransformer):
    """The second pass of :class:`_Policy`: every call the program wrote (marked ``_sandbox_call`` by
    the first pass; not the hooks RestrictedPython adds) has its result checked not to be the
    built-in ``type``, which library code hands out (``collections.Counter.copy(int)`` is
    ``int.__class__(int)``; ``sympy.Basic.func.fget(int)``; ``max(...)`` of a list holding it), and
    each decorator too. Inline, as ``(_r_ if (_r_ := f(x)) is not _type_ else _no_type_())`` (a few
    nanoseconds a call), where an assignment expression may stand: in a function, a lambda or the
    module, outside a comprehension's iterable; elsewhere (a class body, a comprehension's iterable)
    as ``_type_checked_(f(x))``. Annotations are left as they are (they are strings, evaluated by
    ``typing`` with the same policy)."""

    def __init__(self) -> None:
        # one entry per scope: [kind, depth of comprehension iterables being visited]
        self.scopes: list[list] = [["module", 0]]

    def _walrus_ok(self) -> bool:
        for kind, iterables in reversed(self.scopes):
            if iterables:
                return False
            if kind != "comprehension":
                return kind in ("module", "function")
        return False

    def _visit_in(self, kind: str, nodes) -> None:
        self.scopes.append([kind, 0])
        try:
            for node in nodes:
                self.visit(node)
        finally:
            self.scopes.pop()

    def _visit_iterable(self, node):
        self.scopes[-1][1] += 1
        try:
            return self.visit(node)
        finally:
            self.scopes[-1][1] -= 1

    def _arguments(self, args: ast.arguments) -> None:
        args.defaults = [self.visit(d) for d in args.defaults]
        args.kw_defaults = [d if d is None else self.visit(d) for d in args.kw_defaults]

    def _decorators(self, node) -> None:
        if isinstance(node, ast.Lambda):
            return
        node.decorator_list = [
            ast.fix_missing_locations(ast.copy_location(ast.Call(func=ast.Name("_checked_decorator_", ast.Load()),
                                                                 args=[self.visit(d)], keywords=[]), d))
            for d in node.decorator_list]

    def _function(self, node):
        self._decorators(node)
        self._arguments(node.args)
        body = [node.body] if isinstance(node, ast.Lambda) else node.body
        self.scopes.append(["function", 0])
        try:
            body = [self.visit(b) for b in body]
        finally:
            self.scopes.pop()
        if isinstance(node, ast.Lambda):
            node.body = body[0]
        else:
            node.body = body
        return node

    @staticmethod
    def _parameters(args: ast.arguments) -> tuple[list[str], list[ast.expr]]:
        names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
        packed: list[ast.expr] = []
        if args.vararg is not None:
            packed.append(ast.Name(args.vararg.arg, ast.Load()))
        if args.kwarg is not None:
            packed.append(ast.Call(func=ast.Attribute(value=ast.Name(args.kwarg.arg, ast.Load()), attr="values",
                                                      ctx=ast.Load()), args=[], keywords=[]))
        return names, packed

    def _checked_function(self, node):
        # what a caller passes (library code calls the program's functions: ``map``, ``sorted``'s
        # key, a method called with another object) is checked on entry
        node = self._function(node)
        names, packed = self._parameters(node.args)
        if not names and not packed:
            return node
        if isinstance(node, ast.Lambda):
            if packed:
                first = ast.Call(func=ast.Name("_types_refused_", ast.Load()), args=[ast.Tuple(
                    elts=[ast.Starred(value=p, ctx=ast.Load()) for p in packed], ctx=ast.Load())], keywords=[])
                node.body = ast.IfExp(test=first, body=_refuse_call(), orelse=node.body)
            if names:
                test = (ast.BoolOp(op=ast.Or(), values=[_is_type(n) for n in names]) if len(names) > 1
                        else _is_type(names[0]))
                node.body = ast.IfExp(test=test, body=_refuse_call(), orelse=node.body)
            return ast.fix_missing_locations(node)
        at = 1 if (node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
                   and isinstance(node.body[0].value.value, str)) else 0
        for check in reversed(_names_check(names, packed)):
            node.body.insert(at, ast.copy_location(check, node.body[0] if node.body else node))
        return ast.fix_missing_locations(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _checked_function

    def visit_For(self, node: ast.For):
        self.generic_visit(node)
        if isinstance(node.target, ast.Name):  # (a tuple target goes through ``_iter_unpack_sequence_``)
            for check in _names_check([node.target.id], []):
                node.body.insert(0, ast.fix_missing_locations(ast.copy_location(check, node)))
        return node

    def visit_With(self, node: ast.With):
        self.generic_visit(node)
        names = [item.optional_vars.id for item in node.items if isinstance(item.optional_vars, ast.Name)]
        for check in _names_check(names, []):
            node.body.insert(0, ast.fix_missing_locations(ast.copy_location(check, node)))
        return node

    def visit_Yield(self, node):
        self.generic_visit(node)
        return self._checked(node)

    visit_YieldFrom = visit_Await = visit_Yield

    def visit_ClassDef(self, node: ast.ClassDef):
        self._decorators(node)
        node.bases = [self.visit(b) for b in node.bases]
        node.keywords = [self.visit(k) for k in node.keywords]
        self.scopes.append(["class", 0])
        try:
            node.body = [self.visit(b) for b in node.body]
        finally:
            self.scopes.pop()
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign):
        if node.value is not None:
            node.value = self.visit(node.value)
        return node

    def visit_arg(self, node: ast.arg):
        return node  # an annotation

    def _comprehension(self, node):
        first = node.generators[0]
        first.iter = self._visit_iterable(first.iter)
        self.scopes.append(["comprehension", 0])
        try:
            for generator in node.generators:
                generator.target = self.visit(generator.target)
                if generator is not first:
                    generator.iter = self._visit_iterable(generator.iter)
                generator.ifs = [self.visit(i) for i in generator.ifs]
                if isinstance(generator.target, ast.Name):  # ``t is not _type_ or _no_type_()`` first
                    test = ast.BoolOp(op=ast.Or(), values=[
                        ast.Compare(left=ast.Name(generator.target.id, ast.Load()), ops=[ast.IsNot()],
                                    comparators=[ast.Name("_type_", ast.Load())]), _refuse_call()])
                    generator.ifs.insert(0, ast.fix_missing_locations(ast.copy_location(test, generator.target)))
            for field in ("elt", "key", "value"):
                if hasattr(node, field):
                    setattr(node, field, self.visit(getattr(node, field)))
        finally:
            self.scopes.pop()
        return node

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        if not getattr(node, "_sandbox_call", False):
            return node
        return self._checked(node)

    def _checked(self, node: ast.expr) -> ast.expr:
        """``node`` (a call, a ``yield``) with its result checked."""
        if not self._walrus_ok():
            check = ast.Call(func=ast.Name("_type_checked_", ast.Load()), args=[node], keywords=[])
            return ast.fix_missing_locations(ast.copy_location(check, node))
        check = ast.IfExp(
            test=ast.Compare(left=ast.NamedExpr(target=ast.Name("_r_", ast.Store()), value=node), ops=[ast.IsNot()],
                             comparators=[ast.Name("_type_", ast.Load())]),
            body=ast.Name("_r_", ast.Load()),
            orelse=ast.Call(func=ast.Name("_no_type_", ast.Load()), args=[], keywords=[]))
        return ast.fix_missing_locations(ast.copy_location(check, node))


#: Special methods a program's class may define besides those RestrictedPython allows (``__init__``,
#: ``__eq__``, ``__lt__``...): what models write (``__repr__``, ``__hash__``, ``__add__``, ``__len__``,
#: ``__iter__``...). Not the ones that change how attributes are read or written (``__getattr__``,
#: ``__setattr__``...), how classes are made (``__init_subclass__``, ``__set_name__``,
#: ``__class_getitem__``, ``__mro_entries__``, ``__new__``), how objects are copied or pickled
#: (``__reduce__``...), nor ``__del__``. A class deriving from a built-in value type may still define
#: none of them (:func:`_class_statement_refused`).
_MAGIC_METHODS = frozenset(f"__{n}__" for n in (
    "repr", "str", "hash", "bool", "len", "iter", "next", "reversed", "call", "getitem", "setitem", "delitem",
    "missing", "neg", "pos", "abs", "invert", "int", "float", "complex", "index", "round", "trunc", "floor", "ceil",
    "enter", "exit", "format",
    *(f"{prefix}{op}" for op in ("add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "divmod", "pow",
                                 "lshift", "rshift", "and", "or", "xor") for prefix in ("", "r", "i"))))
#: The special methods ``super().name`` may read (of the program's own instance: :func:`_getattr_guard`).
_SUPER_METHODS = frozenset({"__init__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
                            "__contains__"}) | _MAGIC_METHODS


class _Policy(RestrictingNodeTransformer):
    """RestrictedPython's policy, with ``x[i] += y`` and ``obj.a += y`` read as ``x[i] =
    _inplacevar_('+=', x[i], y)``, in place as Python does it (RestrictedPython refuses augmented
    assignment of items and attributes; programs count with it), and ``from m import *`` accepted (RestrictedPython refuses it; the import hook then gives a copy
    of ``m`` with only the names a program may hold and no name starting with ``_``), and ``__name__``
    read (``if __name__ == "__main__":``; not written). A second pass
    (:class:`_CallResults`) checks what each call of the program gives."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = super().visit_Call(node)
        node._sandbox_call = True
        return node

    def check_name(self, node, name, allow_magic_methods=False):
        # a method of a class (RestrictedPython allows ``__init__``, ``__eq__``, ``__lt__``... only)
        if allow_magic_methods and name in _MAGIC_METHODS and getattr(node, "col_offset", 0) != 0:
            return
        super().check_name(node, name, allow_magic_methods)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        # ``if __name__ == "__main__": main()``, which models write: reading ``__name__`` gives the
        # program's ``'__main__'``; writing it (a class's ``__module__`` comes from it) stays refused
        if node.id == "__name__" and isinstance(node.ctx, ast.Load):
            return node
        return super().visit_Name(node)

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        # ``super().__init__(...)``, ``super().__repr__()``: read through the guarded ``getattr``, which
        # gives these names of a ``super`` object that stands for the program's own instance
        if (node.attr in _SUPER_METHODS and isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "super"):
            read = ast.Call(func=ast.Name("_getattr_", ast.Load()),
                            args=[self.visit(node.value), ast.Constant(node.attr)], keywords=[])
            return ast.fix_missing_locations(ast.copy_location(read, node))
        return super().visit_Attribute(node)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> ast.AST:
        for name in node.names:
            self.check_name(node, name)
        return node

    def visit_Module(self, node: ast.Module) -> ast.AST:
        node = super().visit_Module(node)
        return _CallResults().visit(node)

    def visit_Expression(self, node: ast.Expression) -> ast.AST:
        node = super().visit_Expression(node)
        return _CallResults().visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        if [alias.name for alias in node.names] == ["*"] and not getattr(node, "is_lazy", 0):
            return self.node_contents_visit(node)
        return super().visit_ImportFrom(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        if isinstance(node.target, (ast.Subscript, ast.Attribute)):
            load = ast.parse(ast.unparse(node.target), mode="eval").body
            ast.copy_location(load, node.target)
            ast.fix_missing_locations(load)
            # ``x[i] = _inplacevar_('+=', x[i], y)``: in place, as Python does it (a list item extended);
            # the parts go through the policy, the hook's own name is added after
            target, load, operand = self.visit(node.target), self.visit(load), self.visit(node.value)
            value = ast.Call(func=ast.Name("_inplacevar_", ast.Load()),
                             args=[ast.Constant(_INPLACE_BY_NODE[type(node.op)]), load, operand], keywords=[])
            assign = ast.Assign(targets=[target], value=value)
            ast.copy_location(assign, node)
            ast.fix_missing_locations(assign)
            return assign
        return super().visit_AugAssign(node)


#: Modules bound in a program's namespace, as if imported, when it may import them: in a benchmark's
#: 3,840 programs, 29 used ``math`` or ``cmath`` without importing it (a ``NameError``). A program's
#: own ``import math`` or ``math = ...`` works as in Python.
PREBOUND = ("math", "cmath")


def _restricted_globals(printer: _Printer, allowed: frozenset[str], confined_writes: bool = False) -> dict:
    """The program's globals: built-ins, import hook, RestrictedPython's hooks and the modules of
    :data:`PREBOUND` that ``allowed`` holds. ``confined_writes``:
    Landlock confines this child's writes to its folder (:data:`SYMPY_FILE_WRITERS` are then held)."""
    import builtins

    _WRITES_CONFINED[0] = confined_writes

    names = dict(safe_builtins)
    names.update({n: getattr(builtins, n) for n in _BUILTIN_NAMES if hasattr(builtins, n)})
    for n in ("open", "compile", "eval", "exec", "globals", "locals", "vars", "dir", "input", "breakpoint",
              "memoryview", "help", "setattr", "delattr", "getattr"):
        names.pop(n, None)
    guarded_getattr = _getattr_guard(allowed)
    names["__import__"] = _importer(allowed)
    names["getattr"] = guarded_getattr
    names["hasattr"] = _guarded_hasattr
    names["__build_class__"] = _guarded_build_class
    names["type"] = _program_type
    # modules models use without importing them (``math.sqrt``), when the program may import them
    bound = {name: names["__import__"](name) for name in PREBOUND if name in allowed}
    return {**bound, "__builtins__": names, "__name__": "__main__", "__metaclass__": type,
            "_print_": printer, "_getattr_": guarded_getattr, "_getitem_": _checked_getitem,
            "_getiter_": default_guarded_getiter, "_iter_unpack_sequence_": _checked_iter_unpack_sequence,
            "_unpack_sequence_": _checked_unpack_sequence, "_write_": _write_guard, "_inplacevar_": _inplacevar,
            "_apply_": _checked_apply, **_CALL_CHECK_GLOBALS}


class _RestrictedSympyEval:
    """A replacement for ``sympy.parsing.sympy_parser.eval_expr`` in the child: sympy turns a string
    (``sympify("...")``, ``parse_expr``, any sympy function given a string) into Python code and
    ``eval``s it, which would hand back what RestrictedPython takes away (``__import__('os')``). Here
    that code is compiled by RestrictedPython too (no name or attribute with a leading ``_``) and run
    with the program's guarded built-ins and hooks. A code object (``evaluate=False``) is refused."""

    def __init__(self, restricted: dict):
        if _PROGRAM_GLOBALS[0] is not None:
            # made once per child before the program runs; a program reaches the class
            # (``sympy.Basic.func.fget(eval_expr)``) and would make one over hooks of its own
            raise TypeError("the sandbox's string evaluator cannot be made by a program")
        self._restricted = restricted  # a leading ``_``: the program's globals, out of its reach

    def __call__(self, code, local_dict, global_dict):
        from RestrictedPython import compile_restricted

        if not isinstance(code, str):
            raise ValueError("sympy parsing with evaluate=False is not available in the sandbox")
        compiled = compile_restricted(code, filename="<sympy string>", mode="eval", policy=_Policy)
        import builtins

        allowed = self._restricted["__builtins__"]
        # sympy copies Python's built-in functions (open, eval, exec...) into its parser's globals:
        # only those the program has stay
        env = {k: v for k, v in _plain_keys(global_dict).items() if k not in vars(builtins) or allowed.get(k) is v}
        env.update({k: v for k, v in self._restricted.items() if k.startswith("_")})
        # the locals come first in a name lookup: a program's ``local_dict={'_getattr_': f}`` would
        # replace the hooks of the restricted code; its names with a leading ``_`` are left out, and
        # keys that are not plain ``str`` (a key whose ``__eq__`` says ``'_write_'`` later: :func:`_plain`)
        if not isinstance(local_dict, dict):
            raise TypeError(f"local_dict must be a dict, not {type(local_dict).__name__}")
        local = _plain_keys(local_dict)
        return eval(compiled, env, local)  # noqa: S307 - restricted code, in the limited child


def _route_sympy(restricted: dict) -> None:
    """Route the child's library paths back to the restricted policy: sympy's string evaluation (when
    sympy is loaded), ``lambdify``'s names, ``operator.attrgetter``/``methodcaller``."""
    import sys

    parser = sys.modules.get("sympy.parsing.sympy_parser")
    if parser is not None:
        parser.eval_expr = _RestrictedSympyEval(restricted)
        _route_stringify(parser, restricted)
    _route_code_runners(restricted)
    _route_lambdify()
    _route_lambdify_code(restricted)
    _ALLOWED[0] = frozenset(restricted["__builtins__"]["__import__"].allowed_modules)
    _PROGRAM_GLOBALS[0] = restricted
    _route_importers()
    _route_operator(restricted["_getattr_"])
    for name in _WITHHELD:  # libraries that sympy's and mpmath's functions import themselves (see there)
        if name not in _ALLOWED[0]:
            sys.modules[name] = None
    for package in _WITHHELD_PACKAGES:
        for name in [n for n in sys.modules if n == package or n.startswith(package + ".")] or [package]:
            sys.modules[name] = None


#: Libraries a child may not load (or use, if the worker holds them) unless the program may import
#: them: library code imports with the interpreter's own ``import``, past the import hook. mpmath's
#: contexts (reachable through sympy) plot with ``import pylab`` and ``plot(f, file=path)`` writes
#: where the program says; sympy's ``matrix2numpy``/``list2numpy`` (and its samplers) import numpy
#: and hand back arrays (``tofile``, ``ctypes``), and numpy may never be allowed.
_WITHHELD = ("pylab", "matplotlib", "mpl_toolkits", "numpy", "scipy")


#: Packages of allowed libraries that library code may not load in a child either: sympy's test suite.
#: sympy keeps closures that import it (``doctest_depends_on``'s ``skiptests``, in the ``__dict__`` of
#: the functions it decorates, and made anew by ``doctest_depends_on(disable_viewers=[path])``), and
#: its ``_check_dependencies(disable_viewers=...)`` writes an executable file at any path.
_WITHHELD_PACKAGES = ("sympy.testing",)


def _withheld(name: str):
    def withheld(*args, **kwargs):
        raise NameError(f"name {name!r} is not defined")

    return withheld


def _program_view(global_dict, restricted: dict) -> dict:
    """What a program may see of a sympy parser's ``global_dict``: the same names (the transformations
    decide by them what is a symbol), but a name with a leading ``_`` (sympy's dict holds
    ``__builtins__``, the interpreter's) or a built-in function the program was not given (sympy copies
    ``eval``, ``open``, ``__import__``... into it) stands for a function that raises ``NameError``; a key
    that is not a plain ``str`` (:func:`_plain`) is left out."""
    import builtins

    allowed = restricted["__builtins__"]
    return {k: v if not k.startswith("_") and (k not in vars(builtins) or allowed.get(k) is v)
            else _withheld(k) for k, v in global_dict.items() if _plain(k)}


def _route_stringify(parser, restricted: dict) -> None:
    """``parse_expr`` hands its ``global_dict`` to every transformation, and a program may pass its own
    (``parse_expr(s, transformations=(..., mine))``): the transformations see :func:`_program_view`
    of it, not the interpreter's ``eval`` and ``__import__`` that sympy put there."""
    original = parser.stringify_expr
    if getattr(original, "__sandboxed__", False):
        return

    def stringify_expr(s, local_dict, global_dict, transformations):
        view = _program_view(global_dict, restricted) if isinstance(global_dict, dict) else global_dict
        return original(s, local_dict, view, transformations)

    stringify_expr.__sandboxed__ = True
    parser.stringify_expr = stringify_expr


#: sympy modules that compile and run code built from a program's values (symbol names, strings)
#: with the interpreter's own built-ins; they are loaded in the worker before it forks
#: (:data:`CODE_RUNNERS`), and in a child their ``exec``/``compile`` are replaced.
CODE_RUNNERS = ("sympy.parsing.ast_parser", "sympy.plotting.experimental_lambdify",
                "sympy.plotting.pygletplot.plot_interval", "mpmath.identification")


def _route_code_runners(restricted: dict) -> None:
    """``sympy.parsing.ast_parser.parse_expr`` compiles a program's string unrestricted (attribute access
    on a ``local_dict`` object reaches ``__globals__``): refused. ``experimental_lambdify`` ``exec``s a
    lambda printed from the expression (a symbol named ``__import__('os')...`` is code there), and
    pygletplot's ``PlotInterval`` ``eval``s a string it is given, and mpmath's ``identify(x, ['pi'])``
    (its contexts are reachable through sympy: ``sympy.polys.numberfields.utilities.mp``) ``eval``s
    each constant given as a string: all compiled by RestrictedPython and run with the program's
    built-ins and hooks."""
    import sys

    from RestrictedPython import compile_restricted

    hooks = {k: v for k, v in restricted.items() if k.startswith("_")}  # the program's built-ins and guards

    def restricted_eval(source, what: str, filename: str, names: dict):
        """``source`` (an expression string) compiled by RestrictedPython and evaluated over
        ``names`` and the program's hooks; ``ValueError`` naming ``what`` for code that is not a string."""
        if not isinstance(source, str):
            raise ValueError(f"{what} evaluated code that is not a string")
        code = compile_restricted(source, filename=filename, mode="eval", policy=_Policy)
        return eval(code, {**names, **hooks})  # noqa: S307 - restricted code, in the limited child

    ast_parser = sys.modules.get("sympy.parsing.ast_parser")
    if ast_parser is not None:
        @_own_runner
        def refused_compile(*args, **kwargs):
            raise NotImplementedError("sympy.parsing.ast_parser is not available in the sandbox "
                                      "(use sympy.parse_expr or sympify)")

        vars(ast_parser)["compile"] = vars(ast_parser)["eval"] = refused_compile  # eval too: should compile be put back
    lambdifier = sys.modules.get("sympy.plotting.experimental_lambdify")
    if lambdifier is not None:
        @_own_runner
        def exec_(source, globals=None, locals=None):
            # sympy reads what the code defined from ``globals`` (``MYNEWLAMBDA``): the names it
            # bound are copied back, the hooks and the program's ``_`` keys never mix with them
            if not isinstance(source, str):
                raise ValueError("experimental_lambdify ran code that is not a string")
            namespace = _plain_namespace(globals, "globals")
            local = None if locals is None else _plain_namespace(locals, "locals")
            code = compile_restricted(source, filename="<experimental_lambdify>", mode="exec", policy=_Policy)
            run = {**namespace, **hooks}
            result = exec(code, run, local)  # noqa: S102 - restricted code, in the limited child
            if globals is not None:
                globals.update({k: v for k, v in run.items() if k not in hooks})
            if locals is not None:
                locals.update(local)
            return result

        vars(lambdifier)["exec"] = exec_
    interval = sys.modules.get("sympy.plotting.pygletplot.plot_interval")
    if interval is not None:
        # ``PlotInterval("(x, 0, 1, 8)")`` ``eval``s its string (importable without pyglet)
        names = {k: v for k, v in vars(interval).items() if not k.startswith("_")}

        @_own_runner
        def eval_(source, globals=None, locals=None):
            return restricted_eval(source, "PlotInterval", "<PlotInterval string>", names)

        vars(interval)["eval"] = eval_
    identification = sys.modules.get("mpmath.identification")
    if identification is not None:
        @_own_runner
        def constant(source, globals=None, locals=None):
            names = _plain_keys(globals or {})
            return restricted_eval(source, "mpmath's identify", "<identify constant>", names)

        vars(identification)["eval"] = constant


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
                if name is not None and (not _plain(name) or not name.isidentifier() or keyword.iskeyword(name)
                                         or name.startswith("_")):
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


def _route_operator(guarded_getattr) -> None:
    """``operator.attrgetter('__class__')`` and ``methodcaller('__reduce_ex__', 2)`` reach what
    RestrictedPython's attribute rule refuses; in the child they refuse names with a leading ``_``
    (in any dotted part), and read each attribute through the program's ``guarded_getattr``."""
    import operator

    attrgetter = operator.attrgetter
    if getattr(attrgetter, "__sandboxed__", False):
        return

    def check(name):
        if not _plain(name):
            raise TypeError("attribute name must be a plain str in the sandbox")
        if any(part.startswith("_") for part in name.split(".")):
            raise AttributeError(f"{name!r} is an invalid attribute name because it starts with \"_\"")

    def fetch(obj, dotted):
        for part in dotted.split("."):
            obj = guarded_getattr(obj, part)
        return obj

    def guarded_attrgetter(*names):
        for name in names:
            check(name)
        attrgetter(*names)  # its own errors (no names) as the original gives them
        if len(names) == 1:
            return lambda obj: fetch(obj, names[0])
        return lambda obj: tuple(fetch(obj, name) for name in names)

    def guarded_methodcaller(name, *args, **kwargs):
        check(name)
        return lambda obj: guarded_getattr(obj, name)(*args, **kwargs)

    guarded_attrgetter.__sandboxed__ = True
    operator.attrgetter, operator.methodcaller = guarded_attrgetter, guarded_methodcaller


def _route_functools() -> None:
    """``functools.update_wrapper(wrapper, wrapped, assigned, updated)`` (and ``wraps``, which calls
    it) sets attributes with Python's own ``setattr``, past the ``_write_`` hook:
    ``update_wrapper(sympy.parsing.ast_parser, obj, assigned=('compile',))`` put back a ``compile``
    of the program's, and ``parse_expr`` then ``eval``'d the string it returned with the
    interpreter's built-ins. In the child it refuses a module on either side, a class the program
    did not define or one of the sandbox's routing objects as ``wrapper``, and any attribute name
    starting with ``_`` besides Python's standard ones (``__code__``, ``__defaults__``); sympy's
    own decorators (a function wrapping a function) pass. Done once in the worker, before it forks:
    the modules that hold the original (``from functools import update_wrapper``:
    ``sympy.printing.printer``, ``sympy.utilities.decorator``) get the checked one too."""
    import functools
    import sys

    original = functools.update_wrapper
    if getattr(original, "__sandboxed__", False):
        return
    standard = frozenset(functools.WRAPPER_ASSIGNMENTS) | frozenset(functools.WRAPPER_UPDATES)

    def update_wrapper(wrapper, wrapped, assigned=functools.WRAPPER_ASSIGNMENTS, updated=functools.WRAPPER_UPDATES):
        if (isinstance(wrapper, types.ModuleType) or isinstance(wrapped, types.ModuleType)
                or isinstance(wrapper, (_RestrictedSympyEval, _SafeFormatter))
                or (isinstance(wrapper, type) and _module_of(wrapper) != "__main__")
                or (_PROGRAM_GLOBALS[0] is not None and isinstance(_write_guard(wrapper), _ItemsOnly)
                    and "<locals>" not in str(getattr(wrapper, "__qualname__", "")))):
            # (a library's function the program can reach, ``sympy.Basic.subs``: its ``__dict__`` took
            # ``_op_priority``; a decorator's new closure, ``f.<locals>.wrapper``, is wrapped as usual)
            raise TypeError(f"the sandbox does not let a program change the attributes of {_described(wrapper)}")
        odd = [n for n in (*assigned, *updated) if not _plain(n) or (n.startswith("_") and n not in standard)]
        if odd:
            raise TypeError(f"update_wrapper of the attributes {odd!r} is not allowed in the sandbox")
        if (_PROGRAM_GLOBALS[0] is not None and "__dict__" in updated
                and isinstance(_write_guard(wrapped), _ItemsOnly)):
            # a library's function attributes starting with ``_`` are its own (``__doctest_skip__``, a
            # closure that imports sympy's test suite): a wrapper of the program's whose ``__dict__``
            # is a property handed them over; the public ones are copied
            result = original(wrapper, wrapped, assigned, tuple(n for n in updated if n != "__dict__"))
            getattr(wrapper, "__dict__").update(_plain_keys(getattr(wrapped, "__dict__", {})))
            return result
        return original(wrapper, wrapped, assigned, updated)

    update_wrapper.__sandboxed__ = True
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get("update_wrapper") is original:
            namespace["update_wrapper"] = update_wrapper


def _route_reconstruction() -> None:
    """``copy.copy``/``deepcopy`` of an object whose ``__reduce_ex__`` returns ``(f, args, state)`` call
    ``f(*args)`` and write ``state`` into what it returns, with the interpreter's own ``__dict__
    .update``/``setattr``, past the ``_write_`` hook. A program makes such a class with any metaclass
    it can call (``numbers.ABCMeta('X', (), {'__reduce_ex__': f})``) and reaches ``copy`` through
    sympy (``sympy.polys.agca.modules.copy``): ``f`` returning ``sympy.parsing.sympy_parser`` and
    ``state`` ``{'eval_expr': ...}`` replaced the sandbox's string evaluator. In the child a state
    is not written into anything :func:`_write_guard` protects (a module, a class or function the
    program did not define); items (a list's, a dict's) stay. Done once in the worker, before it
    forks; outside a child (before :func:`_route_sympy` has set the program's globals) ``copy`` is as it was."""
    import copy

    original = copy._reconstruct
    if getattr(original, "__sandboxed__", False):
        return

    def _reconstruct(x, memo, func, args, state=None, *rest, **kwargs):
        if state is not None and _PROGRAM_GLOBALS[0] is not None:  # in a child (the worker's own copies pass)
            # the state is written name by name (``setattr``, ``__setstate__``): plain ``dict``s whose
            # keys are plain ``str`` and no ``__x__`` name (``{'__class__': C}`` changed a sympy
            # instance's class to the program's)
            for part in (state if type(state) is tuple and len(state) == 2 else (state,)):
                if part is not None and (type(part) is not dict or not all(
                        _plain(k) and not (k.startswith("__") and k.endswith("__")) for k in part)):
                    raise TypeError("copy of an object whose state is not a dict of plain attribute names is not "
                                    "available in the sandbox")
            made = func

            def func(*a, **k):
                y = made(*a, **k)
                if isinstance(_write_guard(y), _ItemsOnly):
                    raise TypeError(f"the sandbox does not let a program change the attributes of {_described(y)}")
                return y

        return original(x, memo, func, args, state, *rest, **kwargs)

    _reconstruct.__sandboxed__ = True
    copy._reconstruct = _reconstruct


def _dressed_as(original, replacement):
    """``replacement`` (a function) made to look like ``original``: its ``__name__``, ``__qualname__``,
    ``__module__`` and ``__doc__`` copied over, and ``__sandboxed__ = True`` set (the mark each
    ``_route_*`` checks so it routes only once). Returns ``replacement``."""
    replacement.__name__, replacement.__qualname__ = original.__name__, original.__qualname__
    replacement.__module__, replacement.__doc__ = original.__module__, original.__doc__
    replacement.__sandboxed__ = True
    return replacement


def _swap_in_sympy(original, replacement, name: str, library: str = "sympy") -> None:
    """Dress ``replacement`` as ``original`` (:func:`_dressed_as`) and put it under ``name`` in every
    loaded module whose ``__name__`` starts with ``library`` and whose namespace holds ``original``
    itself under that name (``from sympy.core.cache import lazy_function`` made copies); other
    modules and other names are left as they are."""
    import sys

    _dressed_as(original, replacement)
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if (isinstance(namespace, dict) and str(getattr(module, "__name__", "")).startswith(library)
                and namespace.get(name) is original):
            namespace[name] = replacement


#: The method names ``call_highest_priority`` may call on the other operand: the binary operators.
_PRIORITY_NAMES = re.compile(r"__r?(add|sub|mul|matmul|truediv|floordiv|div|mod|divmod|pow|lshift|rshift|and|or|xor)__")


def _route_priority() -> None:
    """``sympy.core.decorators.call_highest_priority(name)`` makes a binary operator that calls
    ``getattr(other, name)(self)`` when ``other._op_priority`` is higher: with ``name``
    ``'__getattribute__'`` it read any attribute of a sympy object (``x.__class__``; of a function
    given ``_op_priority``, its ``__globals__``, whose built-ins hold ``eval``). In the child a
    name other than a binary operator's (``'__radd__'``, ``'__mul__'``...) is refused with
    ``ValueError``; sympy's own operators were made at import, before. Done once in the worker,
    before it forks, wherever a loaded sympy module holds it."""
    import sys

    decorators = sys.modules.get("sympy.core.decorators")
    original = getattr(decorators, "call_highest_priority", None)
    if original is None or getattr(original, "__sandboxed__", False):
        return

    def call_highest_priority(method_name):
        if _PROGRAM_GLOBALS[0] is not None and not (isinstance(method_name, str)
                                                    and _PRIORITY_NAMES.fullmatch(method_name)):
            raise ValueError(f"call_highest_priority of {method_name!r} is not allowed in the sandbox "
                             "(only a binary operator's method, such as '__radd__')")
        return original(method_name)

    _swap_in_sympy(original, call_highest_priority, "call_highest_priority")


def _route_attribute_helpers() -> None:
    """sympy's helpers that read or write an attribute whose name a program gives: ``sympy.printing
    .codeprinter.requires(**{'__dict__': d})(f)(obj)`` ran ``getattr(obj, '__dict__').update(d)``
    (a module's dict: the sandbox's ``eval_expr`` replaced); ``sympy.core.cache.cached_property(f)
    .fget(obj)`` reads and writes ``'__' + f.__name__`` of ``obj`` (``def globals__`` read a
    function's ``__globals__``), and ``sympy.utilities.decorator.memoize_property`` ``'_' + name``
    (``_restricted`` of the sandbox's string evaluator: the program's globals). In the child
    ``requires`` refuses names starting with ``_``, and those properties refuse an object whose
    attributes the program may not change (:func:`_write_guard`) and a name of the form ``__x__``;
    sympy's own uses (made at import, on its own instances) are as before. Done once in the worker,
    before it forks."""
    import functools
    import sys

    codeprinter = sys.modules.get("sympy.printing.codeprinter")
    requires = getattr(codeprinter, "requires", None)
    if requires is not None and not getattr(requires.__call__, "__sandboxed__", False):
        def __call__(self, method):
            req = self

            def _method_wrapper(self_, *args, **kwargs):
                for k, v in req._req.items():
                    if _PROGRAM_GLOBALS[0] is not None and (not _plain(k) or k.startswith("_")):
                        raise ValueError(f"requires of the attribute {k!r} is not allowed in the sandbox")
                    getattr(self_, k).update(v)
                return method(self_, *args, **kwargs)

            return functools.wraps(method)(_method_wrapper)

        __call__.__sandboxed__ = True
        requires.__call__ = __call__

    def checked(original, prefix):
        def make(func):
            raw = getattr(func, "__name__", "")
            if _PROGRAM_GLOBALS[0] is not None:
                # sympy makes the name with ``prefix + func.__name__`` itself: a ``str`` subclass's
                # ``__radd__`` gave it ``'gi_frame'`` (:func:`_plain`), and a property a second name;
                # it is given a stand-in whose name is the plain ``str`` checked here
                if not _plain(raw):
                    raise TypeError(f"{original.__name__} of a function whose name is not a plain str is not "
                                    "available in the sandbox")

                def stand_in(self, _func=func):
                    return _func(self)

                stand_in.__name__ = stand_in.__qualname__ = raw
                stand_in.__doc__ = getattr(func, "__doc__", None)
                func = stand_in
            prop = original(func)
            name = prefix + str(raw)

            def accessor(self):
                if _PROGRAM_GLOBALS[0] is not None and (isinstance(_write_guard(self), _ItemsOnly)
                                                        or (name.startswith("__") and name.endswith("__"))):
                    raise TypeError(f"the sandbox does not let a program reach the attribute {name!r} of "
                                    f"{_described(self)}")
                return prop.fget(self)

            functools.update_wrapper(accessor, prop.fget)
            return property(accessor)

        return _dressed_as(original, make)

    swaps = {}
    for module_name, name, prefix in (("sympy.core.cache", "cached_property", "__"),
                                      ("sympy.utilities.decorator", "memoize_property", "_")):
        original = getattr(sys.modules.get(module_name), name, None)
        if original is not None and not getattr(original, "__sandboxed__", False):
            swaps[id(original)] = (name, checked(original, prefix))
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict) or not str(getattr(module, "__name__", "")).startswith("sympy"):
            continue
        for key, value in list(namespace.items()):
            if id(value) in swaps and swaps[id(value)][0] == key:
                namespace[key] = swaps[id(value)][1]


def _route_printer_getattr() -> None:
    """sympy's ``Printer._print`` calls ``getattr(expr, self.printmethod)(self)``, and ``printmethod``
    is the program's to set (a class attribute of its printer, or of a sympy printer's instance):
    ``'__getattribute__'``, with a printer that is also a ``str`` (``'__globals__'``), read a
    function's ``__globals__``, whose built-ins hold ``eval``. ``sympy.printing.printer`` gets a
    ``getattr`` of its own (a module global, ahead of the built-in) that in a child refuses a name of
    the form ``__x``, and a name starting with ``_`` of an object whose attributes the program may
    not change (:func:`_write_guard`: a module, a library's function or class); its other reads
    (``_print_Symbol`` of the printer, ``_sympystr`` of an expression) are as before. The check is
    at the read itself, so a ``printmethod`` changed while ``_print`` runs is checked too. The LaTeX,
    code and Rust printers, which read ``'_print_' + name`` of a function's class name themselves,
    get the same ``getattr``. Done once in the worker, before it forks."""
    import builtins
    import sys

    real = builtins.getattr

    def getattr(obj, name, *default):
        if _PROGRAM_GLOBALS[0] is not None and (
                not _plain(name) or name.startswith("__")
                or (name.startswith("_") and isinstance(_write_guard(obj), _ItemsOnly))):
            raise TypeError(f"the sandbox does not let a printer reach the attribute {name!r} of {_described(obj)}")
        return real(obj, name, *default)

    # the printers that make a method's name from a class's name (``'_print_' + expr.func.__name__``;
    # a class's ``__name__`` may be a ``str`` subclass whose ``__radd__`` chooses the attribute)
    for name in ("sympy.printing.printer", "sympy.printing.latex", "sympy.printing.codeprinter", "sympy.printing.rust"):
        module = sys.modules.get(name)
        if module is not None and "getattr" not in vars(module):
            vars(module)["getattr"] = getattr


def _route_predicates() -> None:
    """sympy's deprecated ``AskHandler`` evaluation (``UndefinedPredicate.eval``, for a ``Predicate('p',
    handlers=[h])``) calls ``getattr(h, name)(expr, assumptions)`` for each class ``name`` in ``expr``'s
    type: a handler that was a module and an ``expr`` of a ``str`` class named ``__setattr__`` wrote
    the module's attribute (the sandbox's ``eval_expr`` replaced). In a child a predicate with handlers
    is refused (``NotImplementedError``) and one without gives ``None``, as sympy does, without
    running that loop. Done once in the worker, before it forks."""
    import sys

    assume = sys.modules.get("sympy.assumptions.assume")
    kind = getattr(assume, "UndefinedPredicate", None)
    original = getattr(kind, "eval", None)
    if original is None or getattr(original, "__sandboxed__", False):
        return

    def eval(self, args, assumptions=True):  # noqa: A001 - sympy's method name
        if _PROGRAM_GLOBALS[0] is None:
            return original(self, args, assumptions)
        if self.handlers:
            raise NotImplementedError("a Predicate with handlers (sympy's deprecated AskHandler system) is not "
                                      "available in the sandbox")
        return None

    kind.eval = _dressed_as(original, eval)


#: The parameter types of mpmath's hypergeometric summators: integer, rational, real, complex.
_HYPSUM_FLAGS = frozenset("ZQRC")


def _route_hyp_summator() -> None:
    """mpmath's ``ctx.hypsum(p, q, flags, coeffs, z)`` (an ``mp`` context is reachable through sympy:
    ``sympy.polys.numberfields.utilities.mp``) has ``libmp.make_hyp_summator((p, q, flags, ztype))``
    write the flags into the name of a function whose source it ``exec``s with the interpreter's
    built-ins: a flag ``"x(): pass\nimport os..."`` (a ``str`` subclass equal to ``'R'``) ran. In a
    child the key must be two plain ``int`` counts, flags that are each a plain ``str`` (:func:`_plain`)
    among ``Z``, ``Q``, ``R``, ``C``, and an argument type ``R`` or ``C``; anything else raises
    ``ValueError`` before any source is made. Done once in the worker, before it forks, wherever a
    loaded mpmath module holds it."""
    import sys

    libmp = sys.modules.get("mpmath.libmp")
    original = getattr(libmp, "make_hyp_summator", None)
    if original is None or getattr(original, "__sandboxed__", False):
        return

    def make_hyp_summator(key):
        if _PROGRAM_GLOBALS[0] is not None:
            parts = tuple(key) if type(key) is tuple else ()
            flags = parts[2] if len(parts) == 4 else None
            if not (len(parts) == 4 and type(parts[0]) is int and type(parts[1]) is int
                    and type(flags) in (tuple, list, str) and all(_plain(f) and f in _HYPSUM_FLAGS for f in flags)
                    and _plain(parts[3]) and parts[3] in ("R", "C")):
                raise ValueError("hypsum takes two whole numbers, parameter types among 'Z', 'Q', 'R', 'C' "
                                 "and an argument type 'R' or 'C' in the sandbox")
        return original(key)

    _swap_in_sympy(original, make_hyp_summator, "make_hyp_summator", library="mpmath")


def _route_public() -> None:
    """``sympy.utilities.decorator.public(obj)`` appends ``obj.__name__`` to the ``__all__`` of
    ``obj.__globals__`` (a function) or of ``sys.modules[obj.__module__]`` (a class, whose
    ``__module__`` its maker chooses): it wrote into any loaded module's ``__all__``, and a name that
    was a ``str`` subclass passed ``from m import *``'s check and bound ``__builtins__`` (the
    interpreter's) in the program's globals. In a child only the program's own function or class
    (``__module__`` ``'__main__'``) with a plain ``str`` name (:func:`_plain`) is taken, and its name
    goes to the program's own ``__all__``; anything else raises ``TypeError``. Done once in the worker,
    before it forks, wherever a loaded sympy module holds it."""
    import sys

    decorator = sys.modules.get("sympy.utilities.decorator")
    original = getattr(decorator, "public", None)
    if original is None or getattr(original, "__sandboxed__", False):
        return

    def public(obj):
        program = _PROGRAM_GLOBALS[0]
        if program is None:
            return original(obj)
        if isinstance(obj, types.FunctionType):
            own = obj.__globals__ is program
        else:
            own = isinstance(obj, type) and _module_of(obj) == "__main__"
        name = getattr(obj, "__name__", None)
        if not own or not _plain(name):
            raise TypeError("public takes only the program's own functions and classes (with a plain str name) "
                            "in the sandbox")
        names = program.setdefault("__all__", [])
        names.append(name)
        return obj

    _swap_in_sympy(original, public, "public")


def _route_library_registries() -> None:
    """sympy's paths that write a name a program chooses into sympy's shared state, or use it to pick
    an attribute, each checked in a child (sympy's own uses, made at import, are as before):

    - a new class of the metaclass ``OptionType`` wrote a property named by its ``option`` onto
      ``sympy.polys.polyoptions.Options`` and put itself in its table of options: refused;
    - a new class of the metaclass ``Singleton`` registers itself in ``sympy.S`` under its
      ``__name__``, deleting what ``S`` held there (``S.Zero``): a name that is not a plain ``str``
      (:func:`_plain`), starts with ``_`` or is one ``S`` has already is refused; ``S.x = v`` by the
      program is refused by :func:`_write_guard`;
    - ``Expr.expand(**hints)`` calls ``getattr(expr, '_eval_expand_' + hint)``: a hint that is not a
      plain ``str`` is refused (a subclass's ``__radd__`` chose the attribute);
    - ``Domain.convert_from(a, K)`` calls ``getattr(self, 'from_' + K.alias)(a, K)``: the alias (or
      the class name) must be a plain ``str`` not starting with ``_``;
    - ``doctest_depends_on(...)(obj)`` writes two attributes onto ``obj``: not onto a module or a
      registry (sympy's modules decorate their own functions with it as they load);
    - ``init_printing()`` sets ``sys.displayhook``: the printing settings are taken, the hook is put
      back as it was.

    Raises ``TypeError`` (``ValueError`` for a name). Done once in the worker, before it forks."""
    global _LIBRARY_STATE
    import sys

    options = sys.modules.get("sympy.polys.polyoptions")
    option_type = getattr(options, "OptionType", None)
    if option_type is not None and not getattr(option_type.__init__, "__sandboxed__", False):
        original_option = option_type.__init__

        def option_init(cls, *args, **kwargs):
            if _PROGRAM_GLOBALS[0] is not None:
                raise TypeError("a new polys option class (metaclass OptionType) is not available in the sandbox")
            return original_option(cls, *args, **kwargs)

        option_type.__init__ = _dressed_as(original_option, option_init)

    singleton = sys.modules.get("sympy.core.singleton")
    meta = getattr(singleton, "Singleton", None)
    if meta is not None and not getattr(meta.__init__, "__sandboxed__", False):
        original_singleton = meta.__init__
        registry = singleton.S

        def singleton_init(cls, *args, **kwargs):
            if _PROGRAM_GLOBALS[0] is not None:
                name = type.__dict__["__name__"].__get__(cls)
                # a registry keeps its entries on its class (``Registry.__setattr__``)
                if (not _plain(name) or name.startswith("_") or name in vars(type(registry))
                        or name in registry._classes_to_install):
                    raise ValueError(f"a singleton class named {str.__str__(name)!r} is not allowed in the sandbox "
                                     "(sympy.S has that name, or it starts with '_')")
            return original_singleton(cls, *args, **kwargs)

        meta.__init__ = _dressed_as(original_singleton, singleton_init)
        _LIBRARY_STATE += (getattr(sys.modules.get("sympy.core.core"), "Registry", type(registry)),)

    expr_module = sys.modules.get("sympy.core.expr")
    expr = getattr(expr_module, "Expr", None)
    if expr is not None and not getattr(expr.__dict__["expand"], "__sandboxed__", False):
        original_expand = expr.__dict__["expand"]

        def expand(self, *args, **hints):
            if _PROGRAM_GLOBALS[0] is not None and not all(_plain(k) for k in hints):
                raise TypeError("expand takes hints named by plain str in the sandbox")
            return original_expand(self, *args, **hints)

        expr.expand = _dressed_as(original_expand, expand)

    domain_module = sys.modules.get("sympy.polys.domains.domain")
    domain = getattr(domain_module, "Domain", None)
    if domain is not None and not getattr(domain.__dict__["convert_from"], "__sandboxed__", False):
        original_convert = domain.__dict__["convert_from"]

        def convert_from(self, element, base):
            if _PROGRAM_GLOBALS[0] is None:
                return original_convert(self, element, base)
            alias = base.alias
            name = alias if alias is not None else type(base).__name__
            if not _plain(name) or name.startswith("_"):
                raise TypeError("convert_from of a domain whose alias is not a plain str is not available in the "
                                "sandbox")
            convert = getattr(self, "from_" + name)
            result = convert(element, base) if convert is not None else None
            if result is not None:
                return result
            raise domain_module.CoercionFailed(
                f"Cannot convert {element} of type {type(element)} from {base} to {self}")

        domain.convert_from = _dressed_as(original_convert, convert_from)

    decorator = sys.modules.get("sympy.utilities.decorator")
    depends = getattr(decorator, "doctest_depends_on", None)
    if depends is not None and not getattr(depends, "__sandboxed__", False):
        def doctest_depends_on(*args, **kwargs):
            deco = depends(*args, **kwargs)
            if _PROGRAM_GLOBALS[0] is None:
                return deco

            def checked(obj):
                # sympy's modules decorate their own functions as they load, in the child too
                if isinstance(obj, (types.ModuleType, *_LIBRARY_STATE)):
                    raise TypeError(f"doctest_depends_on of {_described(obj)} is not allowed in the sandbox (it "
                                    "writes attributes onto what it decorates)")
                return deco(obj)

            return checked

        _swap_in_sympy(depends, doctest_depends_on, "doctest_depends_on")

    printing = sys.modules.get("sympy.interactive.printing")
    init = getattr(printing, "init_printing", None)
    if init is not None and not getattr(init, "__sandboxed__", False):
        def init_printing(*args, **kwargs):
            hook = sys.displayhook
            try:
                return init(*args, **kwargs)
            finally:
                sys.displayhook = hook

        _swap_in_sympy(init, init_printing, "init_printing")


def _route_metaclasses() -> None:
    """A program may not make a metaclass by calling one (``numbers.ABCMeta('M', (ABCMeta,), {...})``,
    ``FunctionClass('M', (FunctionClass,), {})``): a class of such a metaclass would answer its
    ``__mro__``, ``__name__``, ``==`` and ``hash`` with the program's code where libraries read them
    (a printer's walk of ``type(expr).__mro__``, caches keyed by class). Each metaclass loaded in the
    worker that is a Python class (``abc.ABCMeta``, sympy's ``FunctionClass``, ``Singleton``...) gets a
    ``__new__`` that, in a child, judges the bases and namespace of the class it is asked to make as a
    ``class`` statement is judged (:func:`_made_class_refused`: no metaclass, no subclass of a built-in
    value type with attributes of its own), before the class exists (``type.__new__`` hands it to the
    namespace's ``__set_name__`` and the bases' ``__init_subclass__``), and an
    ``__init__`` that, in a child, refuses a new class deriving from ``type`` with ``TypeError``
    (``class M(ABCMeta)`` is refused by :func:`_guarded_build_class`). ``type`` itself cannot be
    changed; a program never holds it (the module docstring says how). Libraries make their metaclasses
    with ``class`` statements, whose metaclass is ``type``: untouched. Done once in the worker,
    before it forks."""
    heap_type, immutable = 1 << 9, 1 << 8  # Py_TPFLAGS_HEAPTYPE (a class made at run time), Py_TPFLAGS_IMMUTABLETYPE
    metaclasses, todo = [], [type]
    while todo:
        for meta in type.__subclasses__(todo.pop()):
            if meta not in metaclasses:
                metaclasses.append(meta)
                todo.append(meta)
    for meta in metaclasses:
        own = meta.__dict__.get("__init__")
        if not meta.__flags__ & heap_type or meta.__flags__ & immutable or getattr(own, "__sandboxed__", False):
            continue

        def __init__(cls, *args, _meta=meta, _own=own, **kwargs):
            if _PROGRAM_GLOBALS[0] is not None and type in type.__dict__["__mro__"].__get__(cls)[1:]:
                raise TypeError(f"a metaclass made by calling {_meta.__name__} is not allowed in the sandbox")
            if _own is not None:
                return _own(cls, *args, **kwargs)
            return super(_meta, cls).__init__(*args, **kwargs)

        __init__.__sandboxed__ = True
        if own is not None:
            __init__.__name__, __init__.__qualname__, __init__.__doc__ = own.__name__, own.__qualname__, own.__doc__
        own_new = meta.__dict__.get("__new__")
        own_new = getattr(own_new, "__func__", own_new)  # a staticmethod's function

        def __new__(mcls, *args, _meta=meta, _own=own_new, **kwargs):
            # before the class exists: ``type.__new__`` hands it to the namespace's ``__set_name__``
            # and to the bases' ``__init_subclass__``, which are the program's
            if _PROGRAM_GLOBALS[0] is not None and len(args) == 3 and (why := _made_class_refused(*args, maker=mcls)):
                raise TypeError(why)
            if _own is not None:
                return _own(mcls, *args, **kwargs)
            return super(_meta, mcls).__new__(mcls, *args, **kwargs)

        __new__.__sandboxed__ = True
        try:
            meta.__init__ = __init__
            meta.__new__ = staticmethod(__new__)
        except TypeError:  # an extension's metaclass that cannot be changed (Cython's): left as it is
            pass


def _made_class_refused(name, bases, namespace, maker=None) -> str | None:
    """Why a metaclass call (``numbers.ABCMeta('S', (str,), {...})``, sympy's ``Function('f',
    bases=..., __dict__=...)``) may not make the class ``name`` of ``bases`` and ``namespace`` in a
    child, or ``None``: the rules of a ``class`` statement (:func:`_class_statement_refused`: no
    metaclass, no subclass of a built-in value type with attributes of its own), whoever calls it;
    ``maker`` is the metaclass called (enum's makes ``Enum`` classes, :func:`_enum_body`)."""
    if type(bases) is not tuple or not all(isinstance(b, type) for b in bases):
        return None  # ``type.__new__`` refuses it itself
    if isinstance(namespace, dict):  # its items as ``type.__new__`` copies them, without the program's code
        items = list(dict.items(namespace))
    else:
        try:
            items = [(k, _MISSING) for k in namespace]
        except TypeError:
            return None
    names = {k: v for k, v in items if _plain(k)}
    if len(names) < len(items):
        names["<a name that is not a plain str>"] = _MISSING
    why = _class_statement_refused(bases, names, type, name, maker)
    if why is None:
        return None
    shown = str.__str__(name) if _plain(name) else "?"
    return f"class {shown}: {why} is not allowed in the sandbox"


#: Types of sympy's shared objects whose attributes a program may not set (its registries, ``sympy.S``),
#: filled by :func:`_route_library_registries`.
_LIBRARY_STATE: tuple[type, ...] = ()


def _route_library_classes() -> None:
    """Library helpers that write into the class they are given, with the interpreter's own
    ``setattr``, past the ``_write_`` hook: ``functools.total_ordering(cls)`` sets the comparisons
    ``cls`` lacks, ``abc.ABCMeta.register(cls, sub)`` (``numbers.Number.register(str)``) adds to the
    registry that ``isinstance(x, cls)`` answers from (library code in the child then took a ``str``
    for a number). In a child each refuses, with ``TypeError``, a class whose attributes the program
    may not change (:func:`_write_guard`: a class it did not define) unless the code of a module
    being imported calls it (a module imported lazily in the child); the program's own classes pass. Done once
    in the worker, before it forks, wherever a loaded module holds the original."""
    import abc
    import functools
    import sys

    def from_library() -> bool:
        # the caller's globals are those of a module being imported (a module imported lazily in the
        # child decorates its classes as it loads); the program's, a restricted evaluation's, or a
        # loaded library function's that calls the program's key (heapq.nsmallest(1, [cls],
        # key=functools.total_ordering)) are not
        caller = sys._getframe(2).f_globals
        name = caller.get("__name__")
        module = sys.modules.get(name) if _plain(name) else None
        return (module is not None and name != "__main__" and getattr(module, "__dict__", None) is caller
                and getattr(getattr(module, "__spec__", None), "_initializing", False) is True)

    def guarded(original, what: str):
        def check(cls, *args, **kwargs):
            if (_PROGRAM_GLOBALS[0] is not None and isinstance(_write_guard(cls), _ItemsOnly)
                    and not from_library()):
                raise TypeError(f"{what} of {_described(cls)} is not allowed in the sandbox (it writes into a "
                                "class the program did not define)")
            return original(cls, *args, **kwargs)

        return _dressed_as(original, check)

    ordering = functools.total_ordering
    if not getattr(ordering, "__sandboxed__", False):
        checked = guarded(ordering, "total_ordering")
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if isinstance(namespace, dict) and namespace.get("total_ordering") is ordering:
                namespace["total_ordering"] = checked
    register = abc.ABCMeta.__dict__.get("register")
    if register is not None and not getattr(register, "__sandboxed__", False):
        abc.ABCMeta.register = guarded(register, "register")


def _route_lazy_function() -> None:
    """``sympy.core.cache.lazy_function(module, name)`` makes a proxy that imports ``module`` with
    ``importlib`` (past the import hook) and calls its ``name``: ``lazy_function('os', 'system')``
    ran a shell command. sympy makes its proxies at import (``sympy.test``); in a child the function
    is refused (``ImportError``). Done once in the worker, before it forks, wherever a loaded sympy
    module holds it."""
    import sys

    cache = sys.modules.get("sympy.core.cache")
    original = getattr(cache, "lazy_function", None)
    if original is None or getattr(original, "__sandboxed__", False):
        return

    def lazy_function(module, name):
        if _PROGRAM_GLOBALS[0] is not None:
            raise ImportError(f"lazy_function({module!r}, {name!r}) is not available in the sandbox (import the module)")
        return original(module, name)

    _swap_in_sympy(original, lazy_function, "lazy_function")


def _route_mpmath_names() -> None:
    """A sympy ``Function`` without an ``_eval_evalf`` of its own is evaluated by ``getattr(mpmath,
    name)(*args)``, ``name`` its class's name (or ``MPMATH_TRANSLATIONS[name]``, a table a program
    may edit): a class named ``__setattr__`` (a metaclass makes one) wrote any attribute of the
    ``mpmath`` module. ``sympy.core.function`` gets a copy of ``mpmath`` with its public names only:
    a name with a leading ``_`` then finds the copy's own methods (a write lands in the copy).
    Done once in the worker, before it forks."""
    import sys

    function = sys.modules.get("sympy.core.function")
    real = sys.modules.get("mpmath")
    if function is None or real is None or vars(function).get("mpmath") is not real:
        return
    view = types.ModuleType("mpmath")
    vars(view).update({k: v for k, v in vars(real).items() if isinstance(k, str) and not k.startswith("_")})
    vars(function)["mpmath"] = view


def _route_annotations() -> None:
    """``typing.get_type_hints`` evaluates an annotation written as a string (and RestrictedPython
    compiles every program with ``from __future__ import annotations``: all of a program's are
    strings) with the interpreter's ``eval``, compiled without RestrictedPython:
    ``functools.singledispatch``'s ``register(g)`` did so for ``def g(x: "().__class__.__base__
    .__subclasses__()...")`` and the walk reached ``os``. In the child such an annotation (a
    ``typing.ForwardRef``) is compiled by RestrictedPython and evaluated only in the program's own
    globals (its built-ins and hooks: ``def g(x: int)`` works); in any other namespace (an object's
    ``__globals__`` of the program's making, a module's) it is refused with ``TypeError``. Done once
    in the worker, before it forks (the program's globals are set per child by :func:`_route_sympy`);
    outside a child (the worker, a process that imports it) annotations evaluate as ``typing`` does."""
    import typing

    from RestrictedPython import compile_restricted

    forward = getattr(typing, "ForwardRef", None)
    original = getattr(forward, "_evaluate", None)
    if original is None:  # a typing without ForwardRef._evaluate (newer Python): no evaluation in a child at all
        hints = typing.get_type_hints
        if getattr(hints, "__sandboxed__", False):
            return

        def get_type_hints(*args, **kwargs):
            if _PROGRAM_GLOBALS[0] is not None:
                raise TypeError("the sandbox does not evaluate annotations on this Python; write the class itself "
                                "(register(int))")
            return hints(*args, **kwargs)

        get_type_hints.__sandboxed__ = True
        typing.get_type_hints = get_type_hints
        _REFUSED_FUNCTIONS[id(get_type_hints)] = _TYPING_REFUSED["get_type_hints"]  # (``hints`` keeps it)
        return
    if getattr(original, "__sandboxed__", False):
        return

    def _evaluate(self, globalns, localns, *args, **kwargs):
        program = _PROGRAM_GLOBALS[0]
        if program is None:  # not in a child (the worker, or a process that imported it): as typing does
            return original(self, globalns, localns, *args, **kwargs)
        if (globalns is not program or (localns is not None and localns is not globalns)
                or getattr(self, "__forward_module__", None) is not None):
            raise TypeError("the sandbox evaluates an annotation written as a string only in the program's own "
                            f"namespace ({getattr(self, '__forward_arg__', '?')!r})")
        self.__forward_code__ = compile_restricted(self.__forward_arg__, filename="<annotation>", mode="eval",
                                                   policy=_Policy)
        return original(self, globalns, localns, *args, **kwargs)

    _evaluate.__sandboxed__ = True
    forward._evaluate = _evaluate


#: The running program's globals (set per child by :func:`_route_sympy`; read by :func:`_route_annotations`).
_PROGRAM_GLOBALS: list[dict | None] = [None]


def _route_var() -> None:
    """``sympy.var('x y')`` writes the symbols it makes into its caller's globals, by their names:
    ``var('_write_', cls=C)`` replaced the program's ``_write_`` hook (RestrictedPython's attribute
    writes) with an object of the program's, and ``var('__builtins__')`` its built-ins. In a child
    (once :func:`_route_sympy` has set the program's globals) a name starting with ``_`` is refused
    (``ValueError``) before anything is written; elsewhere ``var`` is sympy's. Done once in the
    worker, before it forks, wherever a loaded sympy module holds ``var``."""
    import sys

    symbol = sys.modules.get("sympy.core.symbol")
    original = getattr(symbol, "var", None)
    if original is None or getattr(original, "__sandboxed__", False):
        return
    from sympy.core.basic import Basic
    from sympy.core.function import FunctionClass

    def var(names, **args):
        frame = sys._getframe(1)
        try:
            made = symbol.symbols(names, **args)
            found: list = []

            def collect(item):
                if isinstance(item, Basic):
                    found.append((item.name, item))
                elif isinstance(item, FunctionClass):
                    found.append((item.__name__, item))
                elif item is not None:
                    for sub in item:
                        collect(sub)

            collect(made)
            _check_frame_write("var", frame, [n for n, _ in found])
            for name, item in found:
                frame.f_globals[name] = item
        finally:
            del frame
        return made

    _swap_in_sympy(original, var, "var")


def _check_frame_write(what: str, frame, names: list) -> None:
    """In a child (once :func:`_route_sympy` has set the program's globals), ``ValueError`` unless
    ``what`` (``var``, ``vring``...) writes ``names`` into the program's own globals and none of them
    starts with ``_``: called from C code that library code drives (``map(var, [...])`` iterated by
    ``parse_expr``), its caller's frame is the library's, and ``var('eval_expr', cls=C)`` replaced
    the sandbox's restricted evaluator in ``sympy_parser`` with the program's object; a name
    starting with ``_`` would replace the program's hooks (``_getattr_``, ``__builtins__``)."""
    program = _PROGRAM_GLOBALS[0]
    if program is None:
        return
    if frame is None or frame.f_globals is not program:
        module = frame.f_globals.get("__name__") if frame is not None else None
        where = f"the module {module!r}" if _plain(module) else "a library's frame"
        raise ValueError(f"{what} called from library code ({where}) is not allowed in the sandbox: it writes "
                         "into its caller's globals")
    if odd := [n for n in names if not _plain(n) or n.startswith("_")]:
        raise ValueError(f"{what} of the names {odd!r} is not allowed in the sandbox (a name starting "
                         "with _ would replace the program's hooks)")


def _route_pollute() -> None:
    """``sympy.utilities.magic.pollute(names, objects)`` writes ``objects`` into the globals of its
    caller's caller: ``vring``, ``vfield`` (``sympy.polys``), ``vfree_group`` and ``vfp_group``
    (``sympy.combinatorics``) inject their generators so, by the names of the program's symbols,
    ``_getattr_`` included, and into a library module's globals when C code that library code drives
    calls them. In a child the names and the frame are checked first (:func:`_check_frame_write`,
    naming the function that called ``pollute``). Done once in the worker, before it forks, wherever a
    loaded sympy module holds ``pollute``."""
    import sys

    magic = sys.modules.get("sympy.utilities.magic")
    original = getattr(magic, "pollute", None)
    if original is None or getattr(original, "__sandboxed__", False):
        return

    def pollute(names, objects):
        frame = sys._getframe(2)
        try:
            pairs = list(zip(names, objects))
            _check_frame_write(sys._getframe(1).f_code.co_name, frame, [n for n, _ in pairs])
            for name, obj in pairs:
                frame.f_globals[name] = obj
        finally:
            del frame

    _swap_in_sympy(original, pollute, "pollute")


class _GeneratedPolicy(_Policy):
    """The policy for the code ``lambdify`` prints from an expression: the program's policy, with
    the names that printer itself writes (``_lambdifygenerated``, ``_Dummy_38``, ``builtins``)."""

    def check_name(self, node, name, allow_magic_methods=False):
        if name == "builtins" or (isinstance(name, str) and re.fullmatch(r"_lambdifygenerated|_Dummy_\d+", name)):
            return
        super().check_name(node, name, allow_magic_methods)


#: The modules ``lambdify`` itself imports for its default numeric namespaces (``math``, ``mpmath``,
#: ``sympy``), allowed to its import lines besides the program's own.
_LAMBDIFY_MODULES = frozenset({"math", "mpmath", "sympy"})


def _lambdify_import_line(source, allowed: frozenset[str]) -> ast.Module:
    """The import statements ``source`` (a line ``lambdify`` ``exec``s: its ``MODULES`` table's
    import commands, or a printer's ``module_imports`` as ``from M import k``), or ``ImportError``:
    a program can edit that table and a printer's ``module_imports`` (``from os import getpid``
    was run with the interpreter's ``__import__``, and the generated code called it)."""
    try:
        tree = ast.parse(source) if isinstance(source, str) else None
    except SyntaxError:
        tree = None
    if tree is None or not all(isinstance(node, (ast.Import, ast.ImportFrom)) for node in tree.body):
        raise ImportError(f"lambdify may only run import lines in the sandbox, not {source!r}")
    return tree


def _route_lambdify_code(restricted: dict) -> None:
    """Compile and run the code ``lambdify`` prints the way the program is run: RestrictedPython's
    policy, the program's built-ins and hooks, and ``builtins`` standing for the program's built-ins.
    (sympy runs that code with the interpreter's own built-ins: a function named ``eval`` or a symbol
    named ``builtins`` would reach them.) Its import lines (``exec``) and ``import_module('m')``
    commands (``eval``), which a program can edit, go through the program's import check (with
    :data:`_LAMBDIFY_MODULES` besides) and nothing else."""
    import sys

    from RestrictedPython import compile_restricted

    module = sys.modules.get("sympy.utilities.lambdify")
    if module is None or "compile" in vars(module):
        return
    names = {k: v for k, v in restricted["__builtins__"].items() if not k.startswith("_")}

    def generated(filename) -> bool:
        return isinstance(filename, str) and filename.startswith("<lambdifygenerated")

    @_own_runner
    def compile_(source, filename, mode, *args, **kwargs):
        # sympy compiles only the code it prints, under a ``<lambdifygenerated-N>`` filename
        if not generated(filename):
            raise ValueError(f"lambdify may only compile its generated code in the sandbox, not {filename!r}")
        return compile_restricted(source, filename=filename, mode=mode, policy=_GeneratedPolicy)

    importer = _importer(frozenset(restricted["__builtins__"]["__import__"].allowed_modules | _LAMBDIFY_MODULES))

    @_own_runner
    def exec_(code, globals=None, locals=None):
        # sympy reads the function the code defined from ``locals`` (``_lambdifygenerated``): what
        # the code bound there is copied back; the program's ``_`` keys never reach the run
        namespace = _plain_namespace(globals, "globals")
        local = None if locals is None else _plain_namespace(locals, "locals")
        if isinstance(code, types.CodeType) and generated(code.co_filename):
            namespace.update({k: v for k, v in restricted.items() if k.startswith("_")})
            namespace["builtins"] = types.SimpleNamespace(**names)
            result = exec(code, namespace, local)  # noqa: S102 - the printed code, compiled restricted above
        else:
            tree = _lambdify_import_line(code, importer.allowed_modules)
            if local is None:
                local = namespace
            result = exec(compile(tree, "<lambdify import>", "exec"),  # noqa: S102 - import lines only
                          {"__builtins__": {"__import__": importer}}, local)
        if locals is not None:
            locals.update(local)
        elif globals is not None and local is namespace:
            globals.update(local)
        return result

    @_own_runner
    def eval_(source, globals=None, locals=None):
        try:
            call = ast.parse(source, mode="eval").body if isinstance(source, str) else None
        except SyntaxError:
            call = None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "import_module"
                and len(call.args) == 1 and not call.keywords and isinstance(call.args[0], ast.Constant)
                and isinstance(call.args[0].value, str)):
            raise ImportError(f"lambdify may only run import_module('name') in the sandbox, not {source!r}")
        name = call.args[0].value
        if name.split(".")[0] not in importer.allowed_modules or _closed_module(name) or _library_refused(name):
            return None  # as if not installed, like sympy's import_module for a missing module
        return module.import_module(name)

    module.compile, module.exec, module.eval = compile_, exec_, eval_


def _route_user_string() -> None:
    """``collections.UserString.format`` and ``format_map`` are ``self.data.format(...)``: read from the
    class (``UserString.format(u, x)``, or handed to ``map``, ``functools.partial``,
    ``operator.methodcaller``) they ran ``str.format`` on the program's string without the guarded
    ``getattr``, and ``'{0.__class__.__mro__}'`` read any attribute (the guarded ``getattr`` only sees
    ``u.format`` of an instance). In a child both format ``self.data`` through the program's guarded
    ``getattr`` (its ``format`` of a ``str`` is :class:`_SafeFormatter`), whoever calls them. Done once
    in the worker, before it forks."""
    user = collections.UserString
    for name in ("format", "format_map"):
        original = user.__dict__.get(name)
        if original is None or getattr(original, "__sandboxed__", False):
            continue

        def method(self, *args, _original=original, _name=name, **kwargs):
            program = _PROGRAM_GLOBALS[0]
            if program is None:
                return _original(self, *args, **kwargs)
            return program["_getattr_"](self.data, _name)(*args, **kwargs)

        setattr(user, name, _dressed_as(original, method))


def _route_containers() -> None:
    """Values a holdable sympy module keeps in a public table are not checked when a program reads
    them (``d['k']``, ``d.get('k')``, ``list(d.values())``: no hook sees them): such a table must
    hold nothing the program may not hold. ``sympy.strategies.util.basic_fns`` and ``expr_fns``
    (shared by ``sympy.strategies.traverse`` and ``branch.traverse``) keep the built-in ``type`` as
    ``'op'``: replaced by a one-argument function that refuses a class the program may not hold.
    (``tests/test_probe_round11_sandbox.py`` scans every holdable module's tables.) Done once in the
    worker, before it forks."""
    try:
        from sympy.strategies import util
    except ImportError:
        return

    def op(expr):
        kind = type(expr)
        if why := _refused(kind, _ALLOWED[0]):
            raise TypeError(f"the class of that object {why}")
        return kind

    for table in (util.basic_fns, util.expr_fns):
        if table.get("op") is type:
            table["op"] = op


#: The modules the running program may import (set per child by :func:`_route_sympy`; read by the
#: wrappers :func:`_route_importers` installs, once, in the worker before it forks).
_ALLOWED: list[frozenset[str]] = [frozenset()]
_IMPORTERS_ROUTED: list[bool] = [False]


#: ``sympy.external.import_module``'s parameters after ``module``, in order.
_IMPORT_MODULE_PARAMETERS = ("min_module_version", "min_python_version", "warn_not_installed", "warn_old_version",
                             "module_version_attr", "module_version_attr_call_args", "import_kwargs", "catch")


def _import_module_options(module: str, args: tuple, kwargs: dict) -> str | None:
    """What of ``import_module(module, ...)``'s options (``args`` after the module, ``kwargs``) a child
    may not use, or ``None``: a ``module_version_attr`` other than ``'__version__'`` or any
    ``module_version_attr_call_args`` (``getattr(module, attr)(*args)``: ``'__setattr__'`` wrote
    a module's attribute), ``import_kwargs`` other than a ``fromlist`` of plain public names
    (``level``, ``globals``: a relative import) that are not closed submodules."""
    options = dict(zip(_IMPORT_MODULE_PARAMETERS, args))
    options.update(kwargs)
    attr = options.get("module_version_attr", "__version__")
    if not (_plain(attr) and attr == "__version__"):
        return f"module_version_attr={attr!r}"
    if options.get("module_version_attr_call_args") is not None:
        return "module_version_attr_call_args"
    extra = options.get("import_kwargs") or {}
    if type(extra) is not dict or set(extra) - {"fromlist"}:
        return f"import_kwargs={extra!r}"
    names = extra.get("fromlist", ())
    if not isinstance(names, (list, tuple)) or not all(_plain(n) and not n.startswith("_") for n in names):
        return f"fromlist={names!r}"
    if closed := [n for n in names if _closed_module(f"{module}.{n}")]:  # ``['testing']`` of sympy loads it
        return f"fromlist={closed!r}"
    return None


def _route_importers() -> None:
    """sympy's functions that import a module by name (``sympy.external.import_module``,
    ``sympy.utilities.source.get_class``) bypass the import hook: wrapped, a module outside the
    program's allowed ones (:data:`_ALLOWED`) is as if not installed (``import_module`` gives
    ``None``, also when what it imported is such a module; ``get_class`` raises ``ImportError``),
    wherever a loaded sympy module holds them; the name must be a plain ``str`` (:func:`_plain`),
    and in a child ``import_module``'s options that read or call an attribute by name are refused
    (:func:`_import_module_options`).
    Done once per process (the worker calls it before forking: a child then touches no module's
    dict, and shares those pages)."""
    import sys

    if _IMPORTERS_ROUTED[0]:
        return
    importtools, source = sys.modules.get("sympy.external.importtools"), sys.modules.get("sympy.utilities.source")
    if importtools is None or source is None:
        return
    original_import, original_get_class = importtools.import_module, source.get_class

    def import_module(module, *args, **kwargs):
        if (not _plain(module) or module.split(".")[0] not in _ALLOWED[0] or _closed_module(module)
                or _library_refused(module)):
            return None
        if _PROGRAM_GLOBALS[0] is not None and (why := _import_module_options(module, args, kwargs)):
            raise ValueError(f"import_module with {why} is not available in the sandbox")
        found = original_import(module, *args, **kwargs)
        return None if found is not None and _refused(found, _ALLOWED[0]) else found

    def get_class(lookup_view):
        if not _plain(lookup_view):
            raise ImportError("get_class takes a plain str in the sandbox")
        if lookup_view.split(".")[0] not in _ALLOWED[0]:
            raise ImportError(f"import of {lookup_view!r} is not allowed")
        value = original_get_class(lookup_view)
        if why := _refused(value, _ALLOWED[0]):
            raise ImportError(f"{lookup_view!r} {why}")
        return value

    swaps = {id(original_import): import_module, id(original_get_class): get_class}
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict) or not str(getattr(module, "__name__", "")).startswith("sympy"):
            continue
        for name in ("import_module", "get_class"):
            if id(namespace.get(name)) in swaps:
                namespace[name] = swaps[id(namespace[name])]
    _IMPORTERS_ROUTED[0] = True
