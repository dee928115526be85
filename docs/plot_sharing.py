#!/usr/bin/env python3
"""Plots the sharing benchmark (docs/benchmarks.md, "Sharing across rules").

    cargo bench -p cepheus-core --bench sharing        # writes target/sharing.csv
    python3 docs/plot_sharing.py [target/sharing.csv] [docs/sharing.png]
    python3 docs/plot_sharing.py --table [target/sharing.csv]   # the table in docs/benchmarks.md

Needs matplotlib for the plot (pip install matplotlib); not run in CI.
"""

import csv
import sys



def load(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            for k in r:
                if k != "section":
                    r[k] = float(r[k])
            # The unshared run may cover only the first events of the shared one (the
            # `fifty` rows); the speed-up compares the two on the same events.
            unshared_events = r.get("events_unshared", r["events"])
            same = r.get("shared_cpu_s_same_events", r["shared_cpu_s"])
            r["ns_shared"] = r["shared_cpu_s"] * 1e9 / r["events"]
            r["ns_unshared"] = r["unshared_cpu_s"] * 1e9 / unshared_events
            r["speedup"] = r["unshared_cpu_s"] / max(same, 1e-9)
            rows.append(r)
    return rows


def section(rows, name):
    return [r for r in rows if r["section"] == name]


def cost_panel(ax, rs, title, annotate=True):
    """One log-log panel: CPU ns per event against rules, both engines."""
    x = [r["rules"] for r in rs]
    ax.loglog(x, [r["ns_unshared"] for r in rs], "o-", color="tab:red", label="unshared")
    ax.loglog(x, [r["ns_shared"] for r in rs], "o-", color="tab:blue", label="shared")
    if annotate:
        for r in rs:
            ax.annotate(
                f"{r['speedup']:.1f}×",
                (r["rules"], r["ns_shared"]),
                textcoords="offset points",
                xytext=(0, -14),
                ha="center",
                fontsize=8,
            )
    ax.margins(x=0.08, y=0.12)
    ax.set_xlabel("rules")
    ax.set_ylabel("CPU ns per event")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def pct(part, whole):
    return f"{round(100 * part / whole)} % ({int(part)})"


def num(x, digits=0):
    return f"{x:,.{digits}f}"


def table(rows):
    """Prints the CSV as the markdown table of docs/benchmarks.md, with its derived columns."""
    print(
        "| section | rules | similar | redundant | states shared | event types "
        "| events shared / unshared | shared cpu s | unshared cpu s | speed-up cpu (same events) "
        "| pred evals/event shared / unshared | ns/event shared / unshared (cpu) | alerts/event "
        "| family lookups saved/event | timer entries at end |"
    )
    print("|" + "---|" * 15)
    for r in rows:
        ev, evu = r["events"], r["events_unshared"]
        events = num(ev) if ev == evu else f"{num(ev)} / {num(evu)}"
        cells = [
            r["section"],
            num(r["rules"]),
            pct(r["similar"], r["rules"]),
            pct(r["redundant"], r["rules"]),
            num(r["states"]),
            str(int(r["event_types"])),
            events,
            num(r["shared_cpu_s"], 3),
            num(r["unshared_cpu_s"], 3),
            f"{r['speedup']:.2f}×",
            f"{r['shared_evals'] / ev:.2f} / {r['unshared_evals'] / evu:.2f}",
            f"{num(r['ns_shared'])} / {num(r['ns_unshared'])}",
            f"{r['alerts'] / ev:.3f}",
            f"{r['family_saved'] / ev:.2f}",
            num(r["timer_entries"]),
        ]
        print("| " + " | ".join(cells) + " |")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--table":
        table(load(sys.argv[2] if len(sys.argv) > 2 else "target/sharing.csv"))
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    src = sys.argv[1] if len(sys.argv) > 1 else "target/sharing.csv"
    dst = sys.argv[2] if len(sys.argv) > 2 else "docs/sharing.png"
    rows = load(src)
    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5))

    cost_panel(axes[0][0], section(rows, "rules"), "rules sweep: 50 % similar, 50 % redundant, 1M events")

    ax = axes[0][1]
    sim = section(rows, "similar")
    red = section(rows, "redundant")
    ax.plot([100 * r["similar"] / r["rules"] for r in sim], [r["speedup"] for r in sim], "o-", label="similar % (redundant 0 %)")
    ax.plot([100 * r["redundant"] / r["rules"] for r in red], [r["speedup"] for r in red], "s-", label="redundant % (similar 0 %)")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("ratio of similar / redundant operations (%)")
    ax.set_ylabel("speed-up (unshared / shared CPU time)")
    ax.set_title("40 rules, 1M events", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)

    cost_panel(axes[1][0], section(rows, "fifty"), "50 predicates, rules drawn independently")
    cost_panel(axes[1][1], section(rows, "fifty-pool"), "50 predicates, rules from a pool of 100 meanings")

    fig.suptitle("cepheus: shared vs unshared engine (cargo bench --bench sharing)")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    print(f"wrote {dst}")


if __name__ == "__main__":
    main()
