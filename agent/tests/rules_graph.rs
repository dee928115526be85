//! `cepheus rules graph` through the binary: the paper's shared nodes (Tables 2 and 3) in the
//! text and dot dumps, none with `--no-share`, reasons for rules kept apart, exit codes.

use std::path::PathBuf;
use std::process::Command;

/// Figure 2 of the paper as rules (see core/tests/graph.rs): OA, OS, SO and SS.
const PAPER: &str = r#"
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
"#;

/// Writes `text` as a rule file in this test binary's temporary folder.
fn rule_file(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rules_graph");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn cepheus(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cepheus"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run cepheus");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn text_shows_the_papers_shared_nodes() {
    let p = rule_file("paper.toml", PAPER);
    let p = p.to_str().unwrap();
    let (code, text, stderr) = cepheus(&["rules", "graph", p]);
    assert_eq!(code, 0, "{stderr}");
    for want in [
        "shared nodes by kind: SO 11, OA 1, SS 1, OS 1",
        // OA(1,6): or(e1, e2) -> node 4 (q-left), and(e1, e2) -> node 9 (q-right)
        "#12 virtual [OA]  or(#6, #7) | and(#6, #7)",
        "    or(#6, #7) -> #15.0\n    and(#6, #7) -> #16.0\n",
        // SO(2,8): seq(e3, e1) -> 4 and 9; SS with seq(e3, e5)
        "#13 virtual [SO+SS]  seq(#8, #6) | seq(#8, #10)",
        "    seq(#8, #6) -> #15.1 #16.1\n    seq(#8, #10) -> #17.0\n",
        // OS(3,7): or(e4, e5) -> 4, seq(e4, e6) -> 9
        "#14 virtual [OS]  or(#9, #10) | seq(#9, #11)",
        "    or(#9, #10) -> #15.2\n    seq(#9, #11) -> #16.2\n",
        "#15 seq  seq(#12:or(#6, #7), #13:seq(#8, #6), #14:or(#9, #10))",
        "#16 seq  seq(#12:and(#6, #7), #13:seq(#8, #6), #14:seq(#9, #11))",
        "shared OA: or(#6, #7) and and(#6, #7) are over the same events",
        "shared SS: seq(#8, #6) and seq(#8, #10) start with the same event #8",
        "shared OS: or(#9, #10) contains #9, the first event of seq(#9, #11)",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    assert!(stderr.contains("21 nodes (39 without sharing)"), "{stderr}");
}

/// Operators shared below the roots (a closure counter, an absence timer) are listed with the
/// rule states that run them, since each state still runs its own partial matches; none
/// with `--no-share`.
#[test]
fn text_says_which_rule_states_run_a_shared_operator() {
    let text = r#"
[[rule]]
name = "r1"
severity = "high"
group_by = ["host"]
events.a = 'syslog and app == "a"'
events.b = 'syslog and app == "b"'
pattern = "seq(a, absent(b) for 5s)"

[[rule]]
name = "r1-hourly"
severity = "high"
group_by = ["host"]
trigger = { every = "1h" }
events.a = 'syslog and app == "a"'
events.b = 'syslog and app == "b"'
pattern = "seq(a, absent(b) for 5s)"

[[rule]]
name = "r2"
severity = "high"
group_by = ["host"]
expect = ["h1"]
events.b = 'syslog and app == "b"'
pattern = "absent(b) for 5s"

[[rule]]
name = "r2-copy"
severity = "low"
group_by = ["host"]
expect = ["h1"]
events.b = 'syslog and app == "b"'
pattern = "absent(b) for 5s"

[[rule]]
name = "r3"
severity = "low"
group_by = ["host"]
events.a = 'syslog and app == "a"'
pattern = "a{3,} within 10s"

[[rule]]
name = "r4"
severity = "low"
group_by = ["host"]
events.a = 'syslog and app == "a"'
events.c = 'syslog and app == "c"'
pattern = "seq(a{3,}, c) within 10s"
"#;
    let p = rule_file("below-roots.toml", text);
    let p = p.to_str().unwrap();
    let (code, out, stderr) = cepheus(&["rules", "graph", p]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        out.contains("run time: operators shared below the roots in this graph are run by each rule state that holds them"),
        "{out}"
    );
    let line = |kind: &str| {
        out.lines()
            .find(|l| l.starts_with("  #") && l.contains(&format!(" {kind}: run by ")))
            .unwrap_or_else(|| panic!("no {kind} line in\n{out}"))
            .to_string()
    };
    // The absence after `a` is one timer for r1 and r1-hourly (another trigger, another
    // state); the absence alone (r2 and r2-copy mean the same: one state for both) times from
    // its events only, so it is another node.
    assert!(
        line("absent").ends_with(": run by 2 rule states (r1; r1-hourly)"),
        "{out}"
    );
    assert!(
        out.contains("timed from another place (alone vs after a step of a seq)"),
        "{out}"
    );
    assert!(
        line("repeat").ends_with(": run by 2 rule states (r3; r4)"),
        "{out}"
    );
    let (code, out, stderr) = cepheus(&["rules", "graph", "--no-share", p]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!out.contains("operators shared below the roots"), "{out}");
}

/// The run-time side: rule states over the same events with the same group_by are one family
/// (whatever their windows), others are not, and `--no-share` has none.
#[test]
fn text_lists_the_run_time_families() {
    let p = rule_file("families.toml", &format!("{PAPER}{APART}"));
    let p = p.to_str().unwrap();
    let (code, text, stderr) = cepheus(&["rules", "graph", p]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        text.contains("run time: 2 families of rule states"),
        "{text}"
    );
    assert!(
        text.contains("  family 1: q-left, q-right, q-ss\n"),
        "{text}"
    );
    assert!(
        text.contains("  family 2: by-host-5m, by-host-10m\n"),
        "{text}"
    );
    // The SO + SS virtual node serves all three; each state runs its own partial matches.
    assert!(
        text.contains(" virtual: run by 3 rule states (q-left; q-right; q-ss)\n"),
        "{text}"
    );
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("  family") && l.contains("by-app")),
        "{text}"
    );
    let (code, text, stderr) = cepheus(&["rules", "graph", "--no-share", p]);
    assert_eq!(code, 0, "{stderr}");
    assert!(text.contains("run time: no family (--no-share"), "{text}");
}

