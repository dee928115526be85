//! The shared operator graph (`cepheus_core::graph`) on the paper's examples (Tables 2 and 3)
//! and on rules that must not be merged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cepheus_core::graph::{Graph, Node, NodeId, NodeKind, Op, ShareKind, build};
use cepheus_core::rules::compile_str;
use cepheus_core::rules::ir::RuleSet;

/// Figure 2 of the paper as two rules (the left subtree under node 4, the right under node 9)
/// plus a third rule for SS (Figure 6): `or(e1, e2)` / `and(e1, e2)` (OA),
/// `or(e4, e5)` / `seq(e4, e6)` (OS), `seq(e3, e1)` in both (SO), `seq(e3, e5)` next to
/// `seq(e3, e1)` (SS).
pub const PAPER: &str = r#"
[[rule]]
name = "q-left"
severity = "low"
events.e1 = 'syslog and app == "e1"'
events.e2 = 'syslog and app == "e2"'
events.e3 = 'syslog and app == "e3"'
events.e4 = 'syslog and app == "e4"'
events.e5 = 'syslog and app == "e5"'
pattern = "seq(or(e1, e2), seq(e3, e1), or(e4, e5))"

[[rule]]
name = "q-right"
severity = "low"
events.e1 = 'syslog and app == "e1"'
events.e2 = 'syslog and app == "e2"'
events.e3 = 'syslog and app == "e3"'
events.e4 = 'syslog and app == "e4"'
events.e6 = 'syslog and app == "e6"'
pattern = "seq(and(e1, e2), seq(e3, e1), seq(e4, e6))"

[[rule]]
name = "q-ss"
severity = "low"
events.e2 = 'syslog and app == "e2"'
events.e3 = 'syslog and app == "e3"'
events.e5 = 'syslog and app == "e5"'
pattern = "seq(seq(e3, e5), e2)"
"#;

fn rules(text: &str) -> RuleSet {
    let c = compile_str("paper.toml", text);
    match c.rules {
        Some(r) => r,
        None => panic!("{:#?}", c.diagnostics),
    }
}

fn top(g: &Graph, rule: &str) -> NodeId {
    let root = g
        .rules
        .iter()
        .find(|r| r.name == rule)
        .unwrap()
        .root
        .unwrap();
    g.nodes[root].children[0]
}

fn ops(g: &Graph, id: NodeId) -> Vec<(Op, Vec<NodeId>)> {
    match &g.nodes[id].kind {
        NodeKind::Virtual { ops } => ops
            .iter()
            .map(|o| (o.op, o.parents.iter().map(|a| a.node).collect()))
            .collect(),
        other => panic!("#{id} is {other:?}, not virtual"),
    }
}

fn is_operator(k: &NodeKind) -> bool {
    !matches!(
        k,
        NodeKind::Predicate { .. } | NodeKind::Event { .. } | NodeKind::Root { .. }
    )
}

