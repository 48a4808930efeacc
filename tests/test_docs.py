"""The documentation against what it describes: docs/flags.md is made from the settings'
declarations (``main.flags_page``) and names every flag of the parser that ``main.build_parser()``
builds, and no flag the parser lacks; every relative link of README.md and docs/ (images included) points
at a file that exists and, with an ``#anchor``, at a heading of that file."""

from __future__ import annotations

import argparse
import glob
import os
import re

import pytest

import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS_MD = os.path.join(ROOT, "docs", "flags.md")
PAGES = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))]

FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
FLAG = re.compile(r"(?<![\w-])--[A-Za-z0-9][A-Za-z0-9_-]*")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def prose(text: str) -> str:
    """``text`` without its fenced code blocks (a command in one is not a link or a heading)."""
    return FENCE.sub("", text)


# ------------------------------------------------------------------------------------------------ flags.md
def named_flags(text: str) -> set[str]:
    """Every ``--flag`` written in an inline code span of ``text``."""
    spans = re.findall(r"`([^`\n]+)`", prose(text))
    return {flag for span in spans for flag in FLAG.findall(span)}


def parser_flags() -> tuple[set[str], set[str]]:
    """(the flags flags.md must name, every option string the parser takes). A switch's ``--no-X``
    form is the flag ``--X`` turned off: its ``--X`` must be named, ``--no-X`` may be."""
    required, known = set(), set()
    for action in main.build_parser()._actions:
        known.update(action.option_strings)
        if isinstance(action, argparse._HelpAction):
            continue
        longs = {name for name in action.option_strings if name.startswith("--")}
        if isinstance(action, argparse.BooleanOptionalAction):
            longs = {name for name in longs if not name.startswith("--no-")}
        required |= longs
    return required, known


def test_named_flags_are_read_from_code_spans_only():
    text = "`--env-name ID`, `--icm` / `--no-icm`, `python main.py --eval --load X`; --outside\n```\n--fenced\n```"
    assert named_flags(text) == {"--env-name", "--icm", "--no-icm", "--eval", "--load"}


def test_flags_md_names_every_flag_of_the_parser():
    required, _ = parser_flags()
    assert len(required) > 50  # the parser was read
    missing = sorted(required - named_flags(read(FLAGS_MD)))
    assert not missing, f"flags main.py defines that docs/flags.md does not name: {', '.join(missing)}"


def test_flags_md_is_made_from_the_settings_declarations():
    """The page is main.flags_page(), so it cannot drift from the flags, their help and the defaults."""
    assert read(FLAGS_MD) == main.flags_page(), (
        "docs/flags.md is out of date: python -c \"import main; print(main.flags_page(), end='')\" > docs/flags.md"
    )


def test_every_flag_flags_md_names_is_one_the_parser_takes():
    _, known = parser_flags()
    unknown = sorted(named_flags(read(FLAGS_MD)) - known)
    assert not unknown, f"flags docs/flags.md names that main.py does not take: {', '.join(unknown)}"


# ------------------------------------------------------------------------------------------------ links
def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: markup dropped, lower case, punctuation but hyphens and
    underscores dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: str) -> set[str]:
    """The anchors of a markdown file's headings; a repeated heading's get -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for _, heading in HEADING.findall(prose(read(path))):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: str) -> list[str]:
    """The relative links of ``page`` whose file does not exist, or whose #anchor is no heading of it."""
    broken = []
    for target in LINK.findall(prose(read(page))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(full):
            broken.append(f"{target} (no such file)")
        elif anchor and full.endswith(".md") and anchor not in anchors(full):
            broken.append(f"{target} (no such heading)")
    return broken


def test_a_heading_s_anchor_is_github_s():
    assert slug("PPO: reusing each rollout") == "ppo-reusing-each-rollout"
    assert slug("The Zoo's own setting, against SB3's A2C") == "the-zoos-own-setting-against-sb3s-a2c"
    assert slug("`--algo ppo` and `--max_grad_norm`") == "--algo-ppo-and---max_grad_norm"
    assert slug("The screen, 1.5M env steps each (seed 42)") == "the-screen-15m-env-steps-each-seed-42"


def test_a_link_checker_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "other.md").write_text("# Title\n\n## A part\n\n## A part\n")
    (tmp_path / "image.png").write_bytes(b"")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](sub/other.md#a-part) [ok too](sub/other.md#a-part-1) ![ok](image.png) [web](https://x.org)"
        " [here](#local)\n\n## Local\n\n[gone](missing.md) [no part](sub/other.md#b-part)\n"
        "```\n[in code](nowhere.md)\n```\n"
    )
    assert broken_links(str(page)) == ["missing.md (no such file)", "sub/other.md#b-part (no such heading)"]


@pytest.mark.parametrize("page", PAGES, ids=[os.path.relpath(p, ROOT) for p in PAGES])
def test_every_relative_link_points_at_a_file_and_heading_that_exist(page):
    assert not broken_links(page)
