"""List-then-watch caches of one kind of object, the way client-go's reflector keeps them.

A LIST fills the store and gives a resourceVersion; a WATCH from that version delivers every later change, so
nothing between the two is missed. When the watch ends the next one resumes from the last version seen
(bookmarks keep it fresh); when the apiserver no longer has that version (410 Gone) or any error occurs, the
informer lists again and the list *replaces* the store: an object deleted while nobody watched is reported
as deleted then, so a cache can fall behind but never keep a ghost forever.

Objects stay plain dicts decoded straight from the JSON lines (no client model classes, no deep copies);
`keep` may cut each one down to the fields its readers use. The operator's own writes go in at once through
`wrote`/`deleting` (write-through), so the pass after a write sees it even before the watch delivers it; an
older version arriving later never replaces a newer one.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mmrl_operator.runtime.permissions import require
from mmrl_operator.runtime.service_proxy import api_request

log = logging.getLogger("mmrl.informer")

Obj = dict[str, Any]
ObjKey = tuple[str, str]  # (namespace or "", name)
OnChange = Callable[["Obj | None", "Obj | None"], None]  # (old, new); new None: deleted


@dataclass(frozen=True)
class Kind:
    group: str  # "" for the core group
    version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        return f"{base}/namespaces/{namespace}/{self.plural}" if namespace else f"{base}/{self.plural}"


def _rv(obj: Obj | None) -> int | None:
    """resourceVersion as a number. Kubernetes calls it opaque; the apiserver's are etcd revisions, and when one
    is not a number the newer-wins rule below simply lets the latest delivery win."""
    try:
        return int((obj or {}).get("metadata", {}).get("resourceVersion"))
    except (TypeError, ValueError):
        return None


def older(obj: Obj, held: Obj | None) -> bool:
    """Whether `obj` is an older version than `held` (a stale delivery after our own newer write): then it must not
    replace it. Unknown versions never count as older."""
    new_rv, old_rv = _rv(obj), _rv(held)
    return held is not None and new_rv is not None and old_rv is not None and new_rv < old_rv


def key_of(obj: Obj) -> ObjKey:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


class Informer:
    def __init__(
        self,
        api_client: Any,
        kind: Kind,
        namespaces: list[str] | None = None,
        label_selector: str | None = None,
        keep: Callable[[Obj], Obj] = lambda o: o,
        on_change: OnChange | None = None,
        index: Callable[[Obj], Any] | None = None,
        timeout_seconds: int = 300,
        field_selector: str | None = None,
    ) -> None:
        require(kind.group, kind.plural, "list", "watch")
        self.api_client, self.kind, self.keep = api_client, kind, keep
        self.namespaces: list[str | None] = list(namespaces) if namespaces and kind.namespaced else [None]
        self.label_selector, self.on_change, self.timeout_seconds = label_selector, on_change, timeout_seconds
        self.field_selector = field_selector
        self._lock = threading.Lock()
        self._store: dict[ObjKey, Obj] = {}
        self._index_of = index
        self._index: dict[Any, set[ObjKey]] = {}  # index value (e.g. the owning job) -> keys
        self._stop = threading.Event()
        self.lists = 0  # how many LISTs it made (the first, plus one per lost watch)
        self.started = False  # watching (`start`)

    # --- reading -----------------------------------------------------------------------------------------------
    def get(self, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._store.get((namespace, name))

    def indexed(self, value: Any) -> list[Obj]:
        """The objects whose `index` is `value` (e.g. every pod of one job)."""
        with self._lock:
            return [self._store[k] for k in self._index.get(value, ())]

    def items(self, where: Callable[[Obj], bool] = lambda o: True) -> list[Obj]:
        with self._lock:
            return [o for o in self._store.values() if where(o)]

    def __len__(self) -> int:
        return len(self._store)

    # --- write-through -------------------------------------------------------------------------------------------
    def wrote(self, obj: Obj) -> Obj:
        """The object as the apiserver returned it from our own write (or read); returns the copy kept."""
        kept = self.keep(obj)
        self._put(kept, notify=False)
        return kept

    def deleting(self, namespace: str, name: str) -> None:
        """We asked the apiserver to delete it: until the watch says how that ended, treat it as terminating."""
        with self._lock:
            cur = self._store.get((namespace, name))
            if cur is not None and not cur["metadata"].get("deletionTimestamp"):
                meta = {**cur["metadata"], "deletionTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
                self._set((namespace, name), {**cur, "metadata": meta})

    # --- the store (callers hold the lock for _set/_pop) ---------------------------------------------------------
    def _set(self, key: ObjKey, obj: Obj) -> None:
        old = self._store.get(key)
        self._store[key] = obj
        if self._index_of is not None:
            if old is not None:
                self._unindex(key, old)
            if (value := self._index_of(obj)) is not None:
                self._index.setdefault(value, set()).add(key)

    def _pop(self, key: ObjKey) -> Obj | None:
        old = self._store.pop(key, None)
        if old is not None and self._index_of is not None:
            self._unindex(key, old)
        return old

    def _unindex(self, key: ObjKey, obj: Obj) -> None:
        value = self._index_of(obj) if self._index_of else None
        keys = self._index.get(value)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._index[value]

    def _put(self, obj: Obj, notify: bool = True) -> None:
        key = key_of(obj)
        with self._lock:
            old = self._store.get(key)
            if older(obj, old):
                return  # a stale delivery after our own newer write
            marked = (old or {}).get("metadata", {}).get("deletionTimestamp")
            if marked and _rv(obj) == _rv(old) and not obj["metadata"].get("deletionTimestamp"):
                obj = {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": marked}}  # keep our mark
            self._set(key, obj)
        if notify and self.on_change:
            self.on_change(old, obj)

    def _remove(self, obj: Obj) -> None:
        with self._lock:
            old = self._pop(key_of(obj))
        if self.on_change:
            self.on_change(old if old is not None else self.keep(obj), None)

    def _replace(self, objs: list[Obj]) -> None:
        fresh = {key_of(o): o for o in objs}
        with self._lock:
            before = dict(self._store)
            self._store, self._index = {}, {}
            for k, o in fresh.items():
                self._set(k, o)
        if self.on_change:
            for k, obj in before.items():
                if k not in fresh:
                    self.on_change(obj, None)
            for k, obj in fresh.items():
                if before.get(k) != obj:
                    self.on_change(before.get(k), obj)

    # --- list and watch ----------------------------------------------------------------------------------------
    def _selectors(self) -> dict[str, str | None]:
        return {"labelSelector": self.label_selector, "fieldSelector": self.field_selector}

    def _list(self, ns: str | None) -> tuple[list[Obj], str]:
        response = api_request(self.api_client, "GET", self.kind.path(ns), self._selectors(), timeout=60)
        data = json.loads(response.read())
        self.lists += 1
        return [self.keep(o) for o in data.get("items") or []], str(data["metadata"]["resourceVersion"])

    def list_once(self) -> dict[str | None, str]:
        """LIST every namespace into a fresh store; returns the resourceVersion to watch each from."""
        objs, versions = [], {}
        for ns in self.namespaces:
            found, versions[ns] = self._list(ns)
            objs += found
        self._replace(objs)
        return versions

    def _relist(self, ns: str | None) -> str:
        """LIST one namespace (or all) again and replace that part of the store; returns the version to watch from."""
        found, rv = self._list(ns)
        others = [] if ns is None else self.items(lambda o: o["metadata"].get("namespace") != ns)
        self._replace(others + found)
        return rv

    def _lines(self, response: Any) -> Iterator[str]:
        buffer = b""
        for chunk in response.response.stream(amt=None, decode_content=False):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    yield line.decode("utf-8", errors="replace")

    def _watch(self, ns: str | None, rv: str) -> str | None:
        """Follow one watch until it ends; returns the version to resume from, None when a re-list is needed."""
        query = {
            **self._selectors(),
            "watch": "true",
            "resourceVersion": rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self.timeout_seconds,
        }
        response = api_request(
            self.api_client, "GET", self.kind.path(ns), query, timeout=(10, self.timeout_seconds + 30)
        )
        try:
            for line in self._lines(response):
                if self._stop.is_set():
                    return rv
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    log.info("watch of %s ended: %s", self.kind.plural, obj.get("message"))
                    return None  # 410 Gone: too old to resume
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED":
                    self._remove(obj)
                else:
                    self._put(self.keep(obj))
        finally:
            response.response.release_conn()
        return rv

    def _follow(self, ns: str | None, rv: str | None) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._relist(ns)
                rv = self._watch(ns, rv)
                failures = 0
            except Exception as exc:  # a lost connection, an apiserver restart: list again after a pause
                failures += 1
                delay = min(30.0, 0.5 * 2**failures)
                log.warning("watch of %s failed (%s); listing again in %.1fs", self.kind.plural, exc, delay)
                rv = None
                self._stop.wait(delay)

    def start(self, versions: dict[str | None, str] | None = None) -> None:
        """Watch every namespace from `versions` (what `list_once` returned), or list first."""
        self.started = True
        for ns in self.namespaces:
            rv = (versions or {}).get(ns)
            threading.Thread(
                target=self._follow, args=(ns, rv), name=f"mmrl-watch-{self.kind.plural}", daemon=True
            ).start()

    def run(self) -> None:
        """List (blocking, so callers start from a complete store), then watch in the background."""
        self.start(self.list_once())

    def stop(self) -> None:
        self._stop.set()