#[test]
fn paper_tables_2_and_3() {
    let g = build(&rules(PAPER), true);
    let (left, right, ss) = (top(&g, "q-left"), top(&g, "q-right"), top(&g, "q-ss"));
    // Every child of the two tops (nodes 4 and 9 of the paper) is a shared virtual node.
    let shared: Vec<NodeId> = g
        .nodes
        .iter()
        .filter(|n| is_operator(&n.kind) && n.is_shared())
        .map(|n| n.id)
        .collect();
    assert_eq!(shared.len(), 3, "{}", g.to_text());
    let [oa, so_ss, os] = [shared[0], shared[1], shared[2]];
    let kinds = |id: NodeId| {
        let mut k: Vec<ShareKind> = g.nodes[id].sharing.iter().map(|s| s.kind).collect();
        k.sort();
        k
    };
    // Table 2: OA(1,6): or(e1, e2) -> 4, and(e1, e2) -> 9.
    assert_eq!(kinds(oa), [ShareKind::OA]);
    assert_eq!(
        ops(&g, oa),
        [(Op::Or, vec![left]), (Op::And, vec![right])],
        "{}",
        g.to_text()
    );
    // Table 3: SO(2,8): seq(e3, e1) -> 4, 9; combined with seq(e3, e5) by SS (Figure 6).
    assert_eq!(kinds(so_ss), [ShareKind::SO, ShareKind::SS]);
    assert_eq!(
        ops(&g, so_ss),
        [(Op::Seq, vec![left, right]), (Op::Seq, vec![ss])]
    );
    // Table 2: OS(3,7): or(e4, e5) -> 4, seq(e4, e6) -> 9.
    assert_eq!(kinds(os), [ShareKind::OS]);
    assert_eq!(ops(&g, os), [(Op::Or, vec![left]), (Op::Seq, vec![right])]);
    // The EOIT: one occurrence bit per event (OA: 2 bits, OS: 3 bits as in the paper).
    assert_eq!(g.nodes[oa].children.len(), 2);
    assert_eq!(g.nodes[os].children.len(), 3);
    assert_eq!(g.nodes[left].children, [oa, so_ss, os]);
    assert_eq!(g.nodes[right].children, [oa, so_ss, os]);
    // The hash table: e1 goes to the OA node and the SO/SS node only.
    let e1 = g
        .nodes
        .iter()
        .find(|n| n.canonical == r#"app == "e1""#)
        .unwrap();
    assert_eq!(g.consumers(e1.id), [oa, so_ss]);
    // Rule/definition → event node → predicate, both ways.
    for (ri, r) in g.rules.iter().enumerate() {
        for (di, e) in r.events.iter().enumerate() {
            let e = e.expect("the paper's rules use every definition");
            let pred = &g.nodes[g.nodes[e].children[0]];
            let NodeKind::Predicate { uses } = &pred.kind else {
                panic!("{pred:?}")
            };
            assert!(uses.iter().any(|u| u.rule == ri && u.def == di));
        }
    }
    // Counts.
    assert_eq!(g.stats.predicates, 6);
    assert_eq!(g.stats.predicates_unshared, 13);
    assert!(g.stats.nodes < g.stats.nodes_unshared);
    assert!(g.stats.deliveries < g.stats.deliveries_unshared);
    let keys: std::collections::BTreeSet<String> = g.nodes.iter().map(|n| n.key()).collect();
    assert_eq!(
        keys.len(),
        g.nodes.len(),
        "keys of a shared graph are unique"
    );
    for n in &g.nodes {
        assert!(
            n.children.iter().all(|c| *c < n.id),
            "not topological: {n:?}"
        );
        for p in &n.parents {
            assert!(g.nodes[*p].children.contains(&n.id));
        }
    }
}

/// Conditions spelled apart that hold for the same events (`app == "e1"`, `"e1" == app`,
/// `syslog and app == "e1"`) are one predicate and one event node, so the paper's shared
/// operators are found over them; the rules' roots stay apart (a rule's state is kept by its
/// conditions as written), and say so.
#[test]
fn spellings_of_one_predicate_share_their_event_node_and_operators() {
    let spelled = PAPER.replacen(
        "events.e1 = 'syslog and app == \"e1\"'",
        "events.e1 = '\"e1\" == app'",
        1,
    );
    assert_ne!(spelled, PAPER);
    let g = build(&rules(&spelled), true);
    let paper = build(&rules(PAPER), true);
    type Shared = Vec<(Vec<ShareKind>, Vec<(Op, usize)>)>;
    let shared = |g: &Graph| -> Shared {
        g.nodes
            .iter()
            .filter(|n| is_operator(&n.kind) && n.is_shared())
            .map(|n| {
                let mut k: Vec<ShareKind> = n.sharing.iter().map(|s| s.kind).collect();
                k.sort();
                let o = ops(g, n.id)
                    .into_iter()
                    .map(|(op, parents)| (op, parents.len()))
                    .collect();
                (k, o)
            })
            .collect()
    };
    assert_eq!(shared(&g), shared(&paper), "{}", g.to_text());
    let events = |g: &Graph| {
        g.nodes
            .iter()
            .filter(|n| matches!(n.kind, NodeKind::Event { .. }))
            .count()
    };
    assert_eq!(events(&g), events(&paper));
    let root = |name: &str| {
        let r = g.rules.iter().find(|r| r.name == name).unwrap();
        &g.nodes[r.root.unwrap()]
    };
    assert!(
        root("q-left")
            .not_shared
            .iter()
            .all(|n| !n.contains("written otherwise")),
        "q-left and q-right differ in their operators, not only in spelling"
    );
    // The same rule twice, spelled apart: one operator, two roots that say why.
    let twice = r#"
[[rule]]
name = "a"
severity = "low"
events.x = 'syslog and app == "x"'
events.y = 'syslog and app == "y"'
pattern = "seq(x, y) within 1m"

[[rule]]
name = "b"
severity = "low"
events.x = 'app == "x"'
events.y = 'syslog and app == "y"'
pattern = "seq(x, y) within 1m"
"#;
    // Two conditions swapped between the definitions: the engine runs two states (a rule's
    // meaning keeps which definition holds which), so two roots.
    let swapped = r#"
[[rule]]
name = "a"
severity = "low"
events.x = 'syslog and app == "x"'
events.y = 'app == "x"'
pattern = "seq(x, y) within 1m"

[[rule]]
name = "b"
severity = "low"
events.x = 'app == "x"'
events.y = 'syslog and app == "x"'
pattern = "seq(x, y) within 1m"
"#;
    let g = build(&rules(swapped), true);
    assert_ne!(g.rules[0].root, g.rules[1].root, "{}", g.to_text());
    let g = build(&rules(twice), true);
    let (a, b) = (top(&g, "a"), top(&g, "b"));
    assert_eq!(a, b, "{}", g.to_text());
    let ra = g.rules[0].root.unwrap();
    assert_ne!(ra, g.rules[1].root.unwrap());
    assert!(
        g.nodes[ra]
            .not_shared
            .iter()
            .any(|n| n.contains("its rule written otherwise")),
        "{}",
        g.to_text()
    );
}

#[test]
fn no_share_has_no_shared_node() {
    let rs = rules(PAPER);
    let g = build(&rs, false);
    assert!(g.nodes.iter().all(|n| !n.is_shared()), "{}", g.to_text());
    assert!(
        !g.nodes
            .iter()
            .any(|n| matches!(n.kind, NodeKind::Virtual { .. }))
    );
    assert_eq!(g.stats.nodes, g.stats.nodes_unshared);
    assert_eq!(
        g.stats.nodes_unshared,
        build(&rs, true).stats.nodes_unshared
    );
    assert_eq!(g.stats.predicates, 13);
    // Every operator node has one parent: a tree per rule.
    assert!(
        g.nodes
            .iter()
            .filter(|n| is_operator(&n.kind))
            .all(|n| n.parents.len() == 1)
    );
    assert!(
        g.to_text()
            .contains("not shared (--no-share): identical to #")
    );
}

#[test]
fn same_rule_twice_in_one_rule_and_order_of_or() {
    // seq(a, b) in two places of one rule is one node; or(b, a) == or(a, b).
    let g = build(
        &rules(
            r#"
[[rule]]
name = "twice"
severity = "low"
events.a = 'syslog and app == "a"'
events.b = 'syslog and app == "b"'
events.c = 'syslog and app == "c"'
pattern = "or(seq(a, b), seq(c, seq(a, b)))"

[[rule]]
name = "or-order"
severity = "low"
events.a = 'syslog and app == "a"'
events.b = 'syslog and app == "b"'
pattern = "seq(or(b, a), c2) within 1m"
events.c2 = 'syslog and app == "c"'

[[rule]]
name = "or-order-2"
severity = "low"
events.a = 'app == "a" and syslog'
events.b = 'syslog and app == "b"'
events.c = 'syslog and app == "c"'
pattern = "seq(or(a, b), c) within 1m"
"#,
        ),
        true,
    );
    let ab = g
        .nodes
        .iter()
        .find(|n| n.kind == NodeKind::Seq && n.sharing.iter().any(|s| s.kind == ShareKind::SO))
        .unwrap_or_else(|| panic!("{}", g.to_text()));
    assert_eq!(ab.parents.len(), 2, "{}", g.to_text());
    assert_eq!(ab.rules, [0]);
    // The two `within 1m` rules have the same body: one root serving both.
    let root = g.rules[1].root.unwrap();
    assert_eq!(g.rules[2].root, Some(root));
    assert_eq!(g.nodes[root].rules, [1, 2]);
}

const APART: &str = r#"
[[rule]]
name = "by-host-5m"
severity = "low"
group_by = ["host"]
events.a = 'syslog and app == "a"'
events.b = 'syslog and app == "b"'
pattern = "seq(a, b) within 5m"

[[rule]]
name = "by-host-10m"
severity = "low"
group_by = ["host"]
events.a = 'syslog and app == "a"'
events.b = 'syslog and app == "b"'
pattern = "seq(a, b) within 10m"

[[rule]]
name = "by-app-5m"
severity = "low"
group_by = ["app"]
events.a = 'syslog and app == "a"'
events.b = 'syslog and app == "b"'
pattern = "seq(a, b) within 5m"

[[rule]]
name = "closures"
severity = "low"
group_by = ["host"]
events.a = 'syslog and app == "a"'
events.c = 'syslog and app == "c"'
pattern = "or(seq(a{3,}, c), seq(c, a{3,})) within 5m"
"#;

#[test]
fn different_window_or_group_by_are_not_merged() {
    let g = build(&rules(APART), true);
    let text = g.to_text();
    let seqs: Vec<_> = g
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Seq && n.rules.len() == 1 && n.rules[0] < 3)
        .collect();
    assert_eq!(seqs.len(), 3, "{text}");
    assert!(seqs.iter().all(|n| !n.is_shared()));
    // The predicates are still one each.
    assert_eq!(g.stats.predicates, 3, "{text}");
    let notes = |rule: usize| -> Vec<String> {
        seqs.iter()
            .find(|n| n.rules == [rule])
            .unwrap()
            .not_shared
            .clone()
    };
    assert!(
        notes(0)
            .iter()
            .any(|n| n.contains("different window (5m vs 10m)")),
        "{text}"
    );
    assert!(
        notes(0)
            .iter()
            .any(|n| n.contains("different group_by ([host] vs [app])")),
        "{text}"
    );
    assert!(text.contains("not shared with #"), "{text}");
    // Closures: one shared counter a{3,} (SO) feeding both seqs; the two seqs are not
    // combined (SS would need event children).
    let counter = g
        .nodes
        .iter()
        .find(|n| matches!(n.kind, NodeKind::Repeat { .. }))
        .unwrap();
    assert_eq!(counter.parents.len(), 2, "{text}");
    assert!(counter.sharing[0].reason.contains("shared closure counter"));
}

