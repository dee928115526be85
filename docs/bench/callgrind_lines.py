#!/usr/bin/env python3
"""Where the instructions of one function's own frame grow, by its source line.

Usage: callgrind_lines.py SMALL.out LARGE.out BINARY FUNCTION

Both profiles made with `valgrind --tool=callgrind --dump-instr=yes` on the same BINARY
(for example the `fifty-pool` cell at 10 and 10,000 rules, see docs/compact-evaluator.md).
Each instruction's own cost (calls left out: their callees' lines hold it) is charged,
through `addr2line -i`, to the line of FUNCTION (a part of its name, e.g. `deliver_compact`)
it was inlined at, so the code std and small helpers inline into a loop is told apart by
the loop's line. Prints the 40 lines that grow most.
"""

import collections
import re
import subprocess
import sys


def load(path):
    cost = collections.Counter()
    addr = line = 0
    in_call = False

    def val(tok, prev):
        if tok == "*":
            return prev
        if tok[0] in "+-":
            return prev + int(tok, 0)
        return int(tok, 0)

    for raw in open(path):
        raw = raw.rstrip("\n")
        if not raw or re.match(r"^(fn|ob|cfn|cob|fl|fi|fe|cfi|cfl)=", raw):
            continue
        if raw.startswith("calls="):
            in_call = True
            continue
        if raw[0] in "0123456789+-*":
            toks = raw.split()
            addr, line = val(toks[0], addr), val(toks[1], line)
            c = int(toks[2]) if len(toks) > 2 else 0
            if in_call:
                in_call = False
                continue
            cost[addr] += c
    return cost


def main():
    small, large, binary, function = sys.argv[1:5]
    a, b = load(small), load(large)
    addrs = list(set(a) | set(b))
    out = subprocess.run(
        ["addr2line", "-i", "-f", "-C", "-e", binary, "-a"] + [hex(x) for x in addrs],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    frames, cur, i = {}, None, 0
    while i < len(out):
        if out[i].startswith("0x"):
            cur = int(out[i], 16)
            frames[cur] = []
            i += 1
        elif out[i] and i + 1 < len(out):
            frames[cur].append((out[i], out[i + 1]))
            i += 2
        else:
            i += 1
    lines = collections.Counter()
    for x in addrs:
        for f, loc in frames.get(x, []):
            if function in f:
                lines[loc.split(" ")[0].split("/")[-1]] += b[x] - a[x]
                break
    print(f"growth in {function}'s own frame: {sum(lines.values()):,}")
    for k, v in lines.most_common(40):
        print(f"{v:>14,}  {k}")


if __name__ == "__main__":
    main()
