#!/usr/bin/env python3
"""Where the instructions of one callgrind profile grow against another's.

Usage: callgrind_growth.py SMALL.out LARGE.out BINARY

Both profiles made with `valgrind --tool=callgrind --dump-instr=yes` on the same BINARY (for
example the `fifty-pool` cell at 10 and 10,000 rules, see docs/compact-evaluator.md). Each
instruction's own cost is charged, through `addr2line -i`, to the innermost inlined frame
that is code of this repository, so costs inlined into `Engine::push` are told apart by the
function they come from. Prints the 45 parts that grow most.
"""
import collections
import re
import subprocess
import sys


def load(path, binary):
    cost = collections.Counter()
    addr = line = 0
    in_call = False

    def val(tok, prev):
        if tok == "*":
            return prev
        if tok.startswith("+"):
            return prev + int(tok[1:], 0)
        if tok.startswith("-"):
            return prev - int(tok[1:], 0)
        return int(tok, 0)

    for raw in open(path):
        raw = raw.rstrip("\n")
        if not raw:
            continue
        if re.match(r"^(fn|ob|cfn|cob|fl|fi|fe|cfi|cfl)=", raw):
            continue
        if raw.startswith("calls="):
            in_call = True
            continue
        if raw[0] in "0123456789+-*":
            toks = raw.split()
            addr, line = val(toks[0], addr), val(toks[1], line)
            c = int(toks[2]) if len(toks) > 2 else 0
            if in_call:
                # The inclusive cost of a call: charged to the callee's own lines already.
                in_call = False
                continue
            cost[addr] += c
    addrs = [a for a, _ in cost.most_common(20000)]
    out = subprocess.run(
        ["addr2line", "-i", "-f", "-C", "-e", binary, "-a"] + [hex(a) for a in addrs],
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
    parts = collections.Counter()
    repo = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True
    ).stdout.strip()
    for a in addrs:
        chain = frames.get(a, [])
        part = next(
            ("::".join(f.split("::")[-2:])[:60] for f, loc in chain if repo and repo in loc),
            chain[-1][0][:60] if chain else "?",
        )
        parts[part] += cost[a]
    return parts


def main():
    small, large, binary = sys.argv[1:4]
    a, b = load(small, binary), load(large, binary)
    print(f"{'small':>12} {'large':>12} {'growth':>12}  part")
    for k in sorted(set(a) | set(b), key=lambda k: a[k] - b[k])[:45]:
        print(f"{a[k]:>12,} {b[k]:>12,} {b[k] - a[k]:>12,}  {k}")
    print(f"{sum(a.values()):>12,} {sum(b.values()):>12,}  total")


if __name__ == "__main__":
    main()
