"""Where Homing issues SQL, counted by file: the survey behind docs/postgres-plan.md.

``python docs/sql_survey.py [-v]`` from the repository root prints a Markdown table
(``-v`` adds every SQL string found, by file). It reads the code with ``ast``: SQL
strings are literals and f-strings that look like statements; calls are counted by
their shape (``db.fetchone``, ``db.write(fn)`` when given a lambda, ``partial`` or a
function taking a ``sqlite3.Connection``, ``conn.execute`` inside such callbacks).
Counts are close, not exact: a fragment such as ``"WHERE state = ?"`` counts as a
string, and a flag compared in a clause built at run time may be missed.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from pathlib import Path

BACKEND = {"gateway/store/sqlite.py", "gateway/store/migrations.py"}
_STATEMENT = re.compile(r"^\s*\(?\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|PRAGMA|BEGIN|"
                        r"COMMIT|ROLLBACK|WITH|DROP)\b")
_CLAUSE = re.compile(r"\b(FROM|WHERE|SET|VALUES)\b")
FEATURES = {
    "INSERT OR IGNORE": r"INSERT OR IGNORE",
    "INSERT OR REPLACE": r"INSERT OR REPLACE",
    "RETURNING": r"\bRETURNING\b",
    "ON CONFLICT": r"ON CONFLICT",
    "rowid": r"\browid\b",
    "julianday": r"julianday",
    "strftime": r"strftime\(",
    "datetime()": r"\bdatetime\(",
    "PRAGMA": r"\bPRAGMA\b",
    "BEGIN IMMEDIATE": r"BEGIN IMMEDIATE",
    "typeof": r"\btypeof\(",
    "GROUP_CONCAT": r"(?i)group_concat",
    "json_*": r"(?i)\bjson_\w+\(",
    "changes()": r"changes\(\)",
    "LIKE": r"\bLIKE\b",
    "GLOB / COLLATE": r"\b(GLOB|COLLATE)\b",
    "substr": r"\bsubstr\(",
    "two-argument MAX/MIN": r"\b(MAX|MIN)\(\s*[\w?]+\s*,",
    "sqlite_master": r"sqlite_master",
    "derived table without alias": r"FROM \(SELECT",
    "VALUES (NULL, ...)": r"VALUES \(NULL",
    "WITH RECURSIVE": r"WITH RECURSIVE",
    "LIMIT ?": r"LIMIT \?",
}
#: found in the source around the SQL, not in it
SOURCE_FEATURES = {
    "IN (?, ...) built at run time": r"join\(['\"]\?['\"] \* len",
    "sqlite3 error classes caught": r"except .*sqlite3\.\w*Error",
}
COLUMNS = ["SQL strings", "? placeholders", "db.fetchone", "db.fetchall", "db.write(ops)",
           "db.write(fn)", "db.write_behind", "db.flush", "fn(conn) callbacks",
           "conn.execute", "conn.executemany", "cursor.fetchone", "cursor.fetchall",
           ".rowcount", ".lastrowid", *FEATURES, *SOURCE_FEATURES]


def _text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else
                       "{" + ast.unparse(v.value) + "}"  # type: ignore[attr-defined]
                       for v in node.values)
    return None


def _is_db(node: ast.expr) -> bool:
    name = ast.unparse(node)
    return name == "db" or name.endswith(".db")


def survey(path: Path) -> tuple[Counter[str], list[str]]:
    source = path.read_text()
    tree = ast.parse(source)
    counts: Counter[str] = Counter()
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    callbacks = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                a.annotation is not None and "sqlite3.Connection" in ast.unparse(a.annotation)
                for a in [*node.args.args, *node.args.kwonlyargs]):
            counts["fn(conn) callbacks"] += 1
            callbacks.add(node.name)
    statements = []
    for node in ast.walk(tree):
        text = _text(node)
        if text is not None and not isinstance(parents.get(node), ast.JoinedStr) and (
                _STATEMENT.search(text) or (_CLAUSE.search(text) and "?" in text)):
            statements.append(text)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr, owner = node.func.attr, node.func.value
            if attr in ("fetchone", "fetchall"):
                counts[f"{'db' if _is_db(owner) else 'cursor'}.{attr}"] += 1
            elif attr == "write" and _is_db(owner):
                arg = node.args[0] if node.args else None
                fn = (isinstance(arg, ast.Lambda)
                      or (isinstance(arg, ast.Name) and arg.id in callbacks)
                      or (isinstance(arg, ast.Call) and ast.unparse(arg.func) == "partial"))
                counts["db.write(fn)" if fn else "db.write(ops)"] += 1
            elif attr in ("write_behind", "flush") and _is_db(owner):
                counts[f"db.{attr}"] += 1
            elif attr in ("execute", "executemany") and ast.unparse(owner) == "conn":
                counts[f"conn.{attr}"] += 1
        if isinstance(node, ast.Attribute) and node.attr in ("rowcount", "lastrowid"):
            counts[f".{node.attr}"] += 1
    counts["SQL strings"] = len(statements)
    counts["? placeholders"] = sum(s.count("?") for s in statements)
    for name, pattern in FEATURES.items():
        counts[name] += sum(len(re.findall(pattern, s)) for s in statements)
    for name, pattern in SOURCE_FEATURES.items():
        counts[name] += len(re.findall(pattern, source))
    return +counts, statements


def main(root: Path, verbose: bool) -> None:
    files = sorted([*root.glob("gateway/**/*.py"), *root.glob("tools/*.py"),
                    *root.glob("agent/*.py")])
    found = {}
    for path in files:
        counts, statements = survey(path)
        if counts:
            found[str(path.relative_to(root))] = (counts, statements)
    callers: Counter[str] = Counter()
    for name, (counts, _) in found.items():
        if name not in BACKEND:
            callers.update(counts)
    backend: Counter[str] = Counter()
    for name in BACKEND:
        backend.update(found.get(name, (Counter(), []))[0])
    shown = [c for c in COLUMNS if callers[c] or backend[c]]
    print("| file | " + " | ".join(shown) + " |")
    print("|---" * (len(shown) + 1) + "|")
    for name, (counts, _) in found.items():
        print(f"| {name} | " + " | ".join(str(counts[c] or "") for c in shown) + " |")
    print("| **callers** | " + " | ".join(f"**{callers[c]}**" for c in shown) + " |")
    print("| **backend** | " + " | ".join(str(backend[c]) for c in shown) + " |")
    print("\nnever used:", ", ".join(c for c in COLUMNS if not callers[c] and not backend[c]))
    if verbose:
        for name, (_, statements) in found.items():
            print(f"\n## {name}")
            for s in statements:
                print("  -", " ".join(s.split())[:200])


if __name__ == "__main__":
    main(Path.cwd(), "-v" in sys.argv)