#[test]
fn absence_timers_are_shared() {
    let g = build(
        &rules(
            r#"
[[rule]]
name = "silent"
severity = "low"
group_by = ["host"]
expect = ["a"]
events.hb = 'syslog and app == "heartbeat"'
pattern = "absent(hb) for 60s"

[[rule]]
name = "silent-b"
severity = "low"
group_by = ["host"]
expect = ["b"]
events.hb = 'syslog and app == "heartbeat"'
pattern = "absent(hb) for 60s"

[[rule]]
name = "talk-then-silent"
severity = "low"
group_by = ["host"]
events.hb = 'syslog and app == "heartbeat"'
events.t = 'syslog and app == "talk"'
pattern = "or(seq(t, absent(hb) for 60s), seq(absent(hb) for 60s, t))"

[[rule]]
name = "talk-then-silent-hourly"
severity = "low"
group_by = ["host"]
trigger = { every = "1h" }
events.hb = 'syslog and app == "heartbeat"'
events.t = 'syslog and app == "talk"'
pattern = "seq(t, absent(hb) for 60s)"
"#,
        ),
        true,
    );
    let text = g.to_text();
    let timers: Vec<_> = g
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, NodeKind::Absent { .. }))
        .collect();
    // Alone (two roots: other `expect`), after `t` (in two rules), at the start: three
    // timers, each timing from its own place.
    assert_eq!(timers.len(), 3, "{text}");
    let shared: Vec<_> = timers.iter().filter(|n| n.is_shared()).collect();
    assert_eq!(shared.len(), 2, "{text}");
    for t in &shared {
        assert!(
            t.sharing[0].reason.contains("shared absence timer"),
            "{text}"
        );
        // (The one after `t` has one parent: the seq, itself shared by both rules.)
        assert_eq!(t.rules.len(), 2, "{text}");
    }
    assert!(
        text.contains("timed from another place (alone vs at the start of a seq)"),
        "{text}"
    );
}

