"""How the report is written: numbers for people (formatted here once), the page model, Markdown and HTML.

Rows store raw values (seconds, bytes, floats); everything shown (the report, its figures, the studies' tables, the
sweep's terminal table) is formatted here. A missing or non-finite value is "-". A report (or a study's summary) is a
list of blocks, built once and rendered twice: GitHub Markdown and one self-contained HTML file.
"""

from __future__ import annotations

import base64
import html
import math
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Union

# ---- numbers for people -------------------------------------------------------------------------------
REASON_WIDTH = 90  # characters of a failure reason shown in a table cell
NO_REASON = "(no reason recorded)"


def finite(value: Any) -> float | None:
    """value as a float, or None when it is missing, not a number, NaN or infinite."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def format_number(value: Any, spec: str, suffix: str = "") -> str:
    """`value` with a format spec and a suffix ('1.23x' from (1.234, '.2f', 'x')); '-' when missing or not finite."""
    number = finite(value)
    return "-" if number is None else f"{number:{spec}}{suffix}"


def format_seconds(value: Any) -> str:
    """Seconds in the report and on figure axes: '12.3 us', '4.56 ms', '1.23 s' (three significant digits)."""
    number = finite(value)
    if number is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(number) >= scale:
            return f"{number / scale:.3g} {unit}"
    return f"{number * 1e9:.3g} ns"


def format_duration(seconds: float) -> str:
    """A wall time for people planning a run: '45 s', '12 min', '3.2 h'."""
    if seconds < 120:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 2 * 3600 else f"{seconds / 3600:.1f} h"


def format_seconds_compact(value: Any) -> str:
    """Seconds in a narrow terminal column: '12us' (whole microseconds below 1 ms), '4.56ms', '1.23s'."""
    number = finite(value)
    if number is None:
        return "-"
    if number < 1e-3:
        return f"{number * 1e6:.0f}us"
    if number < 1:
        return f"{number * 1e3:.3g}ms"
    return f"{number:.3g}s"


def format_bytes(value: Any) -> str:
    """Bytes in binary units: '512 B', '3 KiB', '1.5 MiB', '2 GiB' (three significant digits)."""
    number = finite(value)
    if number is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(number) >= size:
            return f"{number / size:.3g} {unit}"
    return f"{number:.0f} B"


def format_n(n: Any) -> str:
    """A sequence length: '4K' for 4096 (whole multiples of 1024), '256', '1.5' for a non-integer axis tick."""
    x = float(n)
    if x >= 1024 and x % 1024 == 0:
        return f"{int(x) // 1024}K"
    return f"{int(x)}" if x == int(x) else f"{x:g}"


def format_lengths(lengths: list[int]) -> str:
    """Sorted lengths as a table names them: 'N=4K-8K' for several (first to last), 'N=1K' for one."""
    if len(lengths) > 1:
        return f"N={format_n(lengths[0])}-{format_n(lengths[-1])}"
    return f"N={format_n(lengths[0])}"


def format_ratio(value: Any, digits: int = 2) -> str:
    """A ratio to a baseline: '1.23x'; '-' when missing or not finite."""
    return format_number(value, f".{digits}f", "x")


def format_times(value: Any) -> str:
    """A speed-up without its 'x', short for a table cell: '3.1', '0.95', '12.8', '256' (two significant digits
    below 10, three from there, whole numbers from 100)."""
    number = finite(value)
    if number is None:
        return "-"
    if abs(number) >= 100:
        return f"{number:.0f}"
    return f"{number:.3g}" if abs(number) >= 10 else f"{number:.2g}"


def format_error(value: Any, digits: int = 1) -> str:
    """An error in scientific notation: '1.2e-03' (digits after the point); '-' when missing or not finite."""
    return format_number(value, f".{digits}e")


def format_text(value: Any) -> str:
    """A value as recorded, '-' for None or an empty string."""
    return "-" if value is None or value == "" else str(value)


def short_reason(reason: Any, width: int = REASON_WIDTH, *, missing: str = NO_REASON) -> str:
    """A failure reason on one line, cut to `width` characters with '...'; `missing` when None or NaN ('' stays '')."""
    if reason is None or (isinstance(reason, float) and math.isnan(reason)):
        return missing
    text = " ".join(str(reason).split())
    return text if len(text) <= width else text[: width - 3] + "..."


# ---- the page model ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Heading:
    level: int  # 1 = the page title, 2 = a section, 3 = a subsection
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str  # may hold **bold** and `code`


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]  # already formatted (the format_* functions above), one list per line


@dataclass(frozen=True)
class Image:
    file: str  # a PNG beside the page (linked from Markdown, embedded in HTML)
    caption: str


@dataclass(frozen=True)
class Code:
    text: str
    language: str = "toml"


@dataclass(frozen=True)
class Fold:
    """A section below the answer: its level-2 heading and its blocks. HTML folds it (<details>, closed), so the page
    opens on the answer; Markdown writes it out as a heading and its blocks."""

    title: str
    blocks: tuple  # of Block (no Fold inside a Fold)


Block = Union[Heading, Paragraph, Table, Image, Code, Fold]


# ---- Markdown and HTML -------------------------------------------------------------------------------
STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
    # a wide table scrolls inside its box (never past the page's right edge); short cells stay on one line and a
    # long text (a reason, a config) wraps at a readable width instead of one word per line
    ".table{overflow-x:auto;margin:1em 0}table{border-collapse:collapse;font-size:13px}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top;white-space:nowrap}"
    "td.text{white-space:normal;min-width:24em;max-width:48em}"
    "th{background:#f3f3f3}img{max-width:100%}figcaption{font-size:13px;color:#555}pre{background:#f6f6f6;padding:1em;"
    "overflow-x:auto}details{border-top:1px solid #ddd;padding:.2em 0}summary{cursor:pointer}summary h2{display:inline}"
)
LONG_CELL = 40  # characters from which a table cell wraps (td.text) instead of staying on one line


# the start of an HTML tag, comment or declaration: '<b', '</', '<!', '<?' (a plain '<=' or '< 2' stays)
_HTML_START = re.compile(r"<(?=[A-Za-z/!?])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # terminal escapes and other control characters


def inert_markdown(text: Any) -> str:
    """One line of Markdown that data cannot turn into structure: line breaks become spaces (no new heading, list or
    table row) and raw HTML tags are escaped ('<script>' shows as text). The page's own **bold** and `code` stay."""
    return _HTML_START.sub("&lt;", _CONTROL.sub("", " ".join(str(text).splitlines())))


