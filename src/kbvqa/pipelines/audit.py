"""The audit/repair pipeline: verify -> derive -> posedness -> leakage, run by the runner.

`build_audit_stages(config)` gives the stage list and `audit_job` the Job, `audit_with(opts, kb)` audits a
benchmark file against a KB and writes the audited JSONL plus `<out stem>.summary.json` (`run_audit`
does it for `kbvqa audit run`, `audit_file(...)` for a library caller), and `audit_summary(records)` counts
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

`kbvqa audit run IN --kb KB --llm URL --model NAME` is the shortcut for one model in all three roles;
`--model A --model B` (several) makes each a verifier of its own on that server (the paper's two
independent verifiers, §4.1 step 1), the first also the repairer and checker. Removal is decided by
the model verifiers (an instance is unsupported only when every one of them finds no support). A run
with one model verifier says "one verifier: the paper uses two", a rules-only run that it is kbvqa's
offline stand-in, in the summary (`verification`), the manifest and on stderr.

Every setting of one run is an `AuditOptions` (the stage tables above, `[audit.run]` concurrency /
limit / resume / allow_empty, `[audit.models]` llm / model / call limits, llm_concurrency,
skip_invalid, fmt), built once by `audit_options` from the config file and the flags (flags win),
handed to `audit_with` unchanged (each stage gets its own table of it) and recorded in the run's
manifest as `run_config.options`.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar, Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field

from kbvqa.runner.config import read_toml
from kbvqa.runner.job import Job
from kbvqa.runner.options import (
    JobOptions,
    ModelFlags,
    OptionsError,
    RunOptions,
    read_table,
)
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
        """The settings of an audit.toml as `kbvqa audit run --config` reads them (`audit_options`):
        an `AuditOptions`, whose stage tables are this class's."""
        return audit_options(path)


class AuditRun(RunOptions):
    """The audit's runner settings: 8 samples at once (the rules are cheap; model roles share one
    client each, whose limit is --llm-concurrency)."""

    concurrency: int = Field(8, ge=1)
    limit: int | None = Field(None, ge=0)


class AuditOptions(JobOptions, AuditConfig):
    """Every setting of one audit run: the stage tables of `AuditConfig` as they are (each stage is
    built from its own table, `opts.verify` ...), the runner's, the model-role flags and the input's.
    Paths are as given; `input`/`kb`/`out` are None for a library caller that hands records or a KB
    object itself (`audit_file`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: Path | None = None  # the benchmark file
    kb: Path | None = None  # SQLite KB store or wiki JSON
    out: Path | None = None  # the audited JSONL (None: INPUT.audit.jsonl, `default_out`)
    fmt: str | None = None  # the input's format (None: detected)
    config: Path | None = None  # the audit.toml: these settings and the [models.*] roles
    skip_invalid: bool = False  # a malformed input row is skipped (and counted) instead of stopping the run
    llm_concurrency: int | None = Field(None, ge=1)  # requests in flight to --llm (None: run.concurrency)
    # --model given several times: each name a verifier of its own on --llm (the first fills repairer/checker)
    verifier_models: list[str] | None = None
    run: AuditRun = Field(default_factory=AuditRun)
    models: ModelFlags = Field(default_factory=ModelFlags)

    #: `llm` is also a leaf of every stage table (auto/on/off): the flag is the model server's URL
    ALIASES: ClassVar[Mapping[str, tuple[str, ...]]] = {"llm": ("models.llm",)}
    FLAGS: ClassVar[Mapping[str, str]] = {"fmt": "--from"}

    def stage_config(self) -> dict[str, Any]:
        """The stage tables alone (what `audit_job` records under `audit`)."""
        return self.model_dump(mode="json", include=set(AuditConfig.model_fields))


def _audit_table(config: str | Path) -> tuple[dict[str, Any], str]:
    """The audit settings table of `config` and how errors name it: `[audit]`, or the whole file
    minus `[models]` and `[cache]` (the older top-level layout: `[verify]`, `[derive]`, ...)."""
    doc = read_toml(config, OptionsError)
    if "audit" in doc:
        return read_table(config, "audit"), f"{config} [audit]"
    return {k: v for k, v in doc.items() if k not in ("models", "cache")}, str(config)


def audit_options(config: str | Path | None = None, **flags: Any) -> AuditOptions:
    """The audit run's options, built once: the class defaults, under the settings table of the
    audit.toml `config`, under `flags` (AuditOptions settings; None is a flag not given). A bad value
    is an OptionsError naming the flag, or the file and key."""
    if config is None:
        return AuditOptions.build(**flags)
    table, source = _audit_table(config)
    return AuditOptions.build(table, source=source, config=Path(config), **flags)


LLM_ROLES = ("verifier", "repairer", "checker")


def audit_roles(opts: AuditOptions, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Model roles for the audit. `opts.config` may hold `[models.verifier]` (or `[[models.verifier]]`
    for several), `[models.repairer]`, `[models.checker]` (kbvqa.models.config format). `--llm` +
    `--model` fill verifier, repairer and checker with ONE shared OpenAI-compatible client, so its
    concurrency limit (llm_concurrency, else run.concurrency) covers all three; they replace those
    roles from the file. The call limits (None: each role's own setting) apply to every role."""
    concurrency = opts.llm_concurrency or opts.run.concurrency
    roles = opts.models.roles(opts.config, fill=LLM_ROLES, concurrency=concurrency, env=env)
    names = list(dict.fromkeys(opts.verifier_models or []))
    if len(names) > 1:
        if opts.models.model not in (None, names[0]):
            raise OptionsError(f"--model {opts.models.model!r} is not the first of the verifier models {names}")
        first = roles.get("verifier") if opts.models.model else None
        clients = [first] if first is not None else []
        for name in names[len(clients):]:
            flags = opts.models.model_copy(update={"model": name})
            clients.append(flags.roles(None, fill=("verifier",), concurrency=concurrency, env=env)["verifier"])
        roles["verifier"] = clients
        for role in ("repairer", "checker"):
            roles.setdefault(role, clients[0])
    return roles


