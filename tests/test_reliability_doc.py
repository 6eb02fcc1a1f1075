"""docs/reliability.md keeps its promises tested: every promise (a bullet, or a paragraph outside
one) ends with a `Tests:` line naming the tests that check it, and each named test exists: a
`path::test_name` a test function of that file, a `path[row]` a row of that file's refusal table."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reliability.md"
REFERENCE = re.compile(r"`([^`\[:]+\.py)(?:::(\w+)|\[([^\]]+)\])`")


def promises(text: str) -> list[list[str]]:
    """The doc's promises, each as its lines: a bullet up to the next bullet, blank line or heading;
    a paragraph likewise."""
    found, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        if line and not line.startswith(("#", " ")):
            end = i + 1
            while end < len(lines) and lines[end] and not lines[end].startswith(("- ", "#")):
                end += 1
            found.append(lines[i:end])
            i = end
        else:
            i += 1
    return found


def test_every_promise_names_the_tests_that_check_it_and_they_exist():
    blocks = promises(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= 40
    for block in blocks:
        tests = [line for line in block if line.lstrip().startswith("Tests: ")]
        assert len(tests) == 1, f"a promise without one 'Tests:' line: {block[0][:80]!r}"
        references = REFERENCE.findall(tests[0])
        assert references and len(references) == tests[0].count("`") // 2, tests[0]
        for path, function, row in references:
            source = (ROOT / "tests" / path).read_text(encoding="utf-8")
            if function:
                assert re.search(rf"^def {function}\(", source, re.M), f"{path}::{function} is no test"
            else:
                assert f'"{row}"' in source, f"{path} has no row {row!r}"


def test_the_walk_finds_a_promise_without_tests():
    text = "# T\n\nIntro.\nTests: `x.py::test_y`.\n\n- A.\n- B\n  more.\n"
    blocks = promises(text)
    assert [b[0] for b in blocks] == ["Intro.", "- A.", "- B"]
    assert blocks[2] == ["- B", "  more."]
