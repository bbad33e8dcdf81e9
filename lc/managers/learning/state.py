"""A learning job's state as the store keeps it (a row of lc_job_state): its rounds, the sample
offset, the pending samples and the last condition decided; it belongs to one object (uid)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class JobState:
    """What a learning job remembers between ticks and across restarts (lc_job_state)."""

    uid: str = ""
    rounds: int = 0  # train triggers fired so far; round r writes <out>/.../<r>
    previous: int = 0  # dataset samples already split into train/eval
    train: list[str] = field(default_factory=list)  # train samples not yet sent
    evals: list[list[str]] = field(default_factory=list)  # new eval samples, per round
    header: str = ""  # the csv header line of the dataset
    done: str = ""  # token of the latest condition a report was made for

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, raw: Any, uid: str) -> JobState:
        """The stored state if it belongs to this object (same uid), else a fresh one."""
        if not isinstance(raw, dict) or raw.get("uid") != uid:
            return cls(uid=uid)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})