def model_verifiers(config: AuditConfig, roles: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The model verifiers the verify stage of `config` will ask with `roles`: name and model each."""
    from kbvqa.stages.audit.llm import expand

    if "verify" not in config.stages:
        return []
    cfg = config.verify
    names = [v for v in cfg.verifiers if v != "rules"]
    if cfg.llm != "off" and cfg.llm_role not in names and roles.get(cfg.llm_role) is not None:
        names.append(cfg.llm_role)
    out = []
    for n in names:
        if roles.get(n) is not None:
            out += [{"verifier": v, "model": getattr(c, "model", None)} for v, c in expand(n, roles[n])]
    return out


def verification(verifiers: list[dict[str, Any]]) -> dict[str, Any]:
    """What the run says about who decided removals: the model verifiers and, with fewer than the
    paper's two, the notice."""
    from kbvqa.stages.audit.verify import verification_notice

    notice = verification_notice(len(verifiers))
    return {"model_verifiers": verifiers, **({"notice": notice} if notice else {})}


def load_audit_roles(config: str | Path | None = None, *, env: dict[str, str] | None = None,
                     **flags: Any) -> dict[str, Any]:
    """`audit_roles` for a library caller: `flags` are AuditOptions settings (llm, model, timeout,
    llm_concurrency, concurrency ...); the file's settings table is not read."""
    return audit_roles(AuditOptions.build(config=config, **flags), env=env)


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
    from kbvqa.evaluate.agreement import cohen_kappa

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
    """Counts per answer_support label, action and tag, overall and by question type; who decided
    removals (`verification`: the model verifiers, and the notice with fewer than two); answers
    corrected (mismatched) apart from answers only format-normalised; the flags
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
    seen_verify, model_names = False, set()
    corrected = normalised = kept_by_policy = 0
    for rec in records:
        total += 1
        lab, act = _label(rec)
        audit = rec.get("audit") or {}
        v = (audit.get("stages") or {}).get("verify")
        if v is not None:
            seen_verify = True
            model_names.update(v.get("model_verifiers") or [])
        corrected += "answer_corrected" in (audit.get("reasons") or [])
        normalised += "format_normalised" in (audit.get("tags") or [])
        kept_by_policy += "kept_by_dataset_policy" in (audit.get("tags") or [])
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
    if seen_verify:
        out["verification"] = verification([{"verifier": n, "model": None} for n in sorted(model_names)])
    out["answer_changes"] = {"corrected": corrected, "format_normalised": normalised}
    out["kept_by_dataset_policy"] = kept_by_policy
    return out


def summary_path(out: str | Path) -> Path:
    from kbvqa.runner.lock import side_path

    return side_path(Path(out), ".summary.json")


def audit_job(config: AuditConfig | None = None, *, kb: Any, roles: dict[str, Any] | None = None) -> Job:
    """The audit as a Job: the configured stage list and a context holding the KB and the roles."""
    config = config or AuditConfig()
    return Job(build_audit_stages(config), Context(kb=kb, roles=roles or {}), description="audit",
               run_config={"audit": config.model_dump(mode="json", include=set(AuditConfig.model_fields))})


def default_out(input_path: str | Path) -> Path:
    """Where `kbvqa audit run` writes without --out: INPUT.audit.jsonl beside the input."""
    p = Path(input_path)
    return p.with_name(p.stem + ".audit.jsonl")


def audit_with(opts: AuditOptions, kb: Any, *, roles: dict[str, Any] | None = None, close: bool = False,
               progress: bool = False) -> dict[str, Any]:
    """Audit `opts.input` against `kb` (a KB object, or None: `opts.kb` opened by kb.store.open_kb)
    and write the audited JSONL to `opts.out` (default `default_out`) and the summary beside it.
    Returns the summary (with the runner's counts under "run"). The caller owns `roles`; `close=True`
    closes their HTTP pools when the run ends, inside the loop that used them. The manifest records
    `opts.used()` as `run_config.options`."""
    from kbvqa.data.formats import SampleRecords
    from kbvqa.runner import read_results

    if opts.input is None:
        raise ValueError("the audit needs an input file (AuditOptions.input)")
    if kb is None:
        if opts.kb is None:
            raise ValueError("the audit needs a KB (AuditOptions.kb, or a KB object)")
        from kbvqa.kb.store import open_kb
        kb = open_kb(opts.kb)
    out = opts.out or default_out(opts.input)
    records = SampleRecords(opts.input, opts.fmt, skip_invalid=opts.skip_invalid, allow_empty=opts.run.allow_empty)
    who = verification(model_verifiers(opts, roles or {}))
    from kbvqa.runner.lock import OutputLock

    with OutputLock(out, lend=True):  # the summary is a side file: written under the output's one lock
        rs = audit_job(opts, kb=kb, roles=roles).run(
            records, out=out, close=close, concurrency=opts.run.concurrency, resume=opts.run.resume,
            limit=opts.run.limit, progress=progress,
            run_config={"input": str(Path(opts.input).resolve()), "options": opts.used(), "verification": who})
        summary = audit_summary(read_results(out))
        if "verify" in opts.stages:
            summary["verification"] = who
        summary["run"] = {"total": rs.total, "ok": rs.ok, "error": rs.error, "invalid": rs.invalid,
                          "skipped": rs.skipped, "seconds": round(rs.seconds, 3), "out": str(rs.out),
                          "manifest": str(rs.manifest)}
        sp = summary_path(out)
        sp.write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
    summary["summary_path"] = str(sp)
    return summary


def audit_file(input_path: str | Path, kb: Any, out: str | Path, config: AuditConfig | None = None, *,
               roles: dict[str, Any] | None = None, close: bool = False, progress: bool = False,
               **settings: Any) -> dict[str, Any]:
    """`audit_with` for a library caller (tests, the demo): `kb` a KB object or a path, `config` stage
    settings (an AuditConfig), `settings` any other AuditOptions settings by flag name (fmt,
    concurrency, resume, limit, skip_invalid, allow_empty ...), built into one AuditOptions."""
    stages = config.model_dump(exclude_unset=True, include=set(AuditConfig.model_fields)) if config else {}
    path = kb if isinstance(kb, (str, Path)) else None
    opts = AuditOptions.build(stages, input=Path(input_path), kb=path, out=Path(out), **settings)
    return audit_with(opts, None if path is not None else kb, roles=roles, close=close, progress=progress)


def run_audit(opts: AuditOptions, *, progress: bool = False) -> dict[str, Any]:
    """`kbvqa audit run`: the model roles from the options (`audit_roles`), the KB opened from
    `opts.kb`, then `audit_with`, the roles closed at the end (this function made them, so it owns them)."""
    return audit_with(opts, None, roles=audit_roles(opts), close=True, progress=progress)
