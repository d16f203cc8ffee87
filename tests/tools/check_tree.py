#!/usr/bin/env python3
"""check_tree.py: the checks that keep the source tree in order.

For: three rules over the tracked product sources, the .c and .h files that
`git ls-files` lists under common/ proto/ safekeeper/ pageserver/ compute/ cli/
(leaving out every tests/ directory and compute/postgres/):
  (a) no .c file over 1,300 lines;
  (b) no function over 100 lines, counted from the first line of its signature
      to its closing brace;
  (c) every directory that directly holds such files has a README.md whose
      table rows (lines starting with `|`) name each of them in backticks, and
      whose rows' first cells name no x.c / x.h the folder does not hold.
Each violation is printed as file:line: message; the exit status is 1 if there
is any, 0 if none (2 for a usage error).
Not for: formatting (make format-check) or layering (docs/source-tree.md).

Functions are found the way clang-format's Linux brace style writes them: a
body's `{` and `}` stand alone at column 0.  The signature starts at the
topmost line above the `{` that begins at column 0, walking up until a blank
line, a comment, a preprocessor line or the end of a previous definition or
declaration.  This counts as `ctags --c-kinds=f --fields=+ne` does when the
return type shares the function name's line, and one or two lines more when
the return type stands on its own line(s); ctags is not needed.

Usage: check_tree.py [--root DIR] [--max-file-lines N] [--max-function-lines N]
                     [--report]
--root defaults to the repository holding this script; --report also lists the
largest files and the longest functions (figures, not violations).
"""

import argparse
import os
import re
import subprocess
import sys

PRODUCT_DIRS = ("common", "proto", "safekeeper", "pageserver", "compute", "cli")
EXCLUDED_PREFIXES = ("compute/postgres/",)
MAX_FILE_LINES = 1300
MAX_FUNCTION_LINES = 100

IDENT_BEFORE_PAREN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")
BACKTICKED = re.compile(r"`([^`]+)`")
FILE_NAME = re.compile(r"^[A-Za-z0-9_.-]+\.[ch]$")


def is_product_source(path):
    if not (path.endswith(".c") or path.endswith(".h")):
        return False
    parts = path.split("/")
    if parts[0] not in PRODUCT_DIRS or "tests" in parts[:-1]:
        return False
    return not any(path.startswith(p) for p in EXCLUDED_PREFIXES)


def product_sources(root):
    """Tracked product .c/.h files, as paths relative to root, sorted."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "ls-files", "-z", "--"] + list(PRODUCT_DIRS),
            check=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.CalledProcessError) as e:
        detail = e.stderr.decode("utf-8", "replace").strip() if hasattr(e, "stderr") else str(e)
        raise SystemExit("check_tree: cannot list the tracked files of %s: %s" % (root, detail))
    paths = [p for p in out.split("\0") if p]
    # A file deleted in the work tree but not yet in the index is no source.
    return sorted(
        p for p in paths if is_product_source(p) and os.path.isfile(os.path.join(root, p))
    )


def read_lines(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        text = f.read()
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines


def stops_signature_walk(line):
    """True for a line that cannot belong to a function's signature."""
    s = line.strip()
    if not s:
        return True
    if s.startswith("#"):
        return True
    if s.startswith("//") or s.startswith("/*") or s.endswith("*/"):
        return True
    if s == "*" or s.startswith("* "):
        return True
    return s.endswith(";") or s.endswith("}") or s.endswith("{")


def strip_attributes(text):
    """The text without its __attribute__((...)) parts (balanced parentheses)."""
    out = []
    i = 0
    while True:
        k = text.find("__attribute__", i)
        if k < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:k])
        j = text.find("(", k)
        if j < 0:
            return "".join(out)
        depth = 0
        while j < len(text):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
            if depth == 0:
                break
        i = j


def function_name(signature_lines):
    """The name a function signature declares, or None if it declares none
    (an initializer's `= {`, a struct)."""
    text = strip_attributes(" ".join(l.strip() for l in signature_lines))
    if "(" not in text or "=" in text.split("(")[0]:
        return None
    m = IDENT_BEFORE_PAREN.search(text)
    return m.group(1) if m else None


def find_functions(lines):
    """Yields (name, first_line, last_line) for each function body, 1-based."""
    i = 0
    n = len(lines)
    while i < n:
        if lines[i].rstrip() != "{":
            i += 1
            continue
        open_idx = i
        close_idx = open_idx + 1
        while close_idx < n and not lines[close_idx].startswith("}"):
            close_idx += 1
        if close_idx >= n:
            break
        # Walk up over the signature.
        j = open_idx - 1
        start = None
        while j >= 0 and not stops_signature_walk(lines[j]):
            if not lines[j][:1].isspace():
                start = j
            j -= 1
        name = function_name(lines[start:open_idx]) if start is not None else None
        if name:
            yield name, start + 1, close_idx + 1
        i = close_idx + 1


