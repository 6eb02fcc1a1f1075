"""The demo's corpus: standard-library docstrings, read without importing anything."""

from roberta.demo import _paragraphs, stdlib_documents


def test_docstring_paragraphs_are_joined_lines_without_stubs():
    doc = "Return the sum.\n\nThis adds every item\n    of the iterable, left to right.\n\nArgs:\n"
    assert _paragraphs(doc) == ["Return the sum.", "This adds every item of the iterable, left to right."]


def test_stdlib_documents_are_modules_in_sorted_order():
    documents = stdlib_documents()
    assert len(documents) > 100
    text = "\n".join(p for doc in documents for p in doc)
    # json/__init__.py's module docstring opens with this sentence.
    assert "JSON (JavaScript Object Notation)" in text
    assert all(doc and all("\n" not in p for p in doc) for doc in documents)
