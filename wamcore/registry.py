"""The plugin registry: finds plugins through the ``wamcore`` entry-point group, lazily.

A :class:`Registry` is an ordinary object (no global state is touched at import). It loads
entry points on first use, calls each plugin's hooks one plugin at a time, and records a
plugin that fails to import or register instead of failing: ``wam plugins`` shows the
error, the other plugins keep working, and the error is raised only when an id that
plugin provides is asked for.

Environment controls:

* ``WAMCORE_LOAD_PLUGINS``: comma-separated entry-point or distribution names to load;
  set but empty loads none (only plugins registered in-process). Unset loads all.
* ``WAMCORE_PLUGIN_MODULES``: comma-separated importable module names to register as
  plugins too (a plugin under development, or a test's scripted model inside a worker).
"""

from __future__ import annotations

import difflib
import importlib
import os
import threading
import traceback
from importlib import metadata
from typing import Any, Dict, Iterable, List, Optional

import attrs
import pluggy

from . import baselines, hookspecs
from .errors import (
    DuplicateIdError,
    PluginLoadError,
    UnknownIdError,
    UnknownModelError,
    UnknownPlatformError,
    UnknownProbeSetError,
    UnknownProtocolError,
    UnknownServingProtocolError,
)
from .eval_protocols import EvalProtocol
from .probe.sets import ProbeSet
from .serving import WAMCORE as WAMCORE_PROTOCOL, ServingProtocol
from .specs import RESERVED_OPTION_NAMES, ModelSpec, PlatformSpec, normalize_id

ENTRY_POINT_GROUP = "wamcore"
#: owner of what the core registers itself: the ``random`` baseline (:mod:`wamcore.baselines`)
#: and the ``wamcore`` serving protocol (:mod:`wamcore.serving`)
CORE_OWNER = "wamcore"
LOAD_ENV = "WAMCORE_LOAD_PLUGINS"
MODULES_ENV = "WAMCORE_PLUGIN_MODULES"

#: First-party ids and the distribution that provides them, for "pip install" hints.
#: Installing from a checkout: ``pip install ./plugins/<dir>``.
KNOWN_PROVIDERS: Dict[str, tuple] = {
    "pointmass": ("wam-pointmass", "pointmass"),
    "pointmass-wam": ("wam-pointmass[model]", "pointmass"),
    "libero": ("wam-libero[sim]", "libero"),
    "libero-smoke": ("wam-libero[sim]", "libero"),
    "robotwin": ("wam-robotwin", "robotwin"),
    "cosmos-policy": ("wam-cosmos-policy", "cosmos_policy"),
    "cosmos": ("wam-cosmos-policy", "cosmos_policy"),
    "cosmos3": ("wam-cosmos3", "cosmos3"),
    "fast-wam": ("wam-fastwam", "fastwam"),
    "fastwam": ("wam-fastwam", "fastwam"),
    "starwam": ("wam-starwam", "starwam"),
    "lingbot-va": ("wam-lingbot-va", "lingbot_va"),
    "openpi": ("wam-openpi", "openpi"),
    "openpi-remote": ("wam-openpi", "openpi"),
}


def install_hint(ident: str) -> Optional[str]:
    known = KNOWN_PROVIDERS.get(normalize_id(ident))
    if known is None:
        return None
    dist, directory = known
    extra = dist[dist.find("[") :] if "[" in dist else ""
    return f'pip install "{dist}"  (from a wamcore checkout: pip install "./plugins/{directory}{extra}")'


def _dist_base(dist: str) -> str:
    return normalize_id(dist.split("[")[0])


@attrs.define
class PluginRecord:
    """One loaded (or failed) plugin, as shown by ``wam plugins``."""

    name: str
    module: str = ""
    distribution: Optional[str] = None
    version: Optional[str] = None
    error: Optional[str] = None
    traceback: Optional[str] = None
    platforms: List[str] = attrs.field(factory=list)
    models: List[str] = attrs.field(factory=list)
    protocols: List[str] = attrs.field(factory=list)
    probe_sets: List[str] = attrs.field(factory=list)
    serving_protocols: List[str] = attrs.field(factory=list)
    hooks: List[str] = attrs.field(factory=list)
    problems: List[str] = attrs.field(factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "module": self.module,
            "kind": sorted({*(["platform"] if self.platforms else []), *(["model"] if self.models else [])}),
            "platforms": self.platforms,
            "models": self.models,
            "protocols": self.protocols,
            "probe_sets": self.probe_sets,
            "serving_protocols": self.serving_protocols,
            "hooks": self.hooks,
            "error": self.error,
            "traceback": self.traceback,
            "problems": self.problems,
        }


