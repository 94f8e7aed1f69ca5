"""One table, three renderings: GitHub markdown, CSV and LaTeX (booktabs).

A `ResultTable` carries the scorer that produced its numbers; the caption of every rendering
names it, so a table pasted into a paper or an issue cannot lose where its numbers came from. (Tables
of counts — an audit summary, augmentation statistics — have no scorer and their caption is the
title.) This is the one table writer: studies, reports and the command line all render through it.
"""

from __future__ import annotations

import csv
import io
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from kbvqa.units import PCT, percent

__all__ = ["LEGEND_WIDTH", "PCT", "ResultTable", "fmt_value", "footnoted", "latex_escape", "md_escape", "percent",
           "prose", "to_markdown", "to_csv", "to_latex", "unit_problems", "wrap_text", "write_table"]

#: The width a terminal legend, footnote or summary line is wrapped at (between words).
LEGEND_WIDTH = 80

#: The unit rule every table follows: kbvqa.units (PCT, percent), checked here by `unit_problems`.
_RATE_WORDS = re.compile(r"accuracy|recall|R@\d+|rate|share|precision|coverage|\bcorrect\b|incorrect|"
                         r"not_attempted|\bf1\b", re.IGNORECASE)
_NOT_PERCENT = re.compile(r"MRR|kappa|alpha|agreement|IVR|score \(1-5\)|calls /|calls per", re.IGNORECASE)
_DIFFERENCE = re.compile(r"points|delta|Δ|\bgap\b|\bdiff|^d[A-Z]|\bchange\b", re.IGNORECASE)  # may be negative


def _is_rate(label: str) -> bool:
    """A header (or a long table's row label) naming an accuracy, recall or rate, which must be in percent."""
    return bool(_RATE_WORDS.search(label)) and not _NOT_PERCENT.search(label)


def _says_percent(label: str) -> bool:
    return PCT in label or "%" in label


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
}


def fmt_value(v: Any, digits: int | None = 2) -> str:
    """A value as every table shows it: floats with two decimals (`digits`; None: as they are), NaN as
    n/a, booleans as yes/no, None as an empty cell, a mapping or a list as `prose` (never a repr)."""
    if v is None:
        return ""
    if isinstance(v, (Mapping, list, tuple, set, frozenset)):
        return prose(v)
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v != v:  # NaN
            return "n/a"
        return str(v) if digits is None else f"{v:.{digits}f}"
    return str(v)


def prose(v: Any) -> str:
    """A value inside a sentence (a legend, a note, a summary line), never a Python repr: None is
    "n/a", a mapping "key n, key n" (underscores as spaces), a list "a, b", a float two decimals."""
    if v is None:
        return "n/a"
    if isinstance(v, Mapping):
        return ", ".join(f"{str(k).replace('_', ' ')} {prose(x)}" for k, x in v.items()) or "none"
    if isinstance(v, (list, tuple, set, frozenset)):
        return ", ".join(prose(x) for x in v) or "none"
    return fmt_value(v)


def wrap_text(text: str, width: int = LEGEND_WIDTH) -> str:
    """A legend or footnote as a terminal shows it: each of its lines wrapped at `width` columns between
    words, the continuation indented under its start ("[2] ", "- ", a leading indent); a word longer
    than the line (a path, a URL) stands whole on a line of its own, never cut."""
    out = []
    for line in text.splitlines() or [""]:
        if len(line) <= width:
            out.append(line)
            continue
        lead = len(line) - len(line.lstrip())
        mark = re.match(r"\s*(?:\[\d+\]\s+|[-*•]\s+)?", line)
        indent = " " * min(max(lead, len(mark.group(0)) if mark else 0), width // 3)
        out.append(textwrap.fill(line, width=width, subsequent_indent=indent, break_long_words=False,
                                 break_on_hyphens=False))
    return "\n".join(out)


def unit_problems(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """What breaks the unit rule in a rendered table (its header and its cells as shown): a float not
    shown with two decimals; a rate column (or, in a long table, a rate row: its first cell names the
    figure; its first column is "figure", "metric" or "measure") with a float but no PCT in its name;
    a PCT value outside [0, 100] (outside [-100, 100] for a difference in points)."""
    out = []
    num = re.compile(r"^-?\d+\.\d+$")
    cells = [[str(c).strip() for c in r] for r in rows]
    long_form = bool(header) and str(header[0]).lower() in ("figure", "metric", "measure")  # a row per figure
    for r in cells:
        label = " ".join(c for c in r if c and not num.match(c) and not c.lstrip("-").isdigit())  # the row's words
        for h, c in zip(header, r):
            if not num.match(c):
                continue
            if len(c.split(".")[1]) != 2:
                out.append(f"{h!r} = {c}: not two decimals")
            if _says_percent(h) or (_says_percent(label) and not _is_rate(h)):
                if not (-100 if _DIFFERENCE.search(f"{h} {label}") else 0) <= float(c) <= 100:
                    out.append(f"{h!r} = {c}: a percentage outside [0, 100]")
            elif _is_rate(h):
                out.append(f"{h!r}: a rate column without {PCT} in its name ({c})")
            elif long_form and _is_rate(label):
                out.append(f"row {label!r}: a rate without {PCT} in its label ({c})")
    return list(dict.fromkeys(out))


@dataclass
class ResultTable:
    name: str  # file stem
    title: str
    scorer: str
    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    notes: list[str] = field(default_factory=list)
    float_digits: int | None = 2  # None: floats as they are (already rounded by whoever made them)

    @classmethod
    def from_dicts(cls, rows: Sequence[dict[str, Any]], *, name: str, title: str = "", scorer: str = "",
                   notes: Sequence[str] = (), float_digits: int | None = 2) -> "ResultTable":
        """A table from row dicts; the columns are every key in first-seen order (a key a row lacks
        is an empty cell)."""
        columns = list(dict.fromkeys(c for r in rows for c in r))
        return cls(name, title, scorer, columns, [[r.get(c) for c in columns] for r in rows], list(notes),
                   float_digits)

    @property
    def caption(self) -> str:
        return f"{self.title} (scorer: {self.scorer})" if self.scorer else self.title

    def fmt(self, v: Any) -> str:
        return fmt_value(v, self.float_digits)

    def as_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r)) for r in self.rows]


