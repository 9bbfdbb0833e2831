"""Every block type of the page model, rendered to Markdown and to HTML, with text that needs escaping in every field:
data (a variant's name, a reason, an environment string, a plugin's docstring) never becomes markup or structure."""

from __future__ import annotations

import pytest

from harness.report.render import Code, Heading, Image, Paragraph, Table, render_html, render_markdown

HOSTILE = '<script>alert("x")</script> & \x1b[31m\n# injected heading\n| a | cell |'
FIGURE = 'fig <b> "q" (1).png'  # a file name with markup, quotes and parentheses


def blocks_with_hostile_text() -> dict[str, list]:
    return {
        "heading": [Heading(2, HOSTILE)],
        "paragraph": [Paragraph(HOSTILE)],
        "table header": [Table([HOSTILE, "b"], [["1", "2"]])],
        "table cell": [Table(["a", "b"], [[HOSTILE, "2"]])],
        "code": [Code(HOSTILE + "\n```\n# out of the fence")],
        "image caption": [Image(FIGURE, HOSTILE)],
    }


@pytest.fixture
def folder(tmp_path):
    (tmp_path / FIGURE).write_bytes(b"\x89PNG fake")
    return tmp_path


@pytest.mark.parametrize("kind", list(blocks_with_hostile_text()))
def test_html_escapes_every_block_type(kind, folder):
    page = render_html(blocks_with_hostile_text()[kind], folder, title=HOSTILE)
    body = page.split("<body>", 1)[1]
    assert "<script" not in page and "&lt;script&gt;" in body
    assert 'alert("x")' not in page  # quotes escaped too (attribute-safe)
    if kind == "image caption":
        assert 'alt="fig &lt;b&gt; &quot;q&quot; (1).png"' in page


@pytest.mark.parametrize("kind", list(blocks_with_hostile_text()))
def test_markdown_keeps_every_block_type_inert(kind):
    text = render_markdown(blocks_with_hostile_text()[kind])
    if kind == "code":  # verbatim inside a fence longer than any backtick run in it
        fence = text.splitlines()[0].rstrip("toml")
        assert len(fence) > 3 and text.rstrip().endswith(fence) and "```\n# out of the fence" in text
    else:  # a code block is verbatim inside its fence; everything else is one inert line
        assert "<script" not in text and "\x1b" not in text
        assert not [line for line in text.splitlines() if line.startswith("# injected")], text
    if kind.startswith("table"):  # still one header, one rule and one row: the '|' of the data is escaped
        lines = text.strip().splitlines()
        assert len(lines) == 3 and all(line.count(" | ") - line.count("\\| ") <= 1 for line in lines[::2])
    if kind == "image caption":
        assert "](fig%20%3Cb%3E%20%22q%22%20%281%29.png)" in text and "<b>" not in text
