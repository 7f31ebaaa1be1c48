"""What an adopter looks for before anything else: the licence, how to contribute and report, what
changed (issue 34)."""

from __future__ import annotations

import tomllib

from tests.conftest import REPO


def test_the_licence_is_apache_2_and_every_place_names_the_same_one():
    licence = (REPO / "LICENSE").read_text()
    assert licence.startswith("\n                                 Apache License\n                           Version 2.0")
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"] == "Apache-2.0"
    assert "Apache License 2.0 (`LICENSE`)" in (REPO / "README.md").read_text()
    assert "Apache License 2.0" in (REPO / "CONTRIBUTING.md").read_text()


def test_security_reports_have_a_private_way_in():
    text = (REPO / "SECURITY.md").read_text()
    assert "do not open a public issue" in text and "Report a vulnerability" in text


def test_the_readme_contents_list_every_section_in_order():
    import re

    text = (REPO / "README.md").read_text()
    sections = re.findall(r"^## (.+)$", text, re.M)
    listed = re.findall(r"^- \[(.+?)\]\(#[^)]+\)$", text.split("\n## ", 1)[0], re.M)
    assert listed == sections
