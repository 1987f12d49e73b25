"""Static checks of a client's Python files with pyflakes (it parses, never runs, the code): undefined
names and syntax errors are errors before any import, so the repair loop hears of a typo in a function
body that an import alone would not reveal. Style findings (unused imports, ...) are left out."""

from __future__ import annotations

from pathlib import Path

from pyflakes import api, messages

from vibe.flags import Report, Severity, Stage

__all__ = ["static_check"]

# the findings that are bugs when the code runs; the rest of pyflakes' messages are style
_BUGS = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport, messages.DuplicateArgument,
         messages.ReturnOutsideFunction, messages.YieldOutsideFunction, messages.ContinueOutsideLoop,
         messages.BreakOutsideLoop)


class _Collect:
    """pyflakes' reporter interface, keeping what it says."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def unexpectedError(self, filename: str, msg: str) -> None:
        self.found.append(f"{filename}: {msg}")

    def syntaxError(self, filename: str, msg: str, lineno: int, offset: int, text: str) -> None:
        self.found.append(f"{filename}:{lineno}: syntax error: {msg}")

    def flake(self, message: messages.Message) -> None:
        if isinstance(message, _BUGS):
            self.found.append(f"{message.filename}:{message.lineno}: {message.message % message.message_args}")


def static_check(root: Path, report: Report) -> None:
    """Add a STATIC error per Python file of the client with an undefined name or a syntax error."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(".vibe/"):
            continue
        out = _Collect()
        api.check(path.read_text(errors="replace"), rel, out)
        if out.found:
            report.add(Stage.STATIC, "static_error", Severity.ERROR,
                       "; ".join(out.found[:5]), file=rel)