def check_file_lengths(root, sources, limit, violations, figures):
    for path in sources:
        n = len(read_lines(root, path))
        figures["files"].append((n, path))
        if path.endswith(".c") and n > limit:
            violations.append(
                "%s:%d: file has %d lines, more than %d (split it)" % (path, limit + 1, n, limit)
            )


def check_function_lengths(root, sources, limit, violations, figures):
    for path in sources:
        for name, first, last in find_functions(read_lines(root, path)):
            length = last - first + 1
            figures["functions"].append((length, "%s:%d" % (path, first), name))
            if length > limit:
                violations.append(
                    "%s:%d: function %s has %d lines, more than %d (lines %d-%d)"
                    % (path, first, name, length, limit, first, last)
                )


def readme_table(readme_path):
    """The names in backticks on a README's table rows (lines starting with
    `|`), each with its row's line: all of them, and the plain file names
    (x.c, x.h) of the rows' first cells, the files the README says its
    folder holds."""
    names, files = {}, {}
    with open(readme_path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.startswith("|"):
                continue
            for token in BACKTICKED.findall(line):
                names.setdefault(token.strip(), lineno)
            cells = line.split("|")
            for token in BACKTICKED.findall(cells[1]) if len(cells) >= 3 else []:
                if FILE_NAME.match(token.strip()):
                    files.setdefault(token.strip(), lineno)
    return names, files


def check_readmes(root, sources, violations):
    by_dir = {}
    for path in sources:
        by_dir.setdefault(os.path.dirname(path), []).append(os.path.basename(path))
    for d in sorted(by_dir):
        files = sorted(by_dir[d])
        readme = os.path.join(d, "README.md")
        readme_abs = os.path.join(root, readme)
        if not os.path.isfile(readme_abs):
            violations.append(
                "%s:1: missing: %s/ holds %d source files (%s) and needs a README.md "
                "with a table naming each" % (readme, d, len(files), ", ".join(files))
            )
            continue
        named, listed = readme_table(readme_abs)
        for name in files:
            if name not in named:
                violations.append(
                    "%s:1: `%s` is in no table row of %s (name it in backticks on a row)"
                    % (os.path.join(d, name), name, readme)
                )
        for name, lineno in sorted(listed.items()):
            if name not in files:
                violations.append(
                    "%s:%d: `%s` is named in the file column but is no tracked source of %s/"
                    % (readme, lineno, name, d)
                )


def default_root():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        return (
            subprocess.run(
                ["git", "-C", here, "rev-parse", "--show-toplevel"],
                check=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            .stdout.decode()
            .strip()
        )
    except (OSError, subprocess.CalledProcessError):
        return os.path.dirname(os.path.dirname(here))


def print_report(figures, max_files, max_functions):
    print("largest files:")
    for n, path in sorted(figures["files"], reverse=True)[:max_files]:
        print("  %6d  %s" % (n, path))
    print("longest functions:")
    for n, where, name in sorted(figures["functions"], reverse=True)[:max_functions]:
        print("  %6d  %s %s" % (n, where, name))


def main(argv):
    ap = argparse.ArgumentParser(description="Check the product tree's rules.")
    ap.add_argument("--root", default=None, help="repository root (default: this repository)")
    ap.add_argument("--max-file-lines", type=int, default=MAX_FILE_LINES)
    ap.add_argument("--max-function-lines", type=int, default=MAX_FUNCTION_LINES)
    ap.add_argument(
        "--report", action="store_true", help="also list the largest files and longest functions"
    )
    args = ap.parse_args(argv)
    root = os.path.abspath(args.root) if args.root else default_root()
    if not os.path.isdir(root):
        print("check_tree: %s is not a directory" % root, file=sys.stderr)
        return 2

    sources = product_sources(root)
    violations = []
    figures = {"files": [], "functions": []}
    check_file_lengths(root, sources, args.max_file_lines, violations, figures)
    check_function_lengths(root, sources, args.max_function_lines, violations, figures)
    check_readmes(root, sources, violations)

    for v in violations:
        print(v)
    if args.report:
        print_report(figures, 10, 25)
    summary = "check_tree: %d source files, %d functions: " % (
        len(sources),
        len(figures["functions"]),
    )
    if violations:
        print(summary + "%d violation(s)" % len(violations), file=sys.stderr)
        return 1
    print(summary + "in order")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
