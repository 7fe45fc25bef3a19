"""The README stays a short door and the docs stay reachable: length limit, live relative links (and #anchors),
the two newcomer commands at the top, and a test command identical to what .ci/run runs."""
from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CI_RUN = ROOT / ".ci" / "run"

MAX_README_LINES = 300
TOP_LINES = 40  # the newcomer commands must be visible without scrolling far
DOC_PAGES = ("architecture", "libsvm", "text", "shardsets", "pipeline", "sharding", "processing", "bench")
MARKDOWN = [README] + sorted(DOCS.glob("*.md"))

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\n[ \t]*\n).)+?\1", re.S)  # a code span, not across a blank line
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*<?(\S+?)>?(?:[ \t]+.*)?$", re.M)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _split_fences(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(prose lines, code lines), each as (1-based line number, text); fence lines themselves are in neither."""
    prose, code = [], []
    fence = None
    for n, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
        elif fence is not None and m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                and not line.strip()[len(m.group(1)):].strip():
            fence = None
        elif fence is None:
            prose.append((n, line))
        else:
            code.append((n, line))
    return prose, code


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: rendered text, lower case, only letters, digits, '_', '-' and spaces
    kept, spaces turned into '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()          # inline HTML shows nothing
    return "".join(ch for ch in text if ch.isalnum() or ch in "_- ").replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in _split_fences(path.read_text(encoding="utf-8"))[0]:
        m = _HEADING.match(line)
        if not m:
            continue
        slug = github_slug(m.group(1))
        k = seen.get(slug, 0)
        seen[slug] = k + 1
        out.add(slug if k == 0 else f"{slug}-{k}")  # GitHub numbers repeated headings
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every inline, image and reference link outside code (link text may wrap lines)."""
    text = path.read_text(encoding="utf-8")
    lines = [""] * len(text.splitlines())
    for n, line in _split_fences(text)[0]:
        lines[n - 1] = line                                   # code blocks become blank lines
    prose = _INLINE_CODE.sub(lambda m: "\n" * m.group(0).count("\n"), "\n".join(lines))
    found = [(prose.count("\n", 0, m.start()) + 1, m.group(1)) for m in _REF_LINK.finditer(prose)]
    found += [(prose.count("\n", 0, m.start()) + 1, m.group(1)) for m in _INLINE_LINK.finditer(prose)]
    return sorted(found)


def broken_links(path: Path) -> list[str]:
    problems = []
    for n, target in links(path):
        where = f"{_rel(path)}:{n}: {target!r}"
        if not target or _SCHEME.match(target) or target.startswith("//"):
            continue  # external (http:, https:, mailto:) — not checked offline
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if ROOT not in dest.parents and dest != ROOT:
            problems.append(f"{where}: points outside the repository")
        elif not dest.exists():
            problems.append(f"{where}: {_rel(dest) if ROOT in dest.parents else dest} does not exist")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: no heading with anchor #{anchor} in {_rel(dest)}")
    return problems


def ci_commands() -> list[list[str]]:
    """The commands .ci/run runs, as argument lists (shell set-up lines left out)."""
    cmds = []
    for line in CI_RUN.read_text(encoding="utf-8").splitlines():
        argv = shlex.split(line, comments=True)
        if argv and argv[0] not in ("set", "cd"):
            cmds.append(argv)
    return cmds


def shell_line_commands(line: str) -> list[list[str]]:
    """`a && b  # comment` -> [argv of a, argv of b]."""
    argv = shlex.split(line, comments=True)
    cmds, cur = [], []
    for tok in argv:
        if tok == "&&":
            cmds.append(cur)
            cur = []
        else:
            cur.append(tok)
    cmds.append(cur)
    return cmds


def top_code_lines() -> list[str]:
    code = _split_fences(README.read_text(encoding="utf-8"))[1]
    return [line for n, line in code if n <= TOP_LINES]


# -- (a) the README is a door ---------------------------------------------------------------------------------

def test_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines (at most {MAX_README_LINES}): move details to docs/"


def _help() -> str:
    from converters.cli.main import build_parser

    return build_parser().format_help()


@pytest.mark.parametrize("door, text", [
    ("README.md's opening paragraph", lambda: README.read_text(encoding="utf-8").split("\n\n")[1]),
    ("tfpipe --help", _help),
], ids=["readme", "help"])
def test_a_raw_log_user_finds_convert_tabular_at_the_door(door, text):
    found = " ".join(text().split())  # as read, whatever the line breaks
    assert "convert tabular" in found and "click logs" in found, f"{door} does not name convert tabular: {found}"


# -- (b) every relative link resolves --------------------------------------------------------------------------

@pytest.mark.parametrize("path", MARKDOWN, ids=_rel)
def test_relative_links_resolve(path):
    assert links(path) or path != README, "README.md links to nothing"
    problems = broken_links(path)
    assert not problems, "broken links:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", DOC_PAGES)
def test_docs_page_exists_and_is_linked_from_readme(page):
    path = DOCS / f"{page}.md"
    assert path.is_file(), f"docs/{page}.md is missing"
    targets = {t.partition("#")[0] for _, t in links(README)}
    assert f"docs/{page}.md" in targets, f"README.md does not link to docs/{page}.md"


@pytest.mark.parametrize("path", sorted(DOCS.glob("*.md")), ids=_rel)
def test_docs_page_starts_with_link_back_to_readme(path):
    first = next(line for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    assert re.search(r"\]\(\.\./README\.md(#[^)]*)?\)", first), f"{_rel(path)} must open with a link to ../README.md"


@pytest.mark.parametrize("heading, slug", [
    ("Measured speed", "measured-speed"),
    ("The plan: files or `shard(n, i)`, and equal steps", "the-plan-files-or-shardn-i-and-equal-steps"),
    ("Text / Pile → TFRecord (`tfpipe convert text`)", "text--pile--tfrecord-tfpipe-convert-text"),
    ("The manifest (`index.json`)", "the-manifest-indexjson"),
    ("Options (`PipelineSpec.from_manifest(path, batch_size, **options)`)",
     "options-pipelinespecfrom_manifestpath-batch_size-options"),
    ("Convert LibSVM → [docs/libsvm.md](docs/libsvm.md)", "convert-libsvm--docslibsvmmd"),
])
def test_github_slug(heading, slug):
    assert github_slug(heading) == slug


def test_link_checker_catches_breakage(tmp_path, monkeypatch):
    tmp_path = tmp_path.resolve()
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Top\n\n## Real heading\n\n```\n# not a heading\n[x](nowhere.md)\n```\n")
    page = tmp_path / "README.md"
    page.write_text("[ok](docs/a.md#real-heading) [self](#intro) `[code](missing.md)` [web](https://example.com)\n"
                    "# Intro\n[gone](docs/b.md) [bad anchor](docs/a.md#not-a-heading) [up](../x.md)\n")
    problems = broken_links(page)
    assert len(problems) == 3, problems
    report = "\n".join(problems)
    for expected in ("docs/b.md does not exist", "no heading with anchor #not-a-heading", "outside the repository"):
        assert expected in report


# -- (c) the two newcomer commands come first ---------------------------------------------------------------

def test_readme_top_has_quickstart_command():
    def installs_then_quickstarts(line: str) -> bool:
        cmds = shell_line_commands(line)
        return len(cmds) >= 2 and "install" in cmds[0] and cmds[-1][:2] == ["tfpipe", "quickstart"]

    hits = [line for line in top_code_lines() if installs_then_quickstarts(line)]
    assert hits, f"no install-and-quickstart command in a code block within README.md's first {TOP_LINES} lines"


def test_readme_top_has_test_command():
    hits = [line for line in top_code_lines() if "pytest" in line]
    assert hits, f"no test command in a code block within README.md's first {TOP_LINES} lines"


# -- (d) the README's test command is exactly what CI runs ------------------------------------------------------

def test_readme_test_command_equals_ci_run():
    cmds = ci_commands()
    assert any("pytest" in c for c in cmds), ".ci/run does not run pytest"
    hits = [line for line in top_code_lines() if "pytest" in line]
    assert hits, f"no test command within README.md's first {TOP_LINES} lines"
    readme = shell_line_commands(hits[0])
    assert readme == cmds, (f"README's test command {' && '.join(map(shlex.join, readme))!r} differs from what "
                            f".ci/run runs: {' && '.join(map(shlex.join, cmds))!r}")
