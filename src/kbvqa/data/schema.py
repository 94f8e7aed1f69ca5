"""The one data model every layer shares.

Adapters turn public formats into these types and back; stages read and write them; scorers and
reports consume them. Keep the models small and JSON-friendly: JSONL lines are their `dump()`.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

AnswerType = Literal["String", "Numerical", "Time"]
VerdictLabel = Literal["correct", "incorrect", "not_attempted", "invalid"]
RecordStatus = Literal["ok", "error", "invalid"]


class Answer(BaseModel):
    """One accepted answer (an alias).

    `text` is the surface form exactly as the dataset wrote it (whitespace kept, so adapters
    round-trip). A multi-part answer (E-VQA `a&&b`) lists its parts; a numeric answer may carry the
    value and the accepted range (InfoSeek `answer_eval`). A plain alias serialises as a bare string.
    """

    model_config = ConfigDict(extra="forbid")

    text: str
    parts: list[str] = Field(default_factory=list)
    value: float | None = None
    range: tuple[float, float] | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"text": data}
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return {"text": str(data), "value": float(data)}
        return data

    @model_validator(mode="after")
    def _check_range(self) -> "Answer":
        if self.range is not None and self.range[0] > self.range[1]:
            raise ValueError(f"answer range {list(self.range)} has low > high")
        return self

    @model_serializer(mode="wrap")
    def _compact(self, handler: Any) -> Any:
        if not self.parts and self.value is None and self.range is None:
            return self.text
        out = handler(self)
        return {k: v for k, v in out.items() if v not in (None, [])}

    @property
    def is_multipart(self) -> bool:
        return len(self.parts) > 1


class Entity(BaseModel):
    """The KB entity a sample is about. `url` is the KB key (canonicalise with data.urls)."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = None
    title: str | None = None
    wikidata_id: str | None = None


class Evidence(BaseModel):
    """A span of KB text that supports (or was checked against) an answer."""

    model_config = ConfigDict(extra="forbid")

    text: str
    section_id: str | None = None
    section_title: str | None = None
    url: str | None = None


class Change(BaseModel):
    """One entry in a sample's history: what a stage changed and why."""

    model_config = ConfigDict(extra="forbid")

    stage: str
    field: str
    before: Any = None
    after: Any = None
    reason: str = ""
    version: str = ""
    at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))


class Sample(BaseModel):
    """One benchmark item: image(s) + question + accepted answers + the entity and evidence."""

    model_config = ConfigDict(extra="forbid")

    id: str
    question: str
    answers: list[Answer] = Field(default_factory=list)
    images: list[str] = Field(default_factory=list)
    question_type: str | None = None  # the dataset's own label (templated, 2_hop, String, ...)
    answer_type: AnswerType | None = None  # String / Numerical / Time where known
    entity: Entity | None = None
    related_entities: list[Entity] = Field(default_factory=list)  # e.g. the second hop of a 2_hop item
    evidence: list[Evidence] = Field(default_factory=list)
    split: str | None = None
    dataset: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
    history: list[Change] = Field(default_factory=list)

    @field_validator("id")
    @classmethod
    def _non_empty_id(cls, v: str) -> str:
        if not str(v).strip():
            raise ValueError("id is empty")
        return v

    @property
    def answer_texts(self) -> list[str]:
        return [a.text for a in self.answers]

    def record_change(self, stage: str, field: str, before: Any, after: Any, reason: str = "",
                      version: str = "") -> None:
        """Append to history; stages call this for every field they change."""
        self.history.append(Change(stage=stage, field=field, before=before, after=after,
                                   reason=reason, version=version))

    def dump(self) -> dict[str, Any]:
        """A JSON-ready dict without empty optional fields (keeps JSONL lines short)."""
        return self.model_dump(mode="json", exclude_none=True,
                               exclude={k for k in ("related_entities", "evidence", "history", "meta", "images")
                                        if not getattr(self, k)})


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: int
    title: str = ""
    text: str = ""


class Article(BaseModel):
    """A KB article keyed by canonical URL."""

    model_config = ConfigDict(extra="forbid")

    url: str
    title: str = ""
    sections: list[Section] = Field(default_factory=list)
    image_urls: list[str] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n\n".join(s.text for s in self.sections)


class Usage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    seconds: float = 0.0
    calls: int = 0

    def add(self, other: "Usage") -> "Usage":
        return Usage(prompt_tokens=self.prompt_tokens + other.prompt_tokens,
                     completion_tokens=self.completion_tokens + other.completion_tokens,
                     cost=self.cost + other.cost, seconds=self.seconds + other.seconds,
                     calls=self.calls + other.calls)


class Provenance(BaseModel):
    """Who produced a verdict or prediction: never includes keys."""

    model_config = ConfigDict(extra="forbid")

    backend: str  # rules | openai | replay | scorer name
    model: str | None = None
    base_url: str | None = None
    prompt_version: str | None = None


class Prediction(BaseModel):
    """A system's answer to one sample, with what it retrieved and used."""

    model_config = ConfigDict(extra="forbid")

    sample_id: str
    answer: str | None = None  # None = the system produced no answer (counted, never dropped)
    retrieved: list[str] = Field(default_factory=list)  # ranked KB urls
    evidence_used: list[Evidence] = Field(default_factory=list)
    trajectory: list[dict[str, Any]] = Field(default_factory=list)
    images: list[str] = Field(default_factory=list)
    short_answer: str | None = None  # what a short-answer judge grades when `answer` is long (interleaved)
    usage: Usage = Field(default_factory=Usage)
    producer: Provenance | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The prediction as a runner record (`id` = sample id). Empty fields are left out, but
        `answer` is always there: `null` says the system abstained, which scorers count."""
        return {"id": self.sample_id, **self.model_dump(mode="json", exclude_none=True), "answer": self.answer}


class Verdict(BaseModel):
    """A metric's or judge's decision on one prediction."""

    model_config = ConfigDict(extra="forbid")

    sample_id: str
    metric: str
    value: float | None = None
    label: VerdictLabel | None = None
    rationale: str = ""
    judge: Provenance | None = None