#[test]
fn text_and_dot() {
    let g = build(&rules(PAPER), true);
    let text = g.to_text();
    for want in [
        "virtual [OA]  or(#6, #7) | and(#6, #7)",
        "virtual [SO+SS]",
        "virtual [OS]",
        "shared OA:",
        "shared OS:",
        "shared SS:",
        "seq(#12:or(#6, #7), #13:seq(#8, #6), #14:or(#9, #10))",
        "seq(#12:and(#6, #7), #13:seq(#8, #6), #14:seq(#9, #11))",
    ] {
        assert!(text.contains(want), "{want} missing in\n{text}");
    }
    let dot = g.to_dot();
    assert!(dot.starts_with("digraph cepheus {"));
    assert!(dot.contains("peripheries=2"));
    assert!(dot.contains("[OA]"));
    // Shared nodes name their rules; every node says why it is or is not shared.
    assert!(dot.contains("\\nrules: q-left, q-right"), "{dot}");
    assert!(dot.contains("tooltip=\"shared OA: "), "{dot}");
    assert!(dot.contains("tooltip=\"not shared"), "{dot}");
    // Parses and renders, when Graphviz is installed.
    let Ok(mut child) = std::process::Command::new("dot")
        .arg("-Tsvg")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        eprintln!("skipped: `dot` (Graphviz) is not installed");
        return;
    };
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(dot.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}\n{dot}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("<svg"));
}

#[test]
fn many_similar_rules_make_one_virtual_node_with_linear_reasons() {
    let mut text = String::new();
    for i in 0..300 {
        text.push_str(&format!(
            "[[rule]]\nname = \"r{i}\"\nseverity = \"low\"\ngroup_by = [\"host\"]\n\
             events.a = 'syslog and app == \"a\"'\nevents.b = 'syslog and app == \"b{i}\"'\n\
             pattern = \"seq(a, b) within 5m\"\n\n"
        ));
    }
    // two ors containing `a` join by OS
    for i in 0..2 {
        text.push_str(&format!(
            "[[rule]]\nname = \"o{i}\"\nseverity = \"low\"\ngroup_by = [\"host\"]\n\
             events.a = 'syslog and app == \"a\"'\nevents.z = 'syslog and app == \"z{i}\"'\n\
             pattern = \"seq(or(a, z), z) within 5m\"\n\n"
        ));
    }
    let g = build(&rules(&text), true);
    let virt: Vec<_> = g
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, NodeKind::Virtual { .. }))
        .collect();
    assert_eq!(virt.len(), 1);
    let NodeKind::Virtual { ops } = &virt[0].kind else {
        unreachable!()
    };
    assert_eq!(ops.len(), 302);
    // reasons: three per kind and a count of the rest
    assert!(virt[0].sharing.len() <= 8, "{:#?}", virt[0].sharing);
    assert!(
        virt[0]
            .sharing
            .iter()
            .any(|s| s.kind == ShareKind::SS && s.reason == "and 296 more like these"),
        "{:#?}",
        virt[0].sharing
    );
    assert_eq!(g.stats.predicates, 303);
    // `a` is delivered to one node instead of 302.
    let a = g
        .nodes
        .iter()
        .find(|n| n.canonical == r#"app == "a""#)
        .unwrap();
    assert_eq!(g.consumers(a.id), [virt[0].id]);
}