def render_markdown(blocks: Iterable[Block]) -> str:
    """The blocks as GitHub Markdown; images are linked by file name (they sit beside the .md). Every text is one inert
    line (inert_markdown); a code block's fence is longer than any run of backticks in it."""
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append("#" * block.level + " " + inert_markdown(block.text))
        elif isinstance(block, Paragraph):
            out.append(inert_markdown(block.text))
        elif isinstance(block, Code):
            fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", block.text)), default=0))
            out.append(f"{fence}{block.language}\n{block.text}\n{fence}")
        elif isinstance(block, Image):
            link = urllib.parse.quote(block.file)  # a file name with spaces, quotes or parentheses stays one link
            out.append(f"![{md_cell(block.file)}]({link})\n\n*{inert_markdown(block.caption)}*")
        elif isinstance(block, Table):
            out.append(markdown_table(block))
        elif isinstance(block, Fold):
            out.append(render_markdown([Heading(2, block.title), *block.blocks]).rstrip("\n"))
        else:
            raise TypeError(f"not a page block: {block!r}")
    return "\n\n".join(out) + "\n"


def markdown_table(table: Table) -> str:
    """One pipe table, cells escaped ('|', line breaks and HTML tags)."""
    lines = ["| " + " | ".join(md_cell(h) for h in table.headers) + " |", "|" + "---|" * len(table.headers)]
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines)


def render_html(blocks: Iterable[Block], folder: Path, *, title: str) -> str:
    """The blocks as one self-contained HTML page (figures read from `folder`, embedded as base64 PNG)."""
    body = [_html_block(block, folder) for block in blocks]
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def _html_block(block: Block, folder: Path) -> str:
    """One block's HTML (a Fold: a closed <details> whose summary is its heading)."""
    if isinstance(block, Heading):
        return f"<h{block.level}>{_inline(block.text)}</h{block.level}>"
    if isinstance(block, Paragraph):
        return f"<p>{_inline(block.text)}</p>"
    if isinstance(block, Code):
        return f"<pre>{html.escape(block.text)}</pre>"
    if isinstance(block, Image):
        data = base64.b64encode((folder / block.file).read_bytes()).decode("ascii")
        return (
            f'<figure><img alt="{html.escape(block.file)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_inline(block.caption)}</figcaption></figure>"
        )
    if isinstance(block, Table):
        head = "".join(f"<th>{_inline(h)}</th>" for h in block.headers)
        rows = "".join("<tr>" + "".join(_html_cell(c) for c in row) + "</tr>" for row in block.rows)
        return f'<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'
    if isinstance(block, Fold):
        inner = "\n".join(_html_block(b, folder) for b in block.blocks)
        return f"<details><summary><h2>{_inline(block.title)}</h2></summary>\n{inner}\n</details>"
    raise TypeError(f"not a page block: {block!r}")


def _html_cell(text: Any) -> str:
    """A table cell: one line, or a wrapping text cell from LONG_CELL characters."""
    wide = ' class="text"' if len(str(text)) >= LONG_CELL else ""
    return f"<td{wide}>{_inline(text)}</td>"


def _inline(text: Any) -> str:
    """HTML of a line with **bold** and `code`."""
    escaped = html.escape(str(text))
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", escaped)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", escaped)


def md_cell(text: Any) -> str:
    """One Markdown table cell: an inert line (inert_markdown) with '|' escaped."""
    return inert_markdown(text).replace("|", "\\|")
