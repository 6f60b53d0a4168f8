#!/usr/bin/env bash
# Checks that every relative link in the documentation resolves: the file or folder exists and,
# for a link with #anchor into a Markdown file, a heading there has that anchor (GitHub's rule:
# lower case, punctuation dropped, spaces to hyphens, -1, -2, ... for repeats).
#
#   bash scripts/check-doc-links.sh [FILE.md...]     (default: README.md docs/*.md bench/RESULTS.md)
#
# Prints every broken link as FILE:LINE: LINK: WHY and exits 1 if there is any. Links inside code
# blocks and code spans, and links with a scheme (https:, mailto:), are not checked.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then set -- README.md docs/*.md bench/RESULTS.md; fi
python3 - "$@" <<'PY'
import os, re, sys

def slug(heading):
    text = re.sub(r"`|\*\*|__", "", heading.strip()).lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text stays
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")

def lines_outside_code_blocks(path):
    fenced = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if not fenced:
                yield number, line

def anchors(path, cache={}):
    """The anchors of a Markdown file's headings (taken with their code spans)."""
    if path not in cache:
        seen, found = {}, set()
        for _, line in lines_outside_code_blocks(path):
            match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not match:
                continue
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        cache[path] = found
    return cache[path]

broken = 0
for source in sys.argv[1:]:
    for number, line in lines_outside_code_blocks(source):
        prose = re.sub(r"`[^`]*`", "``", line)  # links inside code spans are text
        for link in re.findall(r"\]\(([^)\s]+)\)", prose):
            if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", link):
                continue  # https:, mailto:, ...
            target, _, anchor = link.partition("#")
            path = os.path.normpath(os.path.join(os.path.dirname(source), target)) if target else source
            why = None
            if not os.path.exists(path):
                why = "no such file or folder"
            elif anchor and not path.endswith(".md"):
                why = "an anchor into a file that is not Markdown"
            elif anchor and anchor not in anchors(path):
                why = f"no heading with anchor #{anchor} in {path}"
            if why:
                print(f"{source}:{number}: {link}: {why}")
                broken += 1
sys.stdout.flush()
if broken:
    print(f"check-doc-links: {broken} broken link(s)", file=sys.stderr)
    sys.exit(1)
print(f"check-doc-links: ok ({len(sys.argv) - 1} files)")
PY