#[test]
fn relations_chain_into_one_virtual_node_and_operator_fed_seqs_are_not_combined() {
    let g = build(
        &rules(
            r#"
[[rule]]
name = "chain"
severity = "low"
events.a = 'syslog and app == "a"'
events.b = 'syslog and app == "b"'
events.c = 'syslog and app == "c"'
pattern = "seq(or(a, b), and(a, b), seq(a, c))"

[[rule]]
name = "fed"
severity = "low"
events.a = 'syslog and app == "a"'
events.b = 'syslog and app == "b"'
events.c = 'syslog and app == "c"'
pattern = "or(seq(seq(a, b), c), seq(seq(a, b), b))"
"#,
        ),
        true,
    );
    let text = g.to_text();
    let virt: Vec<_> = g
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, NodeKind::Virtual { .. }))
        .collect();
    // or(a, b) + and(a, b) (OA) + seq(a, c) (OS with the or, SS with seq(a, b)): one node.
    assert_eq!(virt.len(), 1, "{text}");
    let NodeKind::Virtual { ops } = &virt[0].kind else {
        unreachable!()
    };
    let mut forms: Vec<Op> = ops.iter().map(|o| o.op).collect();
    forms.sort();
    assert_eq!(forms, [Op::Seq, Op::Seq, Op::Or, Op::And], "{text}");
    // seq(seq(a, b), c) and seq(seq(a, b), b) start with the same operator: not SS.
    assert!(
        text.contains("not combined (SS) with #") && text.contains("a child is an operator"),
        "{text}"
    );
}

/// The OA reason names each operation's own outputs whichever of the two rules comes first.
#[test]
fn oa_reason_names_the_or_and_the_and_outputs_in_either_order() {
    for (first, second) in [("and", "or"), ("or", "and")] {
        let text = format!(
            r#"
[[rule]]
name = "r-{first}"
severity = "low"
group_by = ["host"]
events.x = 'app == "x"'
events.y = 'app == "y"'
pattern = "{first}(x, y) within 1m"

[[rule]]
name = "r-{second}"
severity = "low"
group_by = ["host"]
events.x = 'app == "x"'
events.y = 'app == "y"'
pattern = "{second}(x, y) within 1m"
"#
        );
        let g = build(&rules(&text), true);
        let oa = g
            .nodes
            .iter()
            .find(|n| n.sharing.iter().any(|s| s.kind == ShareKind::OA))
            .unwrap_or_else(|| panic!("no OA node in\n{}", g.to_text()));
        let parent_of = |op: Op| {
            let ops = ops(&g, oa.id);
            let (_, parents) = ops.iter().find(|(o, _)| *o == op).unwrap();
            format!("#{}", parents[0])
        };
        let (or_out, and_out) = (parent_of(Op::Or), parent_of(Op::And));
        assert_ne!(or_out, and_out);
        let reason = &oa.sharing[0].reason;
        let want = format!("the or output goes to {or_out}, the and output to {and_out}");
        assert!(
            reason.contains(&want),
            "{first} first: {reason}\n{}",
            g.to_text()
        );
    }
}

/// An `or` of events keeps no state, so one without a window combines with an `and` (OA) or a
/// `seq` (OS) that has one, as the issue's rule sets write them; two `and`s of different
/// windows stay apart.
#[test]
fn a_windowless_or_combines_with_operators_that_have_a_window() {
    let rule = |name: &str, pattern: &str| {
        format!(
            "[[rule]]\nname = \"{name}\"\nseverity = \"low\"\nevents.e1 = 'syslog and app == \"e1\"'\nevents.e2 = 'syslog and app == \"e2\"'\nevents.e4 = 'syslog and app == \"e4\"'\nevents.e5 = 'syslog and app == \"e5\"'\nevents.e6 = 'syslog and app == \"e6\"'\npattern = \"{pattern}\"\n"
        )
    };
    let text = [
        rule("oa-or", "or(e1, e2)"),
        rule("oa-and", "and(e1, e2) within 5m"),
        rule("os-or", "or(e4, e5)"),
        rule("os-seq", "seq(e4, e6) within 5m"),
    ]
    .concat();
    let g = build(&rules(&text), true);
    let kinds: Vec<ShareKind> = g
        .nodes
        .iter()
        .flat_map(|n| n.sharing.iter().map(|s| s.kind))
        .filter(|k| *k != ShareKind::SO)
        .collect();
    assert!(kinds.contains(&ShareKind::OA), "{}", g.to_text());
    assert!(kinds.contains(&ShareKind::OS), "{}", g.to_text());
    // Two ands of different windows beside a windowless or: the or joins one of them only.
    let text = [
        rule("o", "or(e1, e2)"),
        rule("a5", "and(e1, e2) within 5m"),
        rule("a10", "and(e1, e2) within 10m"),
    ]
    .concat();
    let g = build(&rules(&text), true);
    let virtuals: Vec<&Node> = g
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, NodeKind::Virtual { .. }))
        .collect();
    assert_eq!(virtuals.len(), 1, "{}", g.to_text());
    assert_eq!(virtuals[0].rules.len(), 2, "{}", g.to_text());
    // The virtual node's scope is the stateful operator's (its window), whichever rule came
    // first; and a node never says it was not shared with itself.
    for text in [
        [rule("o", "or(e1, e2)"), rule("a", "and(e1, e2) within 1m")].concat(),
        [rule("a", "and(e1, e2) within 1m"), rule("o", "or(e1, e2)")].concat(),
        [
            rule("o", "or(e1, e4)"),
            rule("o30", "or(e4, e1) within 30s"),
            rule("s", "seq(e4, e6) within 30s"),
        ]
        .concat(),
    ] {
        let g = build(&rules(&text), true);
        let v: Vec<&Node> = g
            .nodes
            .iter()
            .filter(|n| matches!(n.kind, NodeKind::Virtual { .. }))
            .collect();
        assert_eq!(v.len(), 1, "{}", g.to_text());
        assert!(!v[0].scope.contains("within=-"), "{}", g.to_text());
        for n in &g.nodes {
            let me = format!("#{}:", n.id);
            assert!(
                n.not_shared.iter().all(|w| !w.contains(&me)),
                "#{} {:?}\n{}",
                n.id,
                n.not_shared,
                g.to_text()
            );
        }
    }
}

