"""One mechanism for the packages' lazy public names: ``__getattr__``/``__dir__`` that import a name's
module on first use, so ``import pipeline`` (or ``converters``) stays cheap and TensorFlow, numba or boto3
load only when a function that needs them is used."""
from __future__ import annotations

import importlib
import sys
import types
from typing import Any, Callable, Mapping

__all__ = ["lazy_exports"]


class _Package(types.ModuleType):
    """A package with lazy public names, one of which may share its name with the submodule defining it
    (``pipeline.describe``, the function, in ``pipeline/describe.py``): importing that submodule binds it on the
    package (the import system's ``setattr``), which would hide the function from ``from pipeline import
    describe``. The public name keeps its value instead."""

    def __setattr__(self, name: str, value: Any) -> None:
        where = self.__dict__.get("_lazy_where", {})
        if name in where and isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}":
            value = _public(self.__name__, where[name], name)
        super().__setattr__(name, value)


def _public(package: str, module: str, name: str) -> Any:
    """The public ``name`` of ``package``, from its defining ``module`` (relative to the package)."""
    return getattr(importlib.import_module(module, package), name)


def lazy_exports(package: str, where: Mapping[str, str], namespace: dict[str, Any]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``where`` maps a public name to the submodule (relative to
    the package, e.g. ``".build"``) that defines it. The value is cached in ``namespace`` (the package's
    ``globals()``) after the first lookup; an unknown name raises ``AttributeError``."""
    where = dict(where)
    namespace["_lazy_where"] = where
    sys.modules[package].__class__ = _Package  # a same-named submodule's import keeps the public name

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = _public(package, module, name)
        namespace[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where) | set(namespace.get("__all__", ())))

    return __getattr__, __dir__