class Registry:
    """Platforms and models from installed plugins plus any registered in-process.

    ``Registry(entry_points=False)`` gives an empty registry for tests and research code
    that registers its own plugins with :meth:`register`.
    """

    def __init__(self, *, entry_points: bool = True, plugins: Iterable[Any] = ()):
        self._use_entry_points = entry_points
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self._records: Dict[str, PluginRecord] = {}
        self._platforms: Dict[str, PlatformSpec] = {}
        self._models: Dict[str, ModelSpec] = {}
        self._protocols: Dict[str, EvalProtocol] = {}
        self._probe_sets: Dict[str, ProbeSet] = {}
        self._serving_protocols: Dict[str, ServingProtocol] = {}
        self._tables = {"platform": self._platforms, "model": self._models, "protocol": self._protocols,
                        "probe_set": self._probe_sets, "serving_protocol": self._serving_protocols}
        self._aliases: Dict[str, Dict[str, str]] = {kind: {} for kind in self._tables}
        self._owner: Dict[tuple, str] = {}
        self._add("serving_protocol", WAMCORE_PROTOCOL, CORE_OWNER)  # built in; a plugin's "wamcore" is refused
        self._loaded = False  # set once loading has finished: until then lookups wait for it
        self._loading = False
        self._lock = threading.RLock()  # reentrant: a plugin loading may register more
        self._pending = list(plugins)

    # ------------------------------------------------------------------ loading

    def load(self) -> "Registry":
        """Load entry points once (idempotent, thread-safe: other threads wait until it is done)."""
        if self._loaded:
            return self
        with self._lock:
            if self._loaded or self._loading:  # done meanwhile, or this thread is loading
                return self
            self._loading = True
            try:
                if self._use_entry_points:
                    for ep in self._selected_entry_points():
                        self._load_entry_point(ep)
                    for module in filter(None, (m.strip() for m in os.environ.get(MODULES_ENV, "").split(","))):
                        self._load_module(module)
                pending, self._pending = self._pending, []
                for plugin in pending:
                    self.register(plugin)
                self._refresh_baseline()
            finally:
                self._loading = False
                self._loaded = True
        return self

    def _selected_entry_points(self) -> list:
        eps = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
        wanted = os.environ.get(LOAD_ENV)
        if wanted is None:
            return eps
        names = {normalize_id(n) for n in wanted.split(",") if n.strip()}
        selected = []
        for ep in eps:
            dist = getattr(ep, "dist", None)
            dist_name = normalize_id(dist.metadata["Name"]) if dist is not None else ""
            if normalize_id(ep.name) in names or dist_name in names:
                selected.append(ep)
        return selected

    def _load_entry_point(self, ep) -> None:
        dist = getattr(ep, "dist", None)
        record = PluginRecord(
            name=ep.name,
            module=ep.value,
            distribution=dist.metadata["Name"] if dist is not None else None,
            version=dist.version if dist is not None else None,
        )
        self._load(record, ep.load)

    def _load_module(self, module: str) -> None:
        self._load(PluginRecord(name=module, module=module), lambda: importlib.import_module(module))

    def _load(self, record: PluginRecord, importer) -> None:
        """Import and register one plugin; a broken plugin is recorded, never raised."""
        self._records[record.name] = record
        try:
            plugin = importer()
            self._pm.register(plugin, name=record.name)
        except Exception as exc:  # a broken plugin never takes the others down
            record.error = f"{type(exc).__name__}: {exc}"
            record.traceback = traceback.format_exc()
            return
        self._collect(record.name, plugin, record)

    def register(self, plugin: Any, name: Optional[str] = None) -> PluginRecord:
        """Register a plugin object or module in-process (tests, notebooks, research code)."""
        self.load()
        with self._lock:
            name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
            record = PluginRecord(name=name, module=getattr(plugin, "__name__", type(plugin).__name__))
            self._records[name] = record
            try:
                self._pm.register(plugin, name=name)
            except Exception as exc:
                record.error = f"{type(exc).__name__}: {exc}"
                record.traceback = traceback.format_exc()
                raise
            self._collect(name, plugin, record)
            return record

    def unregister(self, name: str) -> None:
        """Remove an in-process plugin and everything it registered."""
        record = self._records.pop(name, None)
        if self._pm.has_plugin(name):
            self._pm.unregister(name=name)
        if record is None:
            return
        for kind, table in self._tables.items():
            for ident in list(table):
                if self._owner.get((kind, ident)) == name:
                    del table[ident]
                    del self._owner[(kind, ident)]
                    for alias, target in list(self._aliases[kind].items()):
                        if target == ident:
                            del self._aliases[kind][alias]
        self._refresh_baseline()

    def _collect(self, name: str, plugin: Any, record: PluginRecord) -> None:
        """Call this plugin's hooks only, staging what it registers: all or nothing."""
        staged: Dict[str, list] = {kind: [] for kind in self._tables}
        calls = {
            "wam_register_platforms": ("platform", PlatformSpec),
            "wam_register_models": ("model", ModelSpec),
            "wam_register_protocols": ("protocol", EvalProtocol),
            "wam_register_probe_sets": ("probe_set", ProbeSet),
            "wam_register_serving_protocols": ("serving_protocol", ServingProtocol),
        }
        for hook_name, (kind, spec_type) in calls.items():
            for impl in getattr(self._pm.hook, hook_name).get_hookimpls():
                if impl.plugin is not plugin:
                    continue
                record.hooks.append(hook_name)

                def register(spec, _kind=kind, _type=spec_type):
                    if not isinstance(spec, _type):
                        raise TypeError(f"register() for {_kind.replace('_', ' ')}s takes a {_type.__name__}, got {type(spec).__name__}")
                    staged[_kind].append(spec)

                try:
                    impl.function(**{a: register for a in impl.argnames})
                except Exception as exc:
                    record.error = f"{hook_name} raised {type(exc).__name__}: {exc}"
                    record.traceback = traceback.format_exc()
                    return
        for impl in self._pm.hook.wam_register_commands.get_hookimpls():
            if impl.plugin is plugin:
                record.hooks.append("wam_register_commands")
        for attr in dir(plugin):
            if attr.startswith("wam_") and not hasattr(hookspecs, attr) and callable(getattr(plugin, attr, None)):
                close = difflib.get_close_matches(attr, [h for h in dir(hookspecs) if h.startswith("wam_")], n=1)
                record.problems.append(
                    f"{attr} is not a wamcore hook" + (f"; did you mean {close[0]}?" if close else "")
                )
        for kind, specs in staged.items():
            for spec in specs:
                for option in getattr(spec, "options", ()):
                    if option.name in RESERVED_OPTION_NAMES:
                        record.problems.append(
                            f"{kind} {spec.name}: option --{option.name} is one of wamcore's own options; "
                            "the plugin's is ignored (rename it)"
                        )
                try:
                    self._add(kind, spec, name)
                except DuplicateIdError as exc:
                    record.problems.append(str(exc))
                    continue
                getattr(record, kind + "s").append(spec.name)
        self._refresh_baseline()

    def _refresh_baseline(self) -> None:
        """The core's ``random`` model, with an adapter for every platform registered so far;
        a plugin's own ``random`` takes its place."""
        key = ("model", baselines.NAME)
        if self._owner.get(key, CORE_OWNER) != CORE_OWNER:
            return
        self._models[baselines.NAME] = baselines.random_model_spec(self._platforms.values())
        self._owner[key] = CORE_OWNER

    def _add(self, kind: str, spec, owner: str) -> None:
        table = self._tables[kind]
        ident = normalize_id(spec.name)
        if kind == "model" and self._owner.get((kind, ident)) == CORE_OWNER:  # a plugin's own model replaces the core's
            del table[ident]
            del self._owner[(kind, ident)]
        names = [ident] + [normalize_id(a) for a in spec.aliases]
        for n in names:
            existing = self._aliases[kind].get(n) or (n if n in table else None)
            if existing is not None:
                raise DuplicateIdError(
                    f"{kind} id {n!r} is already registered by plugin {self._owner[(kind, existing)]!r}; "
                    f"ignored the one from {owner!r}"
                )
        table[ident] = spec
        self._owner[(kind, ident)] = owner
        for alias in names[1:]:
            self._aliases[kind][alias] = ident

    # ------------------------------------------------------------------ queries

    def plugins(self) -> List[PluginRecord]:
        self.load()
        return list(self._records.values())

    def platforms(self) -> Dict[str, PlatformSpec]:
        self.load()
        return dict(self._platforms)

    def models(self) -> Dict[str, ModelSpec]:
        self.load()
        return dict(self._models)

    def protocols(self) -> Dict[str, EvalProtocol]:
        self.load()
        return dict(self._protocols)

    def probe_sets(self) -> Dict[str, ProbeSet]:
        self.load()
        return dict(self._probe_sets)

    def serving_protocols(self) -> Dict[str, ServingProtocol]:
        self.load()
        return dict(self._serving_protocols)

    def serving_protocol(self, ident: str) -> ServingProtocol:
        """A serving protocol by name (``wam serve --protocol``); unknown: did-you-mean, what to install."""
        return self._lookup("serving_protocol", ident, UnknownServingProtocolError)

    def probe_set(self, ident: str) -> ProbeSet:
        """A probe set by name (``wam probe --set``); unknown: did-you-mean and the installed ones."""
        return self._lookup("probe_set", ident, UnknownProbeSetError)

    def protocol(self, ident: str) -> EvalProtocol:
        """An evaluation protocol by name (``wam eval --protocol``); unknown: did-you-mean."""
        return self._lookup("protocol", ident, UnknownProtocolError)

    def platform(self, ident: str) -> PlatformSpec:
        return self._lookup("platform", ident, UnknownPlatformError)

    def model(self, ident: str) -> ModelSpec:
        return self._lookup("model", ident, UnknownModelError)

    def owner(self, kind: str, ident: str) -> Optional[PluginRecord]:
        name = self._owner.get((kind, normalize_id(ident)))
        return self._records.get(name) if name else None

    def models_for(self, platform: str) -> List[str]:
        """Models that have an adapter for ``platform``."""
        return sorted(n for n, m in self.models().items() if m.adapter_for(platform) is not None)

    def add_commands(self, cli) -> None:
        self.load()
        for impl in self._pm.hook.wam_register_commands.get_hookimpls():
            try:
                impl.function(**{a: cli for a in impl.argnames})
            except Exception as exc:
                record = self._records.get(impl.plugin_name)
                if record is not None:
                    record.problems.append(f"wam_register_commands raised {type(exc).__name__}: {exc}")

    def _lookup(self, kind: str, ident: str, error: type):
        self.load()
        table = self._tables[kind]
        key = normalize_id(ident)
        key = self._aliases[kind].get(key, key)
        if key in table:
            return table[key]
        failed = [r for r in self._records.values() if r.error]
        culprit = self._failed_provider(key, failed)
        if culprit is not None:
            raise PluginLoadError(
                f"{kind} {ident!r} comes from plugin {culprit.name!r}"
                f"{' (' + culprit.distribution + ' ' + (culprit.version or '') + ')' if culprit.distribution else ''}"
                f", which failed to load: {culprit.error}\n"
                "Run `wam plugins` for details, or `wam doctor` for what is missing."
            )
        known = sorted(set(table) | set(self._aliases[kind]))
        suggestions = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
        raise error(
            ident,
            available=sorted(table),
            suggestions=list(dict.fromkeys(self._aliases[kind].get(s, s) for s in suggestions)),
            install=install_hint(key),
            failures=[f"plugin {r.name!r} failed to load: {r.error}" for r in failed],
        )

    @staticmethod
    def _failed_provider(key: str, failed: List[PluginRecord]) -> Optional[PluginRecord]:
        provider = KNOWN_PROVIDERS.get(key)
        for r in failed:
            if normalize_id(r.name) == key:
                return r
            if provider and r.distribution and normalize_id(r.distribution) == _dist_base(provider[0]):
                return r
        return None


_default: Optional[Registry] = None


def default_registry() -> Registry:
    """The process-wide registry of installed plugins, created on first use."""
    global _default
    if _default is None:
        _default = Registry()
    return _default


__all__ = [
    "ENTRY_POINT_GROUP",
    "LOAD_ENV",
    "MODULES_ENV",
    "KNOWN_PROVIDERS",
    "PluginRecord",
    "Registry",
    "default_registry",
    "install_hint",
    "UnknownIdError",
]
