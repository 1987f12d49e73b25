"""Campaign reports: Markdown and self-contained HTML with matplotlib figures, numbers only from the store."""

from a3r.report.data import (
    ReportData,
    allowed_numbers,
    answer_evidence,
    build_report_data,
    eval_items_of,
    question_of,
    vet_prose,
)
from a3r.report.render import render_report, write_report

__all__ = [
    "ReportData",
    "allowed_numbers",
    "answer_evidence",
    "build_report_data",
    "eval_items_of",
    "question_of",
    "render_report",
    "vet_prose",
    "write_report",
]
