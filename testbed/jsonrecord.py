"""JSON for the frozen dataclasses whose traffic class is a field: Python cannot name a field
`class`, the records on the wire and in every file do, so such a record's field is `cls` and its
JSON key "class" (a flow of the engine's plan, a queue or leaf of the agent's, a watchdog firing)."""
from __future__ import annotations

import dataclasses


class ClassKeyed:
    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["class"] = d.pop("cls")
        return d

    @classmethod
    def from_json(cls, d: dict):
        d = dict(d)
        d["cls"] = d.pop("class")
        return cls(**d)
