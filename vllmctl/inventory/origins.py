"""Where each setting of a merged host was written (defaults, the host entry, an Ansible variable), so a
problem with a merged value is reported at the line that set it, in whichever file that was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllmctl.errors import Location
from vllmctl.inventory.positions import FieldPath, SourceDoc, render_path

MERGED_SECTIONS = ("ssh", "driver", "engine", "vars")


@dataclass
class Origins:
    """Setting path in a host's settings (e.g. ("ssh", "port")) -> (file, path in that file).

    The entry for () is where the host itself is declared; `native` is the host's path in vllmctl terms
    (hosts.NAME), used to name a setting that no file wrote (an address defaulting to the host name).
    """

    entries: dict[FieldPath, tuple[SourceDoc, FieldPath]] = field(default_factory=dict)
    native: FieldPath = ()

    def set(self, path: FieldPath, doc: SourceDoc, written: FieldPath) -> None:
        """`path` was written at `written` in `doc`, replacing what an earlier layer wrote there and below
        (the host's own declaration, path (), replaces nothing)."""
        for stale in [p for p in self.entries if path and p[: len(path)] == path and p != path]:
            del self.entries[stale]
        self.entries[path] = (doc, written)

    def update(self, other: Origins) -> None:
        """Another layer's origins, recorded on top of these."""
        for path, (doc, written) in sorted(other.entries.items(), key=lambda entry: len(entry[0])):
            self.set(path, doc, written)

    def record(self, doc: SourceDoc, base: FieldPath, layer: dict[str, Any]) -> None:
        """A layer of settings written at `base` in `doc`; it wins over the layers recorded before it."""
        for key, value in layer.items():
            if key in MERGED_SECTIONS and isinstance(value, dict):
                for sub, item in value.items():
                    self.set((key, sub), doc, (*base, key, sub))
                    for name in item if isinstance(item, dict) else ():
                        self.set((key, sub, name), doc, (*base, key, sub, name))
            else:
                self.set((key,), doc, (*base, key))

    def location(self, path: FieldPath, at_key: bool = False) -> Location:
        """Where the setting at `path` (or the closest setting above it) was written; for one no layer
        wrote (an address defaulting to the host name), the host's own line, under the setting's name."""
        probe = path
        while probe and probe not in self.entries:
            probe = probe[:-1]
        if probe:
            doc, written = self.entries[probe]
            return doc.location((*written, *path[len(probe) :]), at_key)
        doc, declared = self.entries[()]
        found = doc.location(declared, at_key=True)
        return Location(found.file, found.line, found.column, render_path((*self.native, *path)))
