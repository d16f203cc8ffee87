#!/usr/bin/env python3
"""test_check_tree.py: the self-test of check_tree.py (ctest unit.check_tree_selftest).

For: small temporary git trees, one clean and one per rule broken once, run
through check_tree.py --root; each broken tree must fail with the one message
its rule gives (file:line), the clean one must pass.  A table's file column naming a file the folder does not hold
fails too.  Also the edges: exactly
1,300 lines and exactly 100 lines pass, headers are not held to the file
limit, untracked files, tests/ directories and compute/postgres/ are not
product sources, and a signature's own return-type line counts.
Not for: the real tree (ctest tree.check_tree runs the checker on it).
Standard library only.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_tree.py")


def function_of(name, total_lines, type_line=False):
    """A clang-formatted C function of exactly total_lines lines, signature to brace."""
    head = ["static int", "%s(int a)" % name] if type_line else ["static int %s(int a)" % name]
    body_lines = total_lines - len(head) - 3  # "{", "return a;", "}"
    assert body_lines >= 0
    return "\n".join(
        head + ["{"] + ["    a += %d;" % i for i in range(body_lines)] + ["    return a;", "}"]
    )


def file_of(total_lines):
    """A .c file of exactly total_lines lines holding only short functions."""
    lines = ["/* big.c: a long file of short functions. */"]
    k = 0
    while len(lines) + 6 <= total_lines:
        lines += ["", function_of("f%d" % k, 5)]
        lines = "\n".join(lines).split("\n")
        k += 1
    lines += ["/* pad */"] * (total_lines - len(lines))
    return "\n".join(lines) + "\n"


CLEAN = {
    "common/base/good.c": "/* good.c: a clean file. */\n#include \"base/good.h\"\n\n"
    + function_of("good_exactly_100", 100)
    + "\n\n"
    + "/* A return type on its own line starts the signature. */\n"
    + function_of("good_split_signature", 100, type_line=True)
    + "\n\n__attribute__((noreturn)) static void good_die(void)\n{\n    for (;;)\n        ;\n}\n"
    + "\nstatic const int good_table[] =\n{\n    1,\n};\n",
    "common/base/good.h": "/* good.h */\nint good_exactly_100(int a);\n",
    "common/base/edge.c": file_of(1300),
    "common/base/README.md": "# common/base\n\nThe ground floor.\n\n| file | what |\n|---|---|\n"
    "| `good.c`, `good.h` | clean |\n| `edge.c` | exactly at the limit |\n",
    # Not product sources: a tests/ directory, compute/postgres/, other folders.
    "common/base/tests/huge.c": file_of(1400),
    "compute/postgres/huge.c": file_of(1400),
    "bench/huge.c": file_of(1400),
    # Headers are not held to the file limit.
    "proto/long.h": "/* long.h */\n" + "/* line */\n" * 1400,
    "proto/README.md": "# proto\n\n| file | what |\n|---|---|\n| `long.h` | a long header |\n",
}


class CheckTreeTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="check_tree_")

    def tearDown(self):
        shutil.rmtree(self.root)

    def make_tree(self, files, untracked=None):
        subprocess.run(["git", "init", "-q", self.root], check=True)
        for path, text in files.items():
            full = os.path.join(self.root, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(text)
        subprocess.run(["git", "-C", self.root, "add", "-A"], check=True)
        for path, text in (untracked or {}).items():
            full = os.path.join(self.root, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(text)

    def run_checker(self):
        p = subprocess.run(
            [sys.executable, CHECKER, "--root", self.root],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            universal_newlines=True,
        )
        violations = [l for l in p.stdout.splitlines() if not l.startswith("check_tree:")]
        return p.returncode, violations, p.stdout + p.stderr

    def assert_one_violation(self, files, expected_prefix, untracked=None):
        self.make_tree(files, untracked)
        rc, violations, output = self.run_checker()
        self.assertEqual(rc, 1, output)
        self.assertEqual(len(violations), 1, output)
        self.assertTrue(violations[0].startswith(expected_prefix), output)
        return violations[0]

    def test_clean_tree_passes(self):
        self.make_tree(CLEAN, untracked={"common/base/untracked.c": file_of(1400)})
        rc, violations, output = self.run_checker()
        self.assertEqual(rc, 0, output)
        self.assertEqual(violations, [], output)
        self.assertIn("in order", output)

    def test_long_file_fails(self):
        files = dict(CLEAN)
        files["common/base/edge.c"] = file_of(1301)
        v = self.assert_one_violation(files, "common/base/edge.c:1301: file has 1301 lines")
        self.assertIn("more than 1300", v)

    def test_long_function_fails(self):
        files = dict(CLEAN)
        files["common/base/good.c"] += (
            "\n/* One line too many. */\n" + function_of("good_too_long", 101) + "\n"
        )
        start = files["common/base/good.c"].split("\n").index("static int good_too_long(int a)") + 1
        v = self.assert_one_violation(
            files, "common/base/good.c:%d: function good_too_long has 101 lines" % start
        )
        self.assertIn("more than 100", v)

    def test_long_function_with_split_signature_fails(self):
        files = dict(CLEAN)
        files["common/base/good.c"] += "\n" + function_of("good_split_long", 101, True) + "\n"
        lines = files["common/base/good.c"].split("\n")
        start = lines.index("good_split_long(int a)")  # the type line above, 1-based
        self.assert_one_violation(
            files, "common/base/good.c:%d: function good_split_long has 101 lines" % start
        )

    def test_missing_readme_fails(self):
        files = dict(CLEAN)
        files["safekeeper/node.c"] = "/* node.c */\n"
        v = self.assert_one_violation(files, "safekeeper/README.md:1: missing")
        self.assertIn("node.c", v)

    def test_file_in_no_table_row_fails(self):
        files = dict(CLEAN)
        files["common/base/other.h"] = "/* other.h */\n"
        # Named in prose and in a code span outside the table: not enough.
        files["common/base/README.md"] += "\nSee `other.h`.\n"
        self.assert_one_violation(
            files, "common/base/other.h:1: `other.h` is in no table row of common/base/README.md"
        )

    def test_file_column_names_a_missing_file_fails(self):
        files = dict(CLEAN)
        # A stale row: the file was moved or deleted, the map was not.
        files["proto/README.md"] += "| `gone.c`, `long.h` | moved away |\n"
        v = self.assert_one_violation(files, "proto/README.md:6: `gone.c` is named in the file column")
        self.assertIn("no tracked source of proto/", v)

    def test_every_rule_at_once(self):
        files = dict(CLEAN)
        files["common/base/edge.c"] = file_of(1301)
        files["common/base/good.c"] += "\n" + function_of("good_too_long", 101) + "\n"
        files["common/base/other.h"] = "/* other.h */\n"
        files["cli/main.c"] = "/* main.c */\n"
        self.make_tree(files)
        rc, violations, output = self.run_checker()
        self.assertEqual(rc, 1, output)
        self.assertEqual(len(violations), 4, output)
        for needle in ("edge.c:1301: file", "function good_too_long", "`other.h`", "cli/README.md"):
            self.assertTrue(any(needle in v for v in violations), needle + "\n" + output)


if __name__ == "__main__":
    unittest.main(verbosity=1)
