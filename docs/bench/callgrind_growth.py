#!/usr/bin/env python3
"""Where the instructions of one callgrind profile grow against another's.

Usage: callgrind_growth.py SMALL.out LARGE.out BINARY [--lines FUNCTION]

Both profiles made with `valgrind --tool=callgrind --dump-instr=yes` on the same BINARY (for
example the `fifty-pool` cell at 10 and 10,000 rules, see docs/compact-evaluator.md). Each
instruction's own cost (calls left out: their callees' lines hold it) is charged, through
`addr2line -i`, to the innermost inlined frame that is code of this repository, so costs
inlined into `Engine::push` are told apart by the function they come from; prints the 45
parts that grow most. With `--lines FUNCTION` (a part of its name, e.g. `deliver_compact`),
to the line of FUNCTION each instruction was inlined at instead, so the code std and small
helpers inline into a loop is told apart by the loop's line; prints the 40 lines that grow
most.
"""
import collections
import re
import subprocess
import sys


def costs(path):
    """Each instruction address's own cost in one profile."""
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
    return cost


def inline_chains(binary, addrs):
    """Per address, its inlined frames innermost first: (function, source location)."""
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
    return frames


def part_of(chain, repo):
    """The innermost frame of this repository's code, by function."""
    return next(
        ("::".join(f.split("::")[-2:])[:60] for f, loc in chain if repo and repo in loc),
        chain[-1][0][:60] if chain else "?",
    )


def line_in(chain, function):
    """The line of `function` the instruction was inlined at, if it was."""
    for f, loc in chain:
        if function in f:
            return loc.split(" ")[0].split("/")[-1]
    return None


def main():
    small, large, binary = sys.argv[1:4]
    function = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--lines" else None
    a, b = costs(small), costs(large)
    addrs = list(set(a) | set(b))
    chains = inline_chains(binary, addrs)
    repo = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True
    ).stdout.strip()
    sa, sb = collections.Counter(), collections.Counter()
    for x in addrs:
        chain = chains.get(x, [])
        key = line_in(chain, function) if function else part_of(chain, repo)
        if key is not None:
            sa[key] += a[x]
            sb[key] += b[x]
    if function:
        growth = {k: sb[k] - sa[k] for k in set(sa) | set(sb)}
        print(f"growth in {function}'s own frame: {sum(growth.values()):,}")
        for k, v in sorted(growth.items(), key=lambda kv: -kv[1])[:40]:
            print(f"{v:>14,}  {k}")
        return
    print(f"{'small':>12} {'large':>12} {'growth':>12}  part")
    for k in sorted(set(sa) | set(sb), key=lambda k: sa[k] - sb[k])[:45]:
        print(f"{sa[k]:>12,} {sb[k]:>12,} {sb[k] - sa[k]:>12,}  {k}")
    print(f"{sum(sa.values()):>12,} {sum(sb.values()):>12,}  total")


if __name__ == "__main__":
    main()
