#!/usr/bin/env python3
"""Score `cepheus replay` alerts against gen_events.py's ground truth (stdlib only),
with the matching rules of ../shared/peers/flink/heartbeat_cep.py's score():

  brute force  (rule `bf`): each `firing` alert is (group.src, time); for a match `time`
               is the completing event's stamp, i.e. the success. Matched on
               (src_ip, success_ts) against truth["brute_force"].
  heartbeat    (rule `hb`): each `firing` alert's `time` is the absence's deadline;
               last_ts = deadline - 60 s. Alerts with deadline > truth["max_ts"] are
               end-of-stream alerts (counted, not scored), as in heartbeat_cep.py.
               Matched on (host, last_ts) against truth["missing_heartbeat"].
  `resolved`/`retracted` changes are counted but not scored (Flink has none).

Prints one JSON object: {"bf": {...}, "hb": {...}, "other": {...}}, each score with
expected, reported, true_pos, false_pos, false_neg (= missed), extra (= false_pos),
duplicates, end_of_stream_alerts, exact, fp_examples, fn_examples. `exact` here also
requires no duplicates (heartbeat_cep.py's `exact` is only got == want; it reports
duplicates beside it). hb also has `end_of_stream_exact`: the end-of-stream alerts (only
with `replay --until`) are exactly truth["missing_heartbeat_end_of_stream"].
With --flink-score PATH/heartbeat_cep.py, the alerts are also handed, in Flink's alert
shape, to that file's own score() (it imports no pyflink at module level), printed under
"flink_score".

usage: score.py TRUTH.json ALERTS.jsonl [--bf-rule bf] [--hb-rule hb] [--timeout-ms 60000]
                [--flink-score heartbeat_cep.py]
"""
import argparse
import collections
import datetime
import json
import re

RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


def to_ms(s):
    """RFC 3339 -> integer epoch milliseconds (exact; refuses sub-millisecond parts)."""
    m = RFC3339.match(s)
    if not m:
        raise ValueError("not RFC 3339: %r" % s)
    base, frac, tz = m.groups()
    tz = "+00:00" if tz == "Z" else tz
    d = datetime.datetime.fromisoformat(base + tz)
    frac = (frac or "").ljust(9, "0")
    if int(frac[3:]):
        raise ValueError("sub-millisecond stamp: %r" % s)
    return int(d.timestamp()) * 1000 + int(frac[:3])


def score(got_list, want, eos):
    got = set(got_list)
    tp = len(got & want)
    return {"expected": len(want), "reported": len(got), "true_pos": tp,
            "false_pos": len(got - want), "false_neg": len(want - got),
            "missed": len(want - got), "extra": len(got - want),
            "duplicates": len(got_list) - len(got),
            "end_of_stream_alerts": eos, "exact": got == want and len(got_list) == len(got),
            "fp_examples": sorted(got - want)[:3], "fn_examples": sorted(want - got)[:3]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("truth")
    ap.add_argument("alerts")
    ap.add_argument("--bf-rule", default="bf")
    ap.add_argument("--hb-rule", default="hb")
    ap.add_argument("--timeout-ms", type=int, default=60_000)
    ap.add_argument("--flink-score", metavar="HEARTBEAT_CEP_PY")
    a = ap.parse_args()
    truth = json.load(open(a.truth))
    max_ts = truth["max_ts"]
    bf, hb, hb_eos, eos_keys = [], [], 0, set()
    other = collections.Counter()
    with open(a.alerts) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            al = json.loads(line)
            rule, state = al["rule"], al["state"]
            if state != "firing":
                other["%s %s %s" % (rule, state, al.get("reason"))] += 1
                continue
            if rule == a.bf_rule:
                bf.append((al["group"]["src"], to_ms(al["time"])))
            elif rule == a.hb_rule:
                deadline = to_ms(al["time"])
                if deadline > max_ts:
                    hb_eos += 1
                    eos_keys.add((al["group"]["host"], deadline - a.timeout_ms))
                else:
                    hb.append((al["group"]["host"], deadline - a.timeout_ms))
            else:
                other["%s %s" % (rule, state)] += 1
    want_bf = {(t["src_ip"], t["success_ts"]) for t in truth["brute_force"]}
    want_hb = {(t["host"], t["last_ts"]) for t in truth["missing_heartbeat"]}
    res = {"bf": score(bf, want_bf, 0), "hb": score(hb, want_hb, hb_eos),
           "other": dict(other)}
    want_eos = {(t["host"], t["last_ts"]) for t in truth["missing_heartbeat_end_of_stream"]}
    res["hb"]["end_of_stream_exact"] = eos_keys == want_eos
    if a.flink_score:
        import importlib.util
        spec = importlib.util.spec_from_file_location("heartbeat_cep", a.flink_score)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        fb = [{"src_ip": ip, "success_ts": ts} for ip, ts in bf]
        fh = [{"host": h, "last_ts": t, "deadline": t + a.timeout_ms} for h, t in hb]
        fh += [{"host": h, "last_ts": t, "deadline": t + a.timeout_ms} for h, t in sorted(eos_keys)]
        res["flink_score"] = {"bf": mod.score("bruteforce", fb, truth),
                              "hb": mod.score("hb-session", fh, truth)}
    print(json.dumps(res))


if __name__ == "__main__":
    main()
