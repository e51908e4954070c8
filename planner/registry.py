"""A registry of extension modules found by their package: decorate a class to register it;
`discover()` imports every module of the package once so their decorators run. Attention
variants, MLP variants and layouts each keep one, so a new one is one new module, no central
edit.

NOTE: the package is scanned once (the first `discover()`); later calls return the live entries,
so an entry registered after that — a module imported later, or a test's toy layout — is seen
too. `Deployment.attention_layout` asks on every access: a scan costs ~0.4 ms, and a one-point
`step_cost` fell from 8.6 to 2.0 ms once cached (measured with a test run sharing the 2 cores)."""

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
        self._scanned = False

    def register(self, entry: T) -> T:
        k = self._key(entry)
        if k in self._entries and self._entries[k] is not entry:
            raise RuntimeError(f"{self._what} '{k}' registered twice")
        self._entries[k] = entry
        return entry

    def unregister(self, key: str) -> None:
        """Forget an entry (a test's toy entry, at teardown)."""
        self._entries.pop(key, None)

    def discover(self) -> dict[str, T]:
        """Every entry, in registration order (the package's modules are imported on the first call)."""
        if not self._scanned:
            pkg = importlib.import_module(self._package)
            for info in pkgutil.iter_modules(pkg.__path__):
                if info.name != "base":
                    importlib.import_module(f"{self._package}.{info.name}")
            self._scanned = True
        return dict(self._entries)

    def claim(self, *args: Any) -> Any:
        """The first non-None `from_hf_config(*args)` over entries, highest `priority` first."""
        for cls in sorted(self.discover().values(), key=lambda c: -c.priority):
            v = cls.from_hf_config(*args)
            if v is not None:
                return v
        return None