def footnoted(rows: Sequence[Sequence[Any]], column: int) -> tuple[list[list[Any]], list[str]]:
    """A narrow table's long texts as footnotes: each distinct text in `column` becomes "[k]" in the
    cell and "[k] text" in the returned notes (the same text, the same mark), so a terminal table keeps
    its words whole and its notes readable."""
    marks: dict[str, int] = {}
    out = []
    for r in rows:
        r = list(r)
        text = "" if r[column] is None else str(r[column])
        if text:
            r[column] = f"[{marks.setdefault(text, len(marks) + 1)}]"
        out.append(r)
    return out, [f"[{k}] {text}" for text, k in marks.items()]


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters (& % $ # _ { } ~ ^ \\)."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


_MD_SPECIAL = re.compile(r"([\\`*_\[\]()!<>|#~])")


def md_escape(text: str) -> str:
    """Markdown-escape untrusted text (dataset questions, model output, labels): every character that
    could open HTML (`<script>`, `<img onerror>`), a link or an image (`[x](javascript:...)`,
    `![x](url)`), emphasis or a table cell is backslash-escaped, and newlines become spaces — so the
    text renders as the text it is."""
    return _MD_SPECIAL.sub(r"\\\1", text).replace("\r", " ").replace("\n", " ")


def _md_cell(s: str) -> str:
    return md_escape(s)


def to_markdown(t: ResultTable, *, caption: bool = True) -> str:
    """GitHub markdown: the caption in bold (unless `caption=False`), the table, the notes in italics.
    A table without columns renders as "(no rows)"."""
    lines = [f"**{_md_cell(t.caption)}**", ""] if caption and t.caption else []
    if not t.columns:
        lines.append("(no rows)")
    else:
        lines += ["| " + " | ".join(_md_cell(str(c)) for c in t.columns) + " |",
                  "|" + "|".join("---:" if _numeric_col(t, i) else "---" for i in range(len(t.columns))) + "|"]
        for r in t.rows:
            lines.append("| " + " | ".join(_md_cell(t.fmt(v)) for v in r) + " |")
    for n in t.notes:
        lines += ["", f"_{_md_cell(n)}_"]
    return "\n".join(lines) + "\n"


def to_csv(t: ResultTable) -> str:
    """CSV with full-precision numbers; the scorer is a column so the file stands alone."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*t.columns, "scorer"])
    for r in t.rows:
        w.writerow([*("" if v is None else v for v in r), t.scorer])
    return buf.getvalue()


def _numeric_col(t: ResultTable, i: int) -> bool:
    vals = [r[i] for r in t.rows if r[i] is not None]
    return bool(vals) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)


def to_latex(t: ResultTable) -> str:
    align = "".join("r" if _numeric_col(t, i) else "l" for i in range(len(t.columns)))
    out = ["\\begin{table}[t]", "\\centering", f"\\caption{{{latex_escape(t.caption)}}}",
           f"\\label{{tab:{re.sub(r'[^A-Za-z0-9:-]+', '-', t.name)}}}",
           f"\\begin{{tabular}}{{{align}}}", "\\toprule",
           " & ".join(latex_escape(str(c)) for c in t.columns) + " \\\\", "\\midrule"]
    for r in t.rows:
        out.append(" & ".join(latex_escape(t.fmt(v)) for v in r) + " \\\\")
    out += ["\\bottomrule", "\\end{tabular}"]
    for n in t.notes:
        out.append(f"\\par\\footnotesize {latex_escape(n)}")
    out.append("\\end{table}")
    return "\n".join(out) + "\n"


def write_table(t: ResultTable, out_dir: str | Path) -> dict[str, Path]:
    """Write NAME.md, NAME.csv and NAME.tex into out_dir; returns the paths by format."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    paths = {"md": d / f"{t.name}.md", "csv": d / f"{t.name}.csv", "tex": d / f"{t.name}.tex"}
    paths["md"].write_text(to_markdown(t), encoding="utf-8")
    paths["csv"].write_text(to_csv(t), encoding="utf-8")
    paths["tex"].write_text(to_latex(t), encoding="utf-8")
    return paths
