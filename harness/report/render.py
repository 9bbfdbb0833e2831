"""The two renderers of a page (harness.report.page): GitHub Markdown and one self-contained HTML file."""

from __future__ import annotations

import base64
import html
import re
import urllib.parse
from pathlib import Path
from typing import Any, Iterable

from harness.report.page import Block, Code, Heading, Image, Paragraph, Table

STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
    "th{background:#f3f3f3}img{max-width:100%}figcaption{font-size:13px;color:#555}pre{background:#f6f6f6;padding:1em}"
)


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
    body: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            body.append(f"<h{block.level}>{_inline(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            body.append(f"<p>{_inline(block.text)}</p>")
        elif isinstance(block, Code):
            body.append(f"<pre>{html.escape(block.text)}</pre>")
        elif isinstance(block, Image):
            data = base64.b64encode((folder / block.file).read_bytes()).decode("ascii")
            body.append(
                f'<figure><img alt="{html.escape(block.file)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{_inline(block.caption)}</figcaption></figure>"
            )
        elif isinstance(block, Table):
            head = "".join(f"<th>{_inline(h)}</th>" for h in block.headers)
            rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in block.rows)
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        else:
            raise TypeError(f"not a page block: {block!r}")
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def _inline(text: Any) -> str:
    """HTML of a line with **bold** and `code`."""
    escaped = html.escape(str(text))
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", escaped)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", escaped)


def md_cell(text: Any) -> str:
    """One Markdown table cell: an inert line (inert_markdown) with '|' escaped."""
    return inert_markdown(text).replace("|", "\\|")
