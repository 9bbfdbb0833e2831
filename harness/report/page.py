"""The page model: a report (or a study's summary) is a list of blocks, built once and rendered twice (harness.report.render)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union


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
    rows: list[list[str]]  # already formatted (harness.report.formatting), one list per line


@dataclass(frozen=True)
class Image:
    file: str  # a PNG beside the page (linked from Markdown, embedded in HTML)
    caption: str


@dataclass(frozen=True)
class Code:
    text: str
    language: str = "toml"


Block = Union[Heading, Paragraph, Table, Image, Code]