/// Two conditions that differ only in the order of operands a regex capture pins are two
/// predicates, and the graph says why; without a capture they are one.
#[test]
fn predicates_kept_apart_by_capture_order_say_why() {
    let text = r#"
[[rule]]
name = "in-order"
severity = "low"
group_by = ["src"]
events.f = 'app == "sshd" and msg =~ "from (?P<src>\S+)"'
pattern = "f"

[[rule]]
name = "reordered"
severity = "low"
group_by = ["src"]
events.f = 'msg =~ "from (?P<src>\S+)" and app == "sshd"'
pattern = "f"

[[rule]]
name = "plain-a"
severity = "low"
events.f = 'app == "cron" and msg contains "x"'
pattern = "f"

[[rule]]
name = "plain-b"
severity = "low"
events.f = 'msg contains "x" and app == "cron"'
pattern = "f"
"#;
    let g = build(&rules(text), true);
    let preds: Vec<&Node> = g
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, NodeKind::Predicate { .. }))
        .collect();
    assert_eq!(preds.len(), 3, "{}", g.to_text());
    let apart: Vec<&&Node> = preds
        .iter()
        .filter(|n| n.not_shared.iter().any(|s| s.contains("another order")))
        .collect();
    assert_eq!(apart.len(), 2, "{}", g.to_text());
    assert!(
        apart[0].not_shared[0].contains(&format!("#{}", apart[1].id)),
        "{}",
        g.to_text()
    );
    assert!(
        g.to_text()
            .contains("which a regex capture keeps as written")
    );
}

#[test]
fn unused_definitions_are_not_in_the_graph_nor_counted_as_shared() {
    // Both rules define `spare` without using it: it is never evaluated, so it is no node and
    // no SO sharing (the checker warns about it).
    let text = r#"
[[rule]]
name = "r1"
severity = "low"
events.a = 'syslog and app == "a"'
events.spare = 'syslog and app == "cron"'
pattern = "a"

[[rule]]
name = "r2"
severity = "low"
events.b = 'syslog and app == "b"'
events.spare = 'syslog and app == "cron"'
pattern = "b"
"#;
    for share in [true, false] {
        let g = build(&rules(text), share);
        assert!(
            !g.nodes.iter().any(|n| n.canonical.contains("cron")),
            "{}",
            g.to_text()
        );
        assert_eq!(g.stats.predicates, 2);
        assert_eq!(g.stats.predicates_unshared, 2);
        assert!(g.nodes.iter().all(|n| !n.is_shared()), "{}", g.to_text());
        assert_eq!(
            g.rules[0].events,
            [Some(g.rules[0].events[0].unwrap()), None]
        );
        assert_eq!(g.rules[0].unused, ["spare"]);
        assert!(
            g.to_text().contains("never evaluated: spare"),
            "{}",
            g.to_text()
        );
    }
}

#[test]
fn every_node_says_why_it_is_or_is_not_shared() {
    let extra = r#"
[[rule]]
name = "alone"
severity = "low"
events.x = 'syslog and app == "x"'
events.y = 'syslog and app == "y"'
pattern = "seq(x, y) within 1m"
"#;
    let rs = rules(&format!("{PAPER}{extra}"));
    for share in [true, false] {
        let g = build(&rs, share);
        for n in &g.nodes {
            assert!(
                !n.sharing.is_empty() || !n.not_shared.is_empty(),
                "#{} has no reason (share={share}):\n{}",
                n.id,
                g.to_text()
            );
        }
        assert!(
            g.to_text()
                .contains("not shared: no other event definition has this condition")
        );
    }
}

#[test]
fn no_share_names_the_similar_operators_it_did_not_combine() {
    let g = build(&rules(PAPER), false);
    let text = g.to_text();
    // One note per kind of the paper's tables, each on the node that sharing would combine.
    for kind in ["OA", "OS", "SS"] {
        let note = format!("not combined ({kind}) with #");
        let holders: Vec<&Node> = g
            .nodes
            .iter()
            .filter(|n| {
                n.not_shared
                    .iter()
                    .any(|s| s.starts_with(&note) && s.ends_with("(--no-share)"))
            })
            .collect();
        assert!(holders.len() >= 2, "{kind}:\n{text}");
    }
    let oa: Vec<NodeId> = g
        .nodes
        .iter()
        .filter(|n| {
            n.not_shared
                .iter()
                .any(|s| s.starts_with("not combined (OA)"))
        })
        .map(|n| n.id)
        .collect();
    let kinds: Vec<&str> = oa.iter().map(|id| g.nodes[*id].kind.name()).collect();
    assert_eq!(kinds, ["or", "and"], "{text}");
}

