"""A registry of extension modules found by their package: decorate a class to register it;
`discover()` imports every module of the package once so their decorators run. Attention
variants, MLP variants and layouts each keep one, so a new one is one new module, no central
edit."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, package: str, what: str, key: Callable[[Any], str]):
        self._package = package
        self._what = what
        self._key = key
        self._entries: dict[str, T] = {}
        self._discovered = False

    def register(self, entry: T) -> T:
        k = self._key(entry)
        if k in self._entries and self._entries[k] is not entry:
            raise RuntimeError(f"{self._what} '{k}' registered twice")
        self._entries[k] = entry
        return entry

    def discover(self) -> dict[str, T]:
        # NOTE: the package is listed once; later calls (every deployment asks) reuse what its
        # modules registered — listing the folder each time cost ~1 ms per call.
        if not self._discovered:
            pkg = importlib.import_module(self._package)
            for info in pkgutil.iter_modules(pkg.__path__):
                if info.name != "base":
                    importlib.import_module(f"{self._package}.{info.name}")
            self._discovered = True
        return dict(self._entries)

    def claim(self, *args: Any) -> Any:
        """The first non-None `from_hf_config(*args)` over entries, highest `priority` first."""
        for cls in sorted(self.discover().values(), key=lambda c: -c.priority):
            v = cls.from_hf_config(*args)
            if v is not None:
                return v
        return None
