"""harness.report.render: each block type in Markdown and in self-contained HTML."""

from __future__ import annotations

import base64

import pytest

from harness.report.render import Code, Heading, Image, Paragraph, Table, render_html, render_markdown

BLOCKS = [
    Heading(1, "Title"),
    Paragraph("a **bold** `flag`"),
    Table(["a", "b|c"], [["1", "x|y\nz"]]),
    Code("k = 1"),
    Image("fig.png", "the caption"),
]


def test_markdown():
    md = render_markdown(BLOCKS)
    assert md == (
        "# Title\n\na **bold** `flag`\n\n| a | b\\|c |\n|---|---|\n| 1 | x\\|y z |\n\n```toml\nk = 1\n```\n\n"
        "![fig.png](fig.png)\n\n*the caption*\n"
    )


def test_html_is_self_contained_and_escaped(tmp_path):
    png = b"\x89PNG fake"
    (tmp_path / "fig.png").write_bytes(png)
    page = render_html(BLOCKS + [Paragraph("<script>")], tmp_path, title="T & co")
    assert "<title>T &amp; co</title>" in page and "<h1>Title</h1>" in page
    assert "<p>a <b>bold</b> <code>flag</code></p>" in page and "&lt;script&gt;" in page
    assert "<th>b|c</th>" in page and "<pre>k = 1</pre>" in page
    assert f"data:image/png;base64,{base64.b64encode(png).decode()}" in page


def test_an_unknown_block_is_an_error(tmp_path):
    with pytest.raises(TypeError, match="not a page block: \\('p', 'old tuple'\\)"):
        render_markdown([("p", "old tuple")])
    with pytest.raises(TypeError, match="not a page block"):
        render_html([("p", "old tuple")], tmp_path, title="t")