#[test]
fn not_combined_reasons_name_each_node_s_own_value_first() {
    let text = r#"
[[rule]]
name = "s"
severity = "low"
events.a = 'syslog and app == "a"'
events.b = 'syslog and app == "b"'
pattern = "seq(a, b) within 5m"

[[rule]]
name = "o"
severity = "low"
events.a = 'syslog and app == "a"'
events.b = 'syslog and app == "b"'
pattern = "or(a, b) within 7m"
"#;
    let g = build(&rules(text), true);
    let seq = top(&g, "s");
    let or = top(&g, "o");
    let note = |id: NodeId| {
        g.nodes[id]
            .not_shared
            .iter()
            .find(|n| n.starts_with("not combined (OS)"))
            .cloned()
            .unwrap_or_else(|| panic!("#{id}: {}", g.to_text()))
    };
    assert!(
        note(seq).ends_with("different window (5m vs 7m)"),
        "{}",
        note(seq)
    );
    assert!(
        note(or).ends_with("different window (7m vs 5m)"),
        "{}",
        note(or)
    );
}

/// Closures and absences over the same events in the same scope that differ only in a
/// parameter say which one; event nodes apart by their group mapping show both mappings.
#[test]
fn a_node_apart_by_a_parameter_or_a_mapping_says_which() {
    let rule = |name: &str, group: &str, ev: &str, pattern: &str| {
        format!(
            "[[rule]]\nname = \"{name}\"\nseverity = \"low\"\ngroup_by = [\"{group}\"]\n\
             events.f = {ev}\npattern = \"{pattern}\"\nexpect = [\"x\"]\n\n"
        )
    };
    let plain = "'syslog and app == \"f\"'";
    let mapped = "{ if = 'syslog and app == \"f\"', ip = \"host\" }";
    let text = [
        rule("a1", "host", plain, "absent(f) for 1m"),
        rule("a2", "host", plain, "absent(f) for 61s"),
        rule("c1", "host", plain, "seq(f{3,5}, f) within 1m"),
        rule("c2", "host", plain, "seq(f{3,}, f) within 1m"),
        rule("m1", "ip", mapped, "seq(f{3,}, f) within 1m"),
    ]
    .concat();
    let g = build(&rules(&text), true);
    let dump = g.to_text();
    for note in [
        "different duration (1m vs 1m1s)",
        "different duration (1m1s vs 1m)",
        "different count ({3,5} vs {3,})",
        "different group mapping ([host=host] vs [ip=host])",
    ] {
        assert!(dump.contains(note), "{note} in {dump}");
    }
    assert!(
        dump.lines().next().unwrap().contains("of them shared"),
        "{dump}"
    );
}

/// An SO node says its places as parent addresses: under one root that several rules share
/// it is in one place; twice in one sequence, at two child positions.
#[test]
fn so_places_are_parent_addresses() {
    let rule = |name: &str, pattern: &str| {
        format!(
            "[[rule]]\nname = \"{name}\"\nseverity = \"low\"\ngroup_by = [\"host\"]\n\
             events.a = 'syslog and app == \"a\"'\nevents.b = 'syslog and app == \"b\"'\n\
             events.c = 'syslog and app == \"c\"'\npattern = \"{pattern}\"\n\n"
        )
    };
    let text = [
        rule("v1", "seq(a{3,}, b) within 1m"),
        rule("v2", "seq(a{3,}, b) within 1m"),
        rule("v3", "seq(a{3,}, b) within 1m"),
        rule("w", "seq(seq(a, b), c, seq(a, b)) within 1m"),
    ]
    .concat();
    let g = build(&rules(&text), true);
    let dump = g.to_text();
    let reason = |kind: fn(&NodeKind) -> bool| {
        g.nodes
            .iter()
            .find(|n| kind(&n.kind) && n.is_shared())
            .map(|n| n.sharing[0].reason.clone())
            .unwrap_or_else(|| panic!("{dump}"))
    };
    let counter = reason(|k| matches!(k, NodeKind::Repeat { .. }));
    assert!(
        counter.contains("in one place (rules v1, v2, v3)"),
        "{counter}"
    );
    let inner = g
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Seq && n.is_shared())
        .map(|n| n.sharing[0].reason.clone())
        .find(|r| r.contains("(rule w)"))
        .unwrap_or_else(|| panic!("{dump}"));
    assert!(inner.contains("in 2 places"), "{inner}");
    assert!(inner.contains(".0, #") && inner.ends_with(".2"), "{inner}");
}

/// An absence names the steps it times from by a digest, so nested sequences keep the dump's
/// size linear (their text nested a copy of every step below: 42 MB at depth 18), and its
/// place is told from where it stands, not read back from text.
#[test]
fn absences_in_nested_sequences_stay_small_and_placed() {
    let mut p = "a".to_string();
    for _ in 0..30 {
        p = format!("seq({p}, absent(c) for 1s, b)");
    }
    let evs = "events.a = 'app == \"a\"'\nevents.b = 'app == \"b\"'\n\
               events.c = 'app == \"c\"'\nevents.d = 'app == \"d\"'\n";
    let text = format!(
        "[[rule]]\nname = \"deep\"\nseverity = \"low\"\n{evs}pattern = \"{p} within 1h\"\n\n\
         [[rule]]\nname = \"x\"\nseverity = \"low\"\n{evs}\
         pattern = \"seq(seq(a, absent(c) for 1m, b), absent(d) for 1m)\"\n\n\
         [[rule]]\nname = \"y\"\nseverity = \"low\"\n{evs}pattern = \"seq(b, absent(d) for 1m)\"\n"
    );
    let g = build(&rules(&text), true);
    let dump = g.to_text();
    assert!(dump.len() < 200_000, "{} bytes", dump.len());
    assert!(
        dump.contains("timed from other steps (both after a step of a seq)"),
        "{dump}"
    );
}