#[test]
fn dot_marks_the_shared_nodes_and_renders() {
    let p = rule_file("paper-dot.toml", PAPER);
    let (code, dot, stderr) = cepheus(&["rules", "graph", "--format", "dot", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(dot.starts_with("digraph cepheus {"), "{dot}");
    for want in [
        "#12 virtual [OA]",
        "#13 virtual [SO+SS]",
        "#14 virtual [OS]",
    ] {
        let line = dot
            .lines()
            .find(|l| l.contains(want))
            .unwrap_or_else(|| panic!("{want}: {dot}"));
        assert!(line.contains("peripheries=2"), "{line}");
    }
    assert!(dot.contains("n12 -> n15 [label=\"or(#6, #7)\"];"), "{dot}");
    assert!(dot.contains("n12 -> n16 [label=\"and(#6, #7)\"];"), "{dot}");
    // What the picture shows shared below the roots is run per rule state: said in it.
    assert!(
        dot.contains("runtime [shape=note") && dot.contains("run by each rule state"),
        "{dot}"
    );
    let dotfile = p.with_extension("dot");
    std::fs::write(&dotfile, &dot).unwrap();
    let Ok(out) = Command::new("dot").arg("-Tsvg").arg(&dotfile).output() else {
        eprintln!("skipped rendering: `dot` (Graphviz) is not installed");
        return;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("<svg"));
}

#[test]
fn no_share_shows_no_shared_node() {
    let p = rule_file("paper-no-share.toml", PAPER);
    let (code, text, stderr) = cepheus(&["rules", "graph", "--no-share", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        text.contains("not shared: 39 nodes (39 without sharing)"),
        "{text}"
    );
    assert!(
        text.contains("0 of them shared")
            && text.contains("shared nodes by kind: SO 0, OA 0, SS 0, OS 0"),
        "{text}"
    );
    assert!(!text.contains("virtual"), "{text}");
    assert!(!text.contains("    shared "), "{text}");
    assert!(
        text.contains("not shared (--no-share): identical to #"),
        "{text}"
    );
}

#[test]
fn different_window_or_group_by_are_kept_apart_with_the_reason() {
    let p = rule_file("apart.toml", APART);
    let (code, text, stderr) = cepheus(&["rules", "graph", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(text.contains(": different window (5m vs 10m)"), "{text}");
    assert!(
        text.contains(": different group_by ([host] vs [app])"),
        "{text}"
    );
    assert!(text.contains("    not shared with #"), "{text}");
    assert!(text.contains("OA 0, SS 0, OS 0"), "{text}");
}

#[test]
fn rule_errors_exit_1_and_missing_paths_2() {
    let p = rule_file(
        "broken.toml",
        "[[rule]]\nname = \"x\"\nseverity = \"low\"\nevents.a = 'syslog'\npattern = \"seq(a, b)\"\n",
    );
    let (code, stdout, stderr) = cepheus(&["rules", "graph", p.to_str().unwrap()]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("unknown event `b`"), "{stderr}");
    let (code, _, stderr) = cepheus(&["rules", "graph", "/no/such/rules.toml"]);
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn shipped_rules_graph() {
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/../rules");
    let (code, text, stderr) = cepheus(&["rules", "graph", rules]);
    assert_eq!(code, 0, "{stderr}");
    // ssh-bruteforce and ssh-bruteforce-then-success share the closure counter fail{5,}.
    assert!(text.contains("shared SO: shared closure counter"), "{text}");
}
