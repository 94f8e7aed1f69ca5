"""The audit/repair pipeline: verify -> derive -> posedness -> leakage, run by the runner.

`build_audit_stages(config)` gives the stage list and `audit_job` the Job, `audit_file(...)` audits a
benchmark file against a KB and writes the audited JSONL plus `<out stem>.summary.json` (`run_audit`
does the same from the command line's flags), and `audit_summary(records)` counts
labels, actions and tags overall and by question type (records that failed in the runner count as
answer_support "invalid", never as supported).

Model stages. Each stage runs its rules first; with a model role configured it then asks the model
only about what the rules leave open (each stage class documents exactly which cases the rules
settle). Roles: `verifier` (one or several clients; joins the verify consensus), `repairer` (answer
correction in derive, question tagging/repair in posedness), `checker` (final leak/answerability/
uniqueness check). An `audit.toml`:

    [verify]
    consensus = "all"            # all (paper) | any | majority
    llm = "auto"                 # auto: use the role when configured | on: require it | off
    [derive]
    llm_role = "repairer"
    [leakage]
    llm = "off"                  # rules-only final check

    [[models.verifier]]          # two verifiers: unsupported only when both say so (consensus all)
    model = "qwen3-30b-a3b"
    base_url = "http://127.0.0.1:8000/v1"
    [[models.verifier]]
    model = "deepseek-chat"
    base_url = "https://api.deepseek.com"
    api_key_env = "DEEPSEEK_API_KEY"
    [models.repairer]
    model = "qwen3-30b-a3b"
    base_url = "http://127.0.0.1:8000/v1"

`kbvqa audit run IN --kb KB --llm URL --model NAME` is the shortcut for one model in all three roles.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict, Field

from kbvqa.runner.config import load_table
from kbvqa.runner.job import Job
from kbvqa.runner.stage import Context, Stage
from kbvqa.stages import STAGES
from kbvqa.stages.audit.derive import DeriveConfig
from kbvqa.stages.audit.leakage import LeakageConfig
from kbvqa.stages.audit.posedness import PosednessConfig
from kbvqa.stages.audit.verify import VerifyConfig


class AuditConfig(BaseModel):
    """All audit settings; a TOML file has one table per stage ([verify], [derive], ...)."""

    model_config = ConfigDict(extra="forbid")

    verify: VerifyConfig = Field(default_factory=VerifyConfig)
    derive: DeriveConfig = Field(default_factory=DeriveConfig)
    posedness: PosednessConfig = Field(default_factory=PosednessConfig)
    leakage: LeakageConfig = Field(default_factory=LeakageConfig)
    stages: list[str] = Field(default_factory=lambda: ["verify", "derive", "posedness", "leakage"])

    @classmethod
    def from_toml(cls, path: str | Path) -> "AuditConfig":
        """Stage tables from `[audit]` (or the top level). `[models.*]` and `[cache]` in the same file
        are the model roles (see `load_audit_roles`), not stage settings."""
        return load_table(path, "audit", cls,
                          whole_file=lambda doc: {k: v for k, v in doc.items() if k not in ("models", "cache")})


LLM_ROLES = ("verifier", "repairer", "checker")


def load_audit_roles(config: str | Path | None = None, *, llm: str | None = None, model: str | None = None,
                     concurrency: int = 8, env: dict[str, str] | None = None, **limits: Any) -> dict[str, Any]:
    """Model roles for the audit. `config` may hold `[models.verifier]` (or `[[models.verifier]]` for
    several), `[models.repairer]`, `[models.checker]` (kbvqa.models.config format). `llm` + `model`
    (the CLI's --llm/--model) fill verifier, repairer and checker with ONE shared OpenAI-compatible
    client, so its concurrency limit covers all three; they replace those roles from the file.
    `limits` are roles_from_flags' timeout / connect_timeout / deadline / structured_output /
    max_retries (None keeps each role's own setting)."""
    from kbvqa.models.config import roles_from_flags

    return roles_from_flags(config, llm=llm, model=model, fill=LLM_ROLES, concurrency=concurrency, env=env,
                            **{k: v for k, v in limits.items() if v is not None})


def build_audit_stages(config: AuditConfig | None = None) -> list[Stage]:
    config = config or AuditConfig()
    known = STAGES.names(family="audit")
    unknown = [s for s in config.stages if s not in known]
    if unknown:
        raise ValueError(f"unknown audit stages {unknown}; known: {known}")
    return [STAGES.get(s)(getattr(config, s)) for s in config.stages]


async def audit_records(records: Iterable[dict[str, Any]], kb: Any, config: AuditConfig | None = None,
                        roles: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Audit records in memory, one after another (tests, benchmarks, small inputs). Errors raise."""
    stages = build_audit_stages(config)
    ctx = Context(kb=kb, roles=roles or {})
    out = []
    for rec in records:
        for st in stages:
            rec = await st.run(rec, ctx)
        out.append(rec)
    return out


def _label(rec: dict[str, Any]) -> tuple[str, str]:
    status = rec.get("status", "ok")
    audit = rec.get("audit") or {}
    if status != "ok" or not audit:
        return "invalid", "drop"
    return audit.get("answer_support", "invalid"), audit.get("action", "keep")


def verifier_agreement(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The model verifiers' labels per verifier, the verify consensus on the samples they judged (a
    sample the rules settled asks no model), and Cohen's kappa between every pair of model verifiers
    over the samples both judged (3 labels, and supported vs not). `both_unsupported` is how many
    samples both failed to support: what the paper's two-verifier rule removes."""
    from kbvqa.pipelines.audit_tools import cohen_kappa

    per: dict[str, Counter[str]] = {}
    cons: Counter[str] = Counter()
    joint: dict[str, dict[str, str]] = {}  # sample -> verifier -> label
    for rec in records:
        v = ((rec.get("audit") or {}).get("stages") or {}).get("verify") or {}
        results = [r for r in v.get("verifiers", []) if r.get("backend") != "rules"]
        if not results:
            continue
        cons[v.get("label", "?")] += 1
        for r in results:
            per.setdefault(r["verifier"], Counter())[r["label"]] += 1
            joint.setdefault(str(rec.get("id")), {})[r["verifier"]] = r["label"]
    names = list(per)
    pairs = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            both = [(x[a], x[b]) for x in joint.values() if a in x and b in x]
            if not both:
                continue
            la, lb = [x for x, _ in both], [y for _, y in both]
            k3 = cohen_kappa(la, lb)
            k2 = cohen_kappa([x == "entailed" for x in la], [y == "entailed" for y in lb])
            pairs.append({"a": a, "b": b, "n": len(both), "agreement": round(sum(x == y for x, y in both) / len(both), 4),
                          "kappa": None if k3 is None else round(k3, 4),
                          "kappa_supported": None if k2 is None else round(k2, 4),
                          "both_unsupported": sum(x != "entailed" and y != "entailed" for x, y in both)})
    return {"per_verifier": {k: dict(v) for k, v in per.items()}, "consensus": dict(cons), "agreement": pairs}


def audit_summary(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Counts per answer_support label, action and tag, overall and by question type; the flags
    (`flagged`: samples whose answer the audit questions, every rewrite included; by reason, with
    the inconclusive `truncated_evidence` apart), the unsupported reasons, which path decided each
    sample (rules / llm / undecided: the rules could not decide and no model was configured), and
    the verifiers' labels, consensus and Cohen's kappa when model verifiers ran."""
    total = 0
    support: Counter[str] = Counter()
    action: Counter[str] = Counter()
    tags: Counter[str] = Counter()
    status: Counter[str] = Counter()
    flags: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    decided: Counter[str] = Counter()
    flagged = 0
    by_type: dict[str, dict[str, Counter[str]]] = {}
    kept: list[dict[str, Any]] = []
    for rec in records:
        total += 1
        lab, act = _label(rec)
        audit = rec.get("audit") or {}
        qt = str(rec.get("answer_type") or rec.get("question_type") or "unknown")
        support[lab] += 1
        action[act] += 1
        status[rec.get("status", "ok")] += 1
        rec_tags = audit.get("tags", [])
        tags.update(rec_tags)
        if lab != "invalid":
            flags.update(audit.get("flags", []))
            flagged += bool(audit.get("flagged"))
            decided[audit.get("decided_by", "rules")] += 1
            if lab == "unsupported":
                reasons[(audit.get("stages", {}).get("derive") or {}).get("reason") or "unknown"] += 1
            kept.append({"id": rec.get("id"), "audit": {"stages": {"verify": (audit.get("stages") or {}).get("verify")}}})
        t = by_type.setdefault(qt, {"answer_support": Counter(), "action": Counter(), "tags": Counter(),
                                    "flags": Counter()})
        t["answer_support"][lab] += 1
        t["action"][act] += 1
        t["tags"].update(rec_tags)
        t["flags"].update(audit.get("flags", []) if lab != "invalid" else [])
    out = {
        "total": total, "status": dict(status), "answer_support": dict(support), "action": dict(action),
        "flagged": flagged, "flags": dict(flags.most_common()), "unsupported_reasons": dict(reasons.most_common()),
        "decided_by": dict(decided.most_common()),
        "tags": dict(tags.most_common()),
        "by_question_type": {k: {"total": sum(v["answer_support"].values()),
                                 **{n: dict(c) for n, c in v.items()}} for k, v in sorted(by_type.items())},
    }
    agreement = verifier_agreement(kept)
    if agreement["per_verifier"]:
        out["verifiers"] = agreement
    return out


def summary_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.stem + ".summary.json")


def audit_job(config: AuditConfig | None = None, *, kb: Any, roles: dict[str, Any] | None = None) -> Job:
    """The audit as a Job: the configured stage list and a context holding the KB and the roles."""
    config = config or AuditConfig()
    return Job(build_audit_stages(config), Context(kb=kb, roles=roles or {}), description="audit",
               run_config={"audit": config.model_dump(mode="json")})


def audit_file(input_path: str | Path, kb: Any, out: str | Path, config: AuditConfig | None = None, *,
               fmt: str | None = None, concurrency: int = 8, resume: bool = True, limit: int | None = None,
               progress: bool = False, roles: dict[str, Any] | None = None,
               skip_invalid: bool = False, close: bool = False, allow_empty: bool = False) -> dict[str, Any]:
    """Audit a benchmark file (any format read_samples knows) against `kb` (a KB object, or a path
    that kb.store.open_kb opens) and write the audited JSONL to `out` and the summary beside it.
    Returns the summary (with the runner's counts under "run"). The caller owns `roles`; `close=True`
    closes their HTTP pools when the run ends, inside the loop that used them."""
    from kbvqa.data.formats import SampleRecords
    from kbvqa.runner import read_results

    if isinstance(kb, (str, Path)):
        from kbvqa.kb.store import open_kb
        kb = open_kb(kb)
    records = SampleRecords(input_path, fmt, skip_invalid=skip_invalid, allow_empty=allow_empty)
    rs = audit_job(config, kb=kb, roles=roles).run(records, out=Path(out), close=close, concurrency=concurrency,
                                                   resume=resume, limit=limit, progress=progress,
                                                   run_config={"input": str(input_path)})
    summary = audit_summary(read_results(Path(out)))
    summary["run"] = {"total": rs.total, "ok": rs.ok, "error": rs.error, "invalid": rs.invalid,
                      "skipped": rs.skipped, "seconds": round(rs.seconds, 3), "out": str(rs.out),
                      "manifest": str(rs.manifest)}
    sp = summary_path(out)
    sp.write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
    summary["summary_path"] = str(sp)
    return summary


def default_out(input_path: str | Path) -> Path:
    """Where `kbvqa audit run` writes without --out: INPUT.audit.jsonl beside the input."""
    p = Path(input_path)
    return p.with_name(p.stem + ".audit.jsonl")


def run_audit(input_path: str | Path, kb: str | Path, out: str | Path | None = None, *,
              config: str | Path | None = None, llm: str | None = None, model: str | None = None,
              llm_concurrency: int | None = None, concurrency: int = 8, limits: dict[str, Any] | None = None,
              **options: Any) -> dict[str, Any]:
    """`kbvqa audit run`: the audit config and model roles from `config` (an audit.toml) and the
    --llm/--model shortcut, the KB opened from `kb`, then `audit_file` with the roles closed at the
    end (this function made them, so it owns them). `options` go to `audit_file`."""
    cfg = AuditConfig.from_toml(config) if config else AuditConfig()
    roles = load_audit_roles(config, llm=llm, model=model, concurrency=llm_concurrency or concurrency,
                             **(limits or {}))
    return audit_file(input_path, kb, out or default_out(input_path), cfg, concurrency=concurrency, roles=roles,
                      close=True, **options)