/// A condition's literal may hold control characters (a TOML escape): the dumps write them
/// as escapes, one node per line, and never raw to a terminal or to Graphviz.
#[test]
fn control_characters_in_literals_are_escaped_in_dumps() {
    let text = "[[rule]]\nname = \"ctrl\"\nseverity = \"low\"\nevents.a = \"app == 'a\\nb' and msg == 'x\\u0000y\\u0007z\\ttab\\r'\"\npattern = \"a\"\n";
    let g = build(&rules(text), true);
    let dump = g.to_text();
    assert!(
        dump.contains(r#"app == "a\nb""#) && dump.contains(r#"msg == "x\u{0}y\u{7}z\ttab\r""#),
        "{dump}"
    );
    let dot = g.to_dot();
    for (out, name) in [(&dump, "text"), (&dot, "dot")] {
        assert!(
            !out.chars().any(|c| c.is_control() && c != '\n'),
            "{name}: {out:?}"
        );
    }
    // In the text, each node's line starts with its id: the newline in the literal did not
    // split one.
    for line in dump.lines().filter(|l| l.contains("app ==")) {
        assert!(line.starts_with('#') || line.starts_with("    "), "{dump}");
    }
    assert!(dot.contains(r#"app == \"a\\nb\""#), "{dot}");
}

/// The order of an `and`'s parts is part of its meaning (when one event completes two of its
/// orders at once, the first written wins): `and(c, b, a)` and `and(a, b, c)` are two states,
/// and the graph says why; a nested `and` is flattened in place, the order kept.
#[test]
fn the_order_of_an_and_s_parts_is_kept_and_said() {
    let rule = |name: &str, pattern: &str| {
        format!(
            "[[rule]]\nname = \"{name}\"\nseverity = \"low\"\nevents.a = 'syslog and app == \"a\"'\nevents.b = 'syslog and app == \"b\"'\nevents.c = 'syslog and app == \"c\"'\npattern = \"{pattern}\"\n"
        )
    };
    let set = rules(
        &[
            rule("abc", "and(a, b, c) within 5m"),
            rule("cba", "and(c, b, a) within 5m"),
            rule("nested", "and(and(a, b), c) within 5m"),
        ]
        .concat(),
    );
    let canon: Vec<String> = set.rules.iter().map(|r| r.canonical()).collect();
    assert_ne!(canon[0], canon[1]);
    assert_eq!(canon[0], canon[2]);
    let g = build(&set, true);
    let root_of = |name: &str| {
        g.rules
            .iter()
            .find(|r| r.name == name)
            .unwrap()
            .root
            .unwrap()
    };
    assert_ne!(root_of("abc"), root_of("cba"), "{}", g.to_text());
    assert_eq!(root_of("abc"), root_of("nested"), "{}", g.to_text());
    // The `and` node itself is one (the occurrences it combines are the same).
    assert_eq!(top(&g, "abc"), top(&g, "cba"), "{}", g.to_text());
    let root = &g.nodes[root_of("cba")];
    assert!(
        root.not_shared
            .iter()
            .any(|w| w.contains("an `and`'s parts in another order")),
        "{}",
        g.to_text()
    );
}

/// The count an absence holds (`absent(hb{3,}) for 10s`: fewer than 3 in any 10 s) is no
/// closure's `hb{3,}` (at least 3, ever): no node is shared between them, nor between two
/// absences of counts over different durations; the same absence in two rules is one.
#[test]
fn an_absences_count_is_no_closures_node() {
    let rule = |name: &str, pattern: &str| {
        format!(
            "[[rule]]\nname = \"{name}\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nevents.hb = 'syslog and app == \"hb\"'\npattern = \"{pattern}\"\n"
        )
    };
    let text = [
        rule("few", "absent(hb{3,}) for 10s"),
        rule("many", "hb{3,}"),
        rule("few20", "absent(hb{3,}) for 20s"),
    ]
    .concat();
    let rules: RuleSet = compile_str("r.toml", &text).rules.unwrap();
    let g = build(&rules, true);
    // (The predicate and the event node are theirs alike.)
    let counts: Vec<String> = g
        .shared(ShareKind::SO)
        .filter(|n| matches!(n.kind, NodeKind::Repeat { .. }))
        .map(|n| n.canonical.clone())
        .collect();
    assert_eq!(counts, Vec::<String>::new(), "{}", g.to_text());
    let twice = [text.clone(), rule("few-again", "absent(hb{3,}) for 10s")].concat();
    let rules: RuleSet = compile_str("r.toml", &twice).rules.unwrap();
    let g = build(&rules, true);
    assert!(
        g.shared(ShareKind::SO)
            .any(|n| n.canonical.contains("counted by an absence for 10s")),
        "{}",
        g.to_text()
    );
}
