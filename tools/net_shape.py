"""The shape of src/net, measured: the figures issue "one exchange, two
transports" asks for, each from the source text alone.

    python tools/net_shape.py [ROOT]

- conn fields: struct m0_conn's top-level declarations (server_int.h), each
  declarator counted (`int a, b;` is two; a bitfield is one);
- is_h2s: uses of the name in src/;
- HTTP/1 text parsed in src/net: reads of a status line or a field block
  ("HTTP/1." compared, a blank line searched for) outside the HTTP/1.1
  request parser's callers;
- two-way pairs: pairs of src/net .c files each of which calls a function the
  other defines;
- files over 900 lines in src/ (the parser excepted).
"""

import os
import re
import sys
from itertools import combinations

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
NET = os.path.join(ROOT, "src", "net")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"__attribute__\s*\(\([^)]*\)\)\s*", "", text)
    return re.sub(r'"(\\.|[^"\\])*"', '""', text)


def struct_body(text, name):
    m = re.search(r"struct\s+" + name + r"\s*\{", text)
    if m is None:
        return None
    depth, i = 1, m.end()
    while depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[m.end():i - 1]


def top_level_declarators(body):
    """Declarators at depth 0 of a struct body (a nested struct counts once
    per declarator of it)."""
    count, depth, stmt = 0, 0, ""
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == ";" and depth == 0:
            s = re.sub(r"\{.*\}", "", stmt, flags=re.S) if "{" in stmt else stmt
            if s.strip():
                count += s.count(",") + 1
            stmt = ""
            continue
        if depth == 0 and ch not in "{}":
            stmt += ch
        elif ch == "}" and depth == 0:
            stmt += "{}"
    return count


DEF = re.compile(r"^[A-Za-z_][\w \t\*]*?\b(\w+)\s*\([^;{]*\)\s*\{", re.M)


def net_files():
    return sorted(f for f in os.listdir(NET) if f.endswith(".c"))


def defined(text):
    """The functions a file defines for others (not its static ones)."""
    return {m.group(1) for m in DEF.finditer(text)
            if m.group(1) not in ("if", "for", "while", "switch", "__attribute__") and not m.group(0).startswith("static")}


def main():
    server_int = strip_comments(read(os.path.join(NET, "server_int.h")))
    body = struct_body(server_int, "m0_conn")
    bits = len(re.findall(r"\bM0_CF_\w+\s*=\s*1u\s*<<", server_int))
    print(f"struct m0_conn top-level declarations: {top_level_declarators(body)} (and {bits} M0_CF_* bits in its flags)")

    uses = 0
    for d, _, files in os.walk(os.path.join(ROOT, "src")):
        for f in files:
            if f.endswith((".c", ".h")):
                uses += len(re.findall(r"\bis_h2s\b", strip_comments(read(os.path.join(d, f)))))
    print(f"uses of is_h2s: {uses}")

    parsed = []
    for f in net_files() + sorted(x for x in os.listdir(NET) if x.endswith(".h")):
        raw = read(os.path.join(NET, f))
        for n, line in enumerate(raw.splitlines(), 1):
            code = strip_comments(line)
            if re.search(r'(memcmp|strncmp)\([^;]*"HTTP/1\.', line) or re.search(r'memmem\([^;]*"\\r\\n\\r\\n"', line):
                parsed.append(f"{f}:{n}")
            del code
    print(f"HTTP/1 text parsed in src/net: {len(parsed)} {' '.join(parsed)}")

    texts = {f: strip_comments(read(os.path.join(NET, f))) for f in net_files()}
    defs = {f: defined(t) for f, t in texts.items()}
    calls = {}
    for f, t in texts.items():
        words = set(re.findall(r"\b(\w+)\s*\(", t))
        calls[f] = {g for g in texts if g != f and words & defs[g]}
    pairs = [(a, b) for a, b in combinations(sorted(texts), 2) if b in calls[a] and a in calls[b]]
    print(f"pairs of src/net files calling each other both ways: {len(pairs)}")
    for a, b in pairs:
        print(f"  {a} <-> {b}")

    big = []
    for d, _, files in os.walk(os.path.join(ROOT, "src")):
        for f in files:
            if f.endswith((".c", ".h")) and f != "parser.c":
                n = read(os.path.join(d, f)).count("\n")
                if n > 900:
                    big.append(f"{os.path.relpath(os.path.join(d, f), ROOT)} ({n})")
    print(f"src files over 900 lines (parser excepted): {len(big)} {' '.join(big)}")


if __name__ == "__main__":
    main()
