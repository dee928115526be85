//! Integration tests of the rule language front end: parse, check, compile.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cepheus_core::event::{Field, FieldKey, Source, Value};
use cepheus_core::rules::ir::{Pattern, Severity, Trigger, Window};
use cepheus_core::rules::{Compiled, Level, SourceFile, compile, compile_str};
use cepheus_core::time::Duration;

const DESIGN_EXAMPLES: &str = r#"
[[rule]]
name     = "heartbeat-missing"
severity = "critical"
message  = "no heartbeat from {host} for 60s"
group_by = ["host"]
expect   = { file = "hosts.txt" }        # relative to this rule file; one key per line
events.hb = 'syslog and app == "heartbeat"'
pattern  = "absent(hb) for 60s"

[[rule]]
name     = "ssh-bruteforce-then-success"
severity = "high"
group_by = ["src"]
events.fail = 'syslog and app == "sshd" and msg =~ "Failed password for (?:invalid user )?(?P<user>\S+) from (?P<src>[0-9a-f.:]+)"'
events.ok   = 'syslog and app == "sshd" and msg =~ "Accepted \w+ for (?P<user>\S+) from (?P<src>[0-9a-f.:]+)"'
pattern  = "seq(fail{5,}, ok) within 5m"

[[rule]]
name     = "agent-silent-host-talking"
severity = "high"
message  = "{ip} sends traffic but its logging agent is silent"
group_by = ["ip"]
events.talk = { if = 'flow and kind == "flow_start"', ip = "src" }   # group name -> field
events.hb   = { if = 'syslog and app == "heartbeat"', ip = "peer" }
pattern  = "seq(talk, absent(hb) for 2m)"
"#;

fn with_hosts(text: &str, hosts: &str) -> Compiled {
    let src = [SourceFile {
        path: "rules/design.toml".into(),
        text: text.to_string(),
    }];
    let hosts = hosts.to_string();
    compile(&src, &mut |p| {
        assert_eq!(p, std::path::Path::new("rules/hosts.txt"));
        Ok(hosts.clone())
    })
}

fn errors(c: &Compiled) -> Vec<String> {
    c.diagnostics
        .iter()
        .map(|d| {
            format!(
                "{}:{}:{} {}: {}",
                d.path.display(),
                d.line,
                d.column,
                d.severity.name(),
                d.message
            )
        })
        .collect()
}

#[test]
fn design_examples_compile_as_written() {
    let c = with_hosts(DESIGN_EXAMPLES, "# hosts\nweb-1\n\ndb-1\n");
    assert!(c.diagnostics.is_empty(), "{:#?}", errors(&c));
    let rs = c.rules.unwrap();
    assert_eq!(rs.rules.len(), 3);
    let hb = &rs.rules[0];
    assert_eq!(hb.severity, Severity::Critical);
    assert_eq!(
        hb.expect,
        // a set: sorted
        vec![vec![Value::str("db-1")], vec![Value::str("web-1")]]
    );
    assert_eq!(
        hb.pattern,
        Pattern::Absent {
            inner: Box::new(Pattern::Event(0)),
            for_: Some(Duration::from_secs(60))
        }
    );
    let ssh = &rs.rules[1];
    assert_eq!(ssh.events[0].name, "fail");
    assert_eq!(
        ssh.events[0].group_fields,
        vec![FieldKey::Known(Field::Src)]
    );
    assert_eq!(
        ssh.within,
        Some(Window {
            min: Duration::ZERO,
            max: Duration::from_secs(300)
        })
    );
    assert_eq!(
        ssh.pattern,
        Pattern::Seq(vec![
            Pattern::Repeat {
                inner: Box::new(Pattern::Event(0)),
                min: 5,
                max: None,
                distinct: None
            },
            Pattern::Event(1)
        ])
    );
    let silent = &rs.rules[2];
    assert_eq!(silent.events[0].name, "talk", "events keep file order");
    assert_eq!(
        silent.events[0].group_fields,
        vec![FieldKey::Known(Field::Src)]
    );
    assert_eq!(
        silent.events[1].group_fields,
        vec![FieldKey::Known(Field::Peer)]
    );
    assert_eq!(silent.trigger, Trigger::Event);
}

#[test]
fn compiled_conditions_evaluate() {
    use cepheus_core::event::Event;
    use cepheus_core::rules::ir::Captures;
    use cepheus_core::time::Timestamp;
    let c = with_hosts(DESIGN_EXAMPLES, "web-1\n");
    let rs = c.rules.unwrap();
    let fail = &rs.rules[1].events[0].cond;
    let ev = Event::new(Source::Syslog, Timestamp(0), Timestamp(0))
        .with(Field::App, Value::str("sshd"))
        .with(
            Field::Msg,
            Value::str("Failed password for invalid user bob from 10.0.0.7 port 4 ssh2"),
        );
    let mut caps = Captures::new();
    assert!(fail.eval(&ev, &mut caps));
    assert!(caps.contains(&(
        FieldKey::Known(Field::Src),
        Value::Ip("10.0.0.7".parse().unwrap())
    )));
}

#[test]
fn conditions_of_the_contract_parse() {
    for cond in [
        r#"syslog and app == "sshd""#,
        r#"syslog and severity <= 3 and not (host == "lab-1")"#,
        r#"msg contains "alive""#,
        r#"msg starts_with "a" or msg ends_with "b""#,
        r#"msg =~ "Accepted \w+ for (?P<user>\S+)""#,
        r#"app in ["sshd", "dropbear"]"#,
        r#"src in 10.0.0.0/8"#,
        r#"flow and dport == 22 and orig_bytes > 1000"#,
        r#"exists(sd.origin.ip)"#,
        r#"flow and src in [10.0.0.0/8, 192.168.1.1, ::1, fe80::/10] and (orig_bytes + resp_bytes) * 2 % 7 > -1"#,
        r#"flow and duration > 5s and dst != 10.0.0.1"#,
        r#"syslog and msg =~ "from (?P<src>\S+)" and src in 10.0.0.0/8"#,
    ] {
        let text = format!(
            "[[rule]]\nname = \"r\"\nseverity = \"low\"\nevents.a = '{cond}'\npattern = \"a\"\n"
        );
        let c = compile_str("t.toml", &text);
        assert!(c.rules.is_some(), "{cond}: {:#?}", errors(&c));
    }
}

fn one_error(text: &str) -> (String, usize, usize, Option<String>) {
    let c = compile_str("t.toml", text);
    let errs: Vec<_> = c
        .diagnostics
        .iter()
        .filter(|d| d.severity == Level::Error)
        .collect();
    assert_eq!(errs.len(), 1, "{:#?}", errors(&c));
    (
        errs[0].message.clone(),
        errs[0].line,
        errs[0].column,
        errs[0].help.clone(),
    )
}

#[test]
fn wrong_source_field_is_named() {
    let (m, line, col, _) = one_error(
        "[[rule]]\nname = \"r\"\nseverity = \"low\"\nevents.a = 'syslog and dport == 22'\npattern = \"a\"\n",
    );
    assert_eq!(
        m,
        "unknown field `dport` for syslog events; flow events have it"
    );
    assert_eq!((line, col), (4, 24));
}

#[test]
fn errors_inside_basic_strings_map_through_escapes() {
    let (m, line, col, help) = one_error(
        "[[rule]]\nname = \"r\"\nseverity = \"low\"\nevents.a = \"syslog and app == \\\"x\\\" and hots == \\\"y\\\"\"\npattern = \"a\"\n",
    );
    assert_eq!(m, "unknown field `hots`");
    assert_eq!(help.as_deref(), Some("did you mean `host`?"));
    assert_eq!((line, col), (4, 41));
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    const SHIPPED: &[&str] = &[
        include_str!("../../rules/heartbeat.toml"),
        include_str!("../../rules/ssh.toml"),
        include_str!("../../rules/scan.toml"),
        include_str!("../../rules/silent-agent.toml"),
        DESIGN_EXAMPLES,
    ];

    fn atom() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(r#"app == "sshd""#.to_string()),
            Just("severity <= 3".to_string()),
            Just(r#"msg contains "x""#.to_string()),
            Just(r#"msg =~ "from (?P<src>\S+)""#.to_string()),
            Just(r#"msg =~ "user (?P<user>\w+)""#.to_string()),
            Just("src in 10.0.0.0/8".to_string()),
            Just("dport == 22".to_string()),
            Just("orig_bytes + resp_bytes > 1000".to_string()),
            Just(r#"kind in ["flow_start", "attempt_failed"]"#.to_string()),
            Just("exists(sd.origin.ip)".to_string()),
            Just("peer in [::1, 10.0.0.0/8]".to_string()),
            Just("duration > 5s".to_string()),
            Just(r#"host == 3"#.to_string()),
            Just("hots == 1".to_string()),
        ]
    }

    fn cond() -> impl Strategy<Value = String> {
        let leaf = atom();
        let tree = leaf.prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} and {b}")),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} or {b})")),
                inner.prop_map(|a| format!("not ({a})")),
            ]
        });
        (
            prop_oneof![Just(""), Just("syslog and "), Just("flow and ")],
            tree,
        )
            .prop_map(|(s, t)| format!("{s}{t}"))
    }

    fn pattern() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("a".to_string()),
            Just("seq(a, b) within 5m".to_string()),
            Just("a{3,} within 1m".to_string()),
            Just("a{2,4} distinct(src) within 1m".to_string()),
            Just("seq(a, absent(b) for 1m)".to_string()),
            Just("absent(or(a, b)) for 30s".to_string()),
            Just("or(a, and(a, b)) within 1m..2m".to_string()),
            Just("seq(a+, b, absent(a), b) within 10m".to_string()),
            Just("seq(a, c)".to_string()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let text = String::from_utf8_lossy(&bytes);
            let _ = compile_str("fuzz.toml", &text);
        }

        #[test]
        fn expression_soup_never_panics(words in proptest::collection::vec(prop_oneof![
            Just("syslog"), Just("flow"), Just("and"), Just("or"), Just("not"), Just("("), Just(")"),
            Just("["), Just("]"), Just(","), Just("=="), Just("<="), Just("=~"), Just("!~"), Just("in"),
            Just("app"), Just("src"), Just("sd.a@1.b"), Just("\"x\""), Just("\"(?P<src>\\S+\""), Just("22"),
            Just("1.5"), Just("5m"), Just("10.0.0.0/8"), Just("::1"), Just("fe80::/10"), Just("-"), Just("+"),
            Just("*"), Just("%"), Just("exists"), Just("contains"), Just("seq"), Just("absent"), Just("within"),
            Just("for"), Just("{"), Just("}"), Just("distinct"), Just("a"), Just("b"), Just("..") , Just("é"),
        ], 0..25)) {
            let text = words.join(" ");
            let _ = cepheus_core::rules::syntax::parse_cond(&text);
            let _ = cepheus_core::rules::syntax::parse_pattern(&text);
            let t = text.replace('\'', "");
            let rule = format!(
                "[[rule]]\nname = \"r\"\nseverity = \"low\"\ngroup_by = [\"src\"]\nevents.a = '{t}'\nevents.b = 'flow'\npattern = '{t}'\nmessage = '{t}'\n"
            );
            let _ = compile_str("soup.toml", &rule);
        }

        #[test]
        fn mutations_never_panic(
            which in 0..SHIPPED.len(),
            edits in proptest::collection::vec((any::<usize>(), 0u8..3, any::<char>()), 1..6),
        ) {
            let mut chars: Vec<char> = SHIPPED[which].chars().collect();
            for (at, op, c) in edits {
                if chars.is_empty() { break; }
                let at = at % chars.len();
                match op {
                    0 => { chars.remove(at); }
                    1 => chars.insert(at, c),
                    _ => chars[at] = c,
                }
            }
            let text: String = chars.into_iter().collect();
            let c = compile_str("fuzz.toml", &text);
            for d in &c.diagnostics {
                prop_assert!(d.span.start <= d.span.end && d.span.end <= text.len() + 1, "{d:?}");
                prop_assert!(d.line >= 1 && d.column >= 1);
            }
        }

        #[test]
        fn accepted_rules_compile(a in cond(), b in cond(), p in pattern(), g in prop_oneof![Just(""), Just("group_by = [\"src\"]\n")]) {
            let text = format!(
                "[[rule]]\nname = \"r\"\nseverity = \"info\"\n{g}events.a = '{a}'\nevents.b = '{b}'\npattern = \"{p}\"\n"
            );
            let c = compile_str("gen.toml", &text);
            let errors = c.errors();
            prop_assert_eq!(c.rules.is_some(), errors == 0);
            if let Some(rs) = c.rules {
                prop_assert_eq!(rs.rules.len(), 1);
                let r = &rs.rules[0];
                prop_assert_eq!(r.events.len(), 2);
                for e in &r.events {
                    prop_assert_eq!(e.group_fields.len(), r.group_by.len());
                    let _ = e.cond.canonical();
                }
                let _ = r.canonical();
            } else {
                // a rejected rule says why, with a location inside the file
                prop_assert!(c.diagnostics.iter().any(|d| d.is_error() && d.span.end <= text.len()));
            }
        }
    }
}

/// The field table of docs/rules.md, generated from the registry.
fn field_table() -> String {
    let mut s = String::from("| field | type | sources | meaning |\n|---|---|---|---|\n");
    for f in Field::ALL {
        let srcs: Vec<&str> = f.sources().iter().map(|s| s.name()).collect();
        s.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            f.name(),
            f.ty(),
            srcs.join(", "),
            f.doc().replace('|', "\\|")
        ));
    }
    s.push_str("| `sd.<id>.<param>` | string | syslog | RFC 5424 structured data, e.g. `sd.origin.ip`; SD-IDs may contain `@`; a parameter written more than once (`[origin ip=\"a\" ip=\"b\"]`, which RFC 5424 allows) keeps every value, in order and each once, joined by `,` (`a,b`); structured data that is not RFC 5424's (values without quotes, as ESXi writes `[Originator@6876 sub=Vimsvc opID=x]`) gives no field and stays at the start of `msg`, as rsyslog and syslog-ng keep it; where one element of several is such, all the structured data stays at the start of `msg` (the well-formed elements still give their fields); at most 64 distinct parameters of a message become fields, the first written (an SD bomb of thousands would each be held in every partial match and alert) |\n");
    s
}

#[test]
fn docs_field_table_is_current() {
    let docs = include_str!("../../docs/rules.md");
    let table = field_table();
    assert!(
        docs.contains(&table),
        "docs/rules.md is out of date; its field table must read:\n\n{table}"
    );
    for key in cepheus_core::rules::rule_keys() {
        assert!(
            docs.contains(&format!("`{key}`")),
            "docs/rules.md does not document `{key}`"
        );
    }
}

fn rule_text(body: &str) -> String {
    format!("[[rule]]\nname = \"r\"\nseverity = \"low\"\n{body}\n")
}

fn messages(c: &Compiled) -> Vec<(Level, String)> {
    c.diagnostics
        .iter()
        .map(|d| (d.severity, d.message.clone()))
        .collect()
}

/// The messages of a compile at `level`, in order.
fn messages_at(c: &Compiled, level: Level) -> Vec<String> {
    messages(c)
        .into_iter()
        .filter(|(l, _)| *l == level)
        .map(|(_, m)| m)
        .collect()
}

/// The error messages of a compile, in order.
fn error_messages(c: &Compiled) -> Vec<String> {
    messages_at(c, Level::Error)
}

#[test]
fn all_errors_of_a_file_in_one_pass() {
    let text = "[[rule]]\nname = \"a\"\nseverity = \"hi\"\nevents.x = 'syslog and dport == 1'\npattern = \"seq(x, y)\"\n\
                [[rule]]\nname = \"b\"\nseverity = \"low\"\nbogus = 1\nevents.x = 'flow and app == \"a\" and host == 3'\npattern = \"x{0}\"\n";
    let c = compile_str("t.toml", text);
    assert!(c.rules.is_none());
    let m: Vec<String> = messages(&c).into_iter().map(|(_, m)| m).collect();
    assert_eq!(
        m,
        vec![
            "unknown severity `hi`",
            "unknown field `dport` for syslog events; flow events have it",
            "unknown event `y`",
            "unknown key `bogus` in a rule",
            "unknown field `app` for flow events; syslog events have it",
            "unknown field `host` for flow events; syslog events have it",
            "a count must be at least 1",
        ]
    );
    // sorted by position in the file
    let lines: Vec<usize> = c.diagnostics.iter().map(|d| d.line).collect();
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted);
}

#[test]
fn captures_are_typed_and_usable() {
    let c = compile_str(
        "t.toml",
        &rule_text(
            "group_by = [\"src\", \"user\"]\nmessage = \"{user} from {src}\"\n\
             events.a = 'syslog and msg =~ \"user (?P<user>\\w+) from (?P<src>\\S+)\" and src in 10.0.0.0/8 and user != \"root\"'\n\
             pattern = \"a{3,} distinct(user) within 1m\"",
        ),
    );
    assert_eq!(c.errors(), 0, "{:?}", messages(&c));
    let r = &c.rules.unwrap().rules[0];
    assert_eq!(
        r.events[0].group_fields,
        vec![FieldKey::Known(Field::Src), FieldKey::from_name("user")]
    );
    // a capture is not a string when named like an IP field
    let c = compile_str(
        "t.toml",
        &rule_text(
            "events.a = 'syslog and msg =~ \"(?P<src>\\S+)\" and src contains \"x\"'\npattern = \"a\"",
        ),
    );
    assert_eq!(
        messages(&c)[0].1,
        "string test on `src` which is an IP address"
    );
    // a capture under `not` is not a field
    let c = compile_str(
        "t.toml",
        &rule_text(
            "group_by = [\"u\"]\nevents.a = 'syslog and not (msg =~ \"(?P<u>\\S+)\")'\npattern = \"a\"",
        ),
    );
    assert_eq!(
        messages(&c)[0].1,
        "event `a` cannot provide group field `u`"
    );
}

/// A group name mapped to a field the event lacks says why: another source's field (as the
/// condition checker says it), or the fields there are; a near name is suggested.
#[test]
fn a_group_name_mapped_to_a_missing_field_has_a_hint() {
    // The one diagnostic of a rule grouping by `ip`, mapped to `field` of the event `cond`.
    let mapped = |cond: &str, field: &str| {
        let c = compile_str(
            "t.toml",
            &rule_text(&format!(
                "group_by = [\"ip\"]\nevents.a = {{ if = '{cond}', ip = \"{field}\" }}\npattern = \"a\""
            )),
        );
        assert_eq!(c.diagnostics.len(), 1, "{:?}", c.diagnostics);
        let d = &c.diagnostics[0];
        assert_eq!(d.message, format!("event `a` has no field `{field}`"));
        d.help.clone().unwrap_or_default()
    };
    let syslog = "syslog and app == \"x\"";
    assert_eq!(
        mapped(syslog, "src"),
        "syslog events have no `src`; flow events have it (the condition pins syslog)"
    );
    // Structured data is syslog's: a flow event is not told it has some.
    assert_eq!(
        mapped("flow and dport == 22", "sd.origin.ip"),
        "structured data (sd.*) is carried by syslog events only"
    );
    let help = mapped(syslog, "nosuch");
    assert!(
        help.starts_with("its fields are: ") && help.contains("peer"),
        "{help}"
    );
    assert_eq!(mapped(syslog, "pear"), "did you mean `peer`?");
}

#[test]
fn a_misspelt_group_by_name_is_said_once_where_it_is_written() {
    let c = compile_str(
        "t.toml",
        &rule_text(
            "group_by = [\"hots\"]\nevents.a = 'syslog'\nevents.b = 'syslog and app == \"x\"'\npattern = \"seq(a, b) within 1m\"",
        ),
    );
    let d = &c.diagnostics;
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(
        d[0].message,
        "`hots` in `group_by` is not a field of event `a`"
    );
    assert_eq!(d[0].help.as_deref(), Some("did you mean `host`?"));
    assert_eq!(d[0].line, 4);
    // When another event has the field, the typo is the event's (its capture), not group_by's.
    let c = compile_str(
        "t.toml",
        &rule_text(
            "group_by = [\"user\"]\nevents.login = 'syslog and msg =~ \"for (?P<user>\\w+)\"'\nevents.sudo = 'syslog and msg =~ \"sudo: (?P<usr>\\w+) :\"'\npattern = \"seq(login, sudo) within 1m\"",
        ),
    );
    let d = &c.diagnostics;
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(
        d[0].message,
        "event `sudo` cannot provide group field `user`"
    );
    assert_eq!(d[0].line, 6);
}

#[test]
fn group_fields_must_agree_in_type() {
    let c = compile_str(
        "t.toml",
        &rule_text(
            "group_by = [\"k\"]\nevents.a = { if = 'flow', k = \"src\" }\nevents.b = { if = 'syslog', k = \"host\" }\npattern = \"seq(a, b) within 1m\"",
        ),
    );
    assert_eq!(
        messages(&c),
        vec![(
            Level::Error,
            "group field `k` is an IP address in event `a` but a string in event `b`".to_string()
        )]
    );
}

#[test]
fn settings_compile() {
    let c = compile_str(
        "t.toml",
        &rule_text(
            "group_by = [\"src\", \"dport\"]\nexpect = [\"10.0.0.1,22\", \" ::1 , 443\"]\ntime = \"event\"\nmax_delay = \"10s\"\n\
             allowed_lateness = \"1m\"\ntrigger = {}\nforget_after = \"1d\"\nmax_groups = 1000\nmax_partial_matches = 50\n\
             events.a = 'flow and dport in [22, 443]'\npattern = \"absent(a) for 5m\"",
        ),
    );
    assert_eq!(c.diagnostics.len(), 0, "{:?}", messages(&c));
    let r = &c.rules.unwrap().rules[0];
    assert_eq!(
        r.expect,
        vec![
            vec![Value::Ip("10.0.0.1".parse().unwrap()), Value::Int(22)],
            vec![Value::Ip("::1".parse().unwrap()), Value::Int(443)],
        ]
    );
    assert_eq!(r.time, cepheus_core::rules::ir::TimeMode::Event);
    assert_eq!(r.max_delay, Duration::from_secs(10));
    assert_eq!(r.allowed_lateness, Duration::from_secs(60));
    assert_eq!(r.trigger, Trigger::Every(None));
    assert_eq!(r.forget_after, Duration::from_secs(86_400));
    assert_eq!(
        (r.max_groups, r.max_partial_matches),
        (Some(1000), Some(50))
    );
    let c = compile_str(
        "t.toml",
        &rule_text(
            "trigger = { every = \"1m\" }\nmax_delay = \"1s\"\nevents.a = 'syslog'\npattern = \"a\"",
        ),
    );
    assert_eq!(
        messages(&c),
        vec![(
            Level::Warning,
            "`max_delay` has no effect with processing time".to_string()
        )]
    );
    let r = &c.rules.unwrap().rules[0];
    assert_eq!(r.trigger, Trigger::Every(Some(Duration::from_secs(60))));
}

#[test]
fn message_templates() {
    use cepheus_core::rules::ir::TemplatePart;
    let c = compile_str(
        "t.toml",
        &rule_text(
            "group_by = [\"host\"]\nmessage = \"{{x}} {host} said {msg}\"\nevents.a = 'syslog'\npattern = \"a\"",
        ),
    );
    assert_eq!(c.diagnostics.len(), 0, "{:?}", messages(&c));
    let r = &c.rules.unwrap().rules[0];
    assert_eq!(
        r.message,
        Some(vec![
            TemplatePart::Text("{x} ".into()),
            TemplatePart::Field(FieldKey::Known(Field::Host)),
            TemplatePart::Text(" said ".into()),
            TemplatePart::Field(FieldKey::Known(Field::Msg)),
        ])
    );
    let c = compile_str(
        "t.toml",
        &rule_text("message = \"oops {host\"\nevents.a = 'syslog'\npattern = \"a\""),
    );
    assert_eq!(messages(&c)[0].1, "unclosed `{` in message");
}

#[test]
fn absence_placement() {
    let ok = [
        "absent(a) for 1m",
        "seq(b, absent(a), b) within 5m",
        "seq(b, absent(a), b)",
        "seq(absent(a) for 1m, b)",
        "seq(b, absent(or(a, b)) for 1m)",
        "seq(b, absent(a)) within 1m",
    ];
    for p in ok {
        let c = compile_str(
            "t.toml",
            &rule_text(&format!(
                "events.a = 'syslog'\nevents.b = 'flow'\npattern = \"{p}\""
            )),
        );
        assert_eq!(c.errors(), 0, "{p}: {:?}", messages(&c));
    }
    let bad = [
        (
            "absent(a)",
            "`absent(..)` here needs a time: how long must it be absent?",
        ),
        (
            "seq(absent(a), b)",
            "`absent(..)` here needs a time: how long must it be absent?",
        ),
        (
            "or(absent(a) for 1m, b)",
            "`absent(..)` cannot be inside `or(..)` or `and(..)`",
        ),
        (
            "absent(seq(a, b)) for 1m",
            "`absent(..)` takes an event name or `or(..)` of event names",
        ),
        (
            "seq(a, b within 1m)",
            "`within` applies to the whole pattern only",
        ),
        ("a within 0s", "`within` needs a duration above zero"),
    ];
    for (p, want) in bad {
        let c = compile_str(
            "t.toml",
            &rule_text(&format!(
                "events.a = 'syslog'\nevents.b = 'flow'\npattern = \"{p}\""
            )),
        );
        let m = messages(&c);
        assert!(
            m.iter().any(|(l, msg)| *l == Level::Error && msg == want),
            "{p}: {m:?}"
        );
    }
}

/// A group field mapped to an address field's network (`src/64`, `src/24,64`): the group
/// field reads the network, named in its shortest form; `expect` names a network by any
/// address of it; a non-address field, a length past the family's bits, and events that
/// read one group field in different ways are refused where they are written.
#[test]
fn a_group_field_may_read_an_address_as_its_network() {
    use cepheus_core::event::{Field, FieldKey};
    use cepheus_core::rules::ir::GroupField;
    let c = compile_str(
        "t.toml",
        &rule_text(
            "group_by = [\"net\"]\nevents.a = { if = 'flow', net = \"src/32,64\" }\nevents.b = { if = 'syslog', net = \"peer/64\" }\npattern = \"absent(or(a, b)) for 1m\"\nexpect = [\"2001:db8:1:2::99\", \"10.0.0.7\", \"2001:db8:1:2::1\"]",
        ),
    );
    // ("listed twice": the first and the last are one /64.)
    assert_eq!(
        messages(&c),
        vec![(
            Level::Warning,
            "`2001:db8:1:2::1` is listed twice".to_string()
        )]
    );
    let rules = c.rules.unwrap();
    let r = &rules.rules[0];
    assert_eq!(r.events[0].group_fields[0].name(), "src/64");
    assert_eq!(
        r.events[1].group_fields[0],
        GroupField::network(FieldKey::Known(Field::Peer), 32, 64)
    );
    let ip = |t: &str| Value::ip(t.parse().unwrap());
    assert_eq!(
        r.expect,
        vec![vec![ip("10.0.0.7")], vec![ip("2001:db8:1:2::")]]
    );
    let refused = |body: &str| error_messages(&compile_str("t.toml", &rule_text(body)));
    assert_eq!(
        refused(
            "group_by = [\"n\"]\nevents.a = { if = 'flow', n = \"dport/24\" }\npattern = \"a\""
        ),
        [
            "event `a` reads group field `n` as a network of `dport`, which is an integer, not an IP address"
        ]
    );
    assert_eq!(
        refused(
            "group_by = [\"n\"]\nevents.a = { if = 'flow', n = \"src/33,64\" }\npattern = \"a\""
        ),
        [
            "event `a` maps group field `n` to `src/33,64`: `33` is not a network length (a number of bits, 0 to 32)"
        ]
    );
    assert_eq!(
        refused("group_by = [\"n\"]\nevents.a = { if = 'flow', n = \"src/x1\" }\npattern = \"a\""),
        [
            "event `a` maps group field `n` to `src/x1`: `x1` is not a network length (a number of bits, 0 to 128)"
        ]
    );
    assert_eq!(
        refused(
            "group_by = [\"n\"]\nevents.a = { if = 'flow', n = \"src/64\" }\nevents.b = { if = 'flow', n = \"dst/48\" }\nevents.c = { if = 'flow', n = \"dst\" }\npattern = \"seq(a, b, c) within 1m\""
        ),
        [
            "group field `n` is read as a /64 network in event `a` but as a /48 network in event `b`",
            "group field `n` is read as a /64 network in event `a` but as an address in event `c`",
        ]
    );
}

/// `absent(x{n,}) for D` (fewer than n in any D) is the whole pattern, with a least count
/// from 1 to the cap; anywhere else, with a greatest count or `distinct`, it is refused where
/// it is written; `absent(x{1,})` is `absent(x)`.
#[test]
fn an_absence_of_a_count_stands_alone() {
    use cepheus_core::rules::ir::Pattern;
    let with = |pattern: &str| {
        compile_str(
            "t.toml",
            &rule_text(&format!(
                "events.a = 'syslog and app == \"a\"'\nevents.b = 'syslog and app == \"b\"'\npattern = \"{pattern}\""
            )),
        )
    };
    let c = with("absent(or(a, b){3,}) for 5m");
    assert_eq!(error_messages(&c), Vec::<String>::new());
    let rules = c.rules.unwrap();
    assert!(matches!(
        &rules.rules[0].pattern,
        Pattern::Absent { inner, .. } if matches!(&**inner, Pattern::Repeat { min: 3, max: None, .. })
    ));
    let c = with("absent(a{1,}) for 5m");
    assert!(matches!(
        &c.rules.unwrap().rules[0].pattern,
        Pattern::Absent { inner, .. } if matches!(&**inner, Pattern::Event(_))
    ));
    let alone = "`absent(..)` of a count stands alone as the whole pattern, with a least count only (`{n,}`: no greatest count, no `distinct`)";
    assert_eq!(
        error_messages(&with("seq(b, absent(a{2,}) for 1m)")),
        [alone]
    );
    assert_eq!(error_messages(&with("absent(a{2,5}) for 1m")), [alone]);
    assert_eq!(
        error_messages(&with("absent(a{1001,}) for 1m")),
        ["`absent(..)` of a count needs a least count from 1 to 1000"]
    );
}

#[test]
fn expect_files_are_read_relative_to_the_rule_file() {
    let src = [SourceFile {
        path: "etc/rules/hb.toml".into(),
        text: rule_text(
            "group_by = [\"host\"]\nexpect = { file = \"lists/hosts.txt\" }\nevents.hb = 'syslog'\npattern = \"absent(hb) for 1m\"",
        ),
    }];
    let mut asked = Vec::new();
    let c = compile(&src, &mut |p| {
        asked.push(p.to_path_buf());
        Ok("  a  \n# c\n\nb\na\n".into())
    });
    assert_eq!(
        asked,
        vec![std::path::PathBuf::from("etc/rules/lists/hosts.txt")]
    );
    assert_eq!(
        messages(&c),
        vec![(Level::Warning, "`a` is listed twice".to_string())]
    );
    let d = &c.diagnostics[0];
    assert_eq!(
        (d.path.to_str(), d.line, d.column),
        (Some("etc/rules/lists/hosts.txt"), 5, 1)
    );
    assert_eq!(
        c.rules.unwrap().rules[0].expect,
        vec![vec![Value::str("a")], vec![Value::str("b")]]
    );
    let c = compile(&src, &mut |_| {
        Err(std::io::Error::new(std::io::ErrorKind::NotFound, "gone"))
    });
    assert!(
        messages(&c)[0]
            .1
            .starts_with("cannot read expect file `etc/rules/lists/hosts.txt`")
    );
}

/// Compiles `text` (at `etc/rules/r.toml`) whose list files are `files` (path, text), and
/// the paths asked for, in order.
fn with_lists(text: &str, files: &[(&str, &str)]) -> (Compiled, Vec<String>) {
    let src = [SourceFile {
        path: "etc/rules/r.toml".into(),
        text: text.to_string(),
    }];
    let mut asked = Vec::new();
    let c = compile(&src, &mut |p| {
        asked.push(p.display().to_string());
        files
            .iter()
            .find(|(f, _)| std::path::Path::new(f) == p)
            .map(|(_, t)| t.to_string())
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "gone"))
    });
    (c, asked)
}

/// `lhs in file("...")` tests a list file's items, read as the tested field's type from the
/// rule file's folder, once however many conditions name it: addresses and networks (an
/// IPv4 address in an IPv6 network that holds its mapped form, as `in [...]` reads it),
/// texts (a regex's capture too) and numbers; comments and blank lines skipped.
#[test]
fn list_files_hold_addresses_networks_texts_and_numbers() {
    use cepheus_core::event::Event;
    use cepheus_core::rules::ir::Captures;
    use cepheus_core::time::Timestamp;
    let text = [
        rule_text("events.a = 'flow and src in file(\"lists/bad.txt\")'\npattern = \"a\"")
            .replace("\"r\"", "\"r1\""),
        rule_text("events.a = 'flow and dport in file(\"ports.txt\") and not (dst in file(\"lists/bad.txt\"))'\npattern = \"a\"")
            .replace("\"r\"", "\"r2\""),
        rule_text("events.a = 'syslog and msg =~ \"for (?P<user>\\S+)\" and user in file(\"/etc/cepheus/users.txt\")'\npattern = \"a\"")
            .replace("\"r\"", "\"r3\""),
    ]
    .concat();
    let bad = "# a feed\n10.0.0.0/8\n\n192.0.2.7  # a scanner\n2001:db8::/32\n  ::ffff:198.51.100.0/120\n10.0.0.0/8\n";
    let (c, asked) = with_lists(
        &text,
        &[
            ("etc/rules/lists/bad.txt", bad),
            ("etc/rules/ports.txt", "22\n2222 # alt\n"),
            ("/etc/cepheus/users.txt", "\u{feff}root\nadmin#1\n"),
        ],
    );
    assert_eq!(messages(&c), vec![], "{:?}", errors(&c));
    assert_eq!(
        asked,
        [
            "etc/rules/lists/bad.txt",
            "etc/rules/ports.txt",
            "/etc/cepheus/users.txt"
        ],
        "each list read once, relative to the rule file's folder unless absolute"
    );
    let rs = c.rules.unwrap();
    let flow = |src: &str, dst: &str, dport: i64| {
        Event::new(Source::Flow, Timestamp(0), Timestamp(0))
            .with(Field::Src, Value::Ip(src.parse().unwrap()))
            .with(Field::Dst, Value::Ip(dst.parse().unwrap()))
            .with(Field::Dport, Value::Int(dport))
    };
    let holds = |r: usize, ev: &Event| rs.rules[r].events[0].cond.eval(ev, &mut Captures::new());
    for (src, inside) in [
        ("10.200.1.1", true),
        ("11.0.0.1", false),
        ("192.0.2.7", true),
        ("192.0.2.8", false),
        ("2001:db8::42", true),
        ("2001:db9::1", false),
        ("::ffff:10.1.2.3", true),
        ("198.51.100.77", true),
        ("198.51.101.1", false),
    ] {
        assert_eq!(holds(0, &flow(src, "1.1.1.1", 22)), inside, "{src}");
    }
    assert!(holds(1, &flow("1.1.1.1", "8.8.8.8", 2222)));
    assert!(!holds(1, &flow("1.1.1.1", "8.8.8.8", 80)));
    assert!(!holds(1, &flow("1.1.1.1", "10.0.0.1", 22)));
    let login = |user: &str| {
        Event::new(Source::Syslog, Timestamp(0), Timestamp(0)).with(
            Field::Msg,
            Value::str(&format!("Accepted password for {user} from x")),
        )
    };
    assert!(holds(2, &login("root")));
    assert!(
        holds(2, &login("admin#1")),
        "a `#` inside an item is no comment"
    );
    assert!(!holds(2, &login("bob")));
    // `./lists/bad.txt` is `lists/bad.txt`: read once, one canonical text.
    let both = [
        rule_text("events.a = 'flow and src in file(\"./lists/bad.txt\")'\npattern = \"a\""),
        rule_text("events.a = 'flow and src in file(\"lists/bad.txt\")'\npattern = \"a\"")
            .replace("\"r\"", "\"r2\""),
    ]
    .concat();
    let (c2, asked2) = with_lists(
        &both,
        &[("etc/rules/lists/bad.txt", "10.0.0.0/24\n10.0.1.0/24\n")],
    );
    assert_eq!(asked2, ["etc/rules/lists/bad.txt"]);
    let rs2 = c2.rules.unwrap();
    let files = rs2.list_files();
    assert_eq!(files.len(), 1);
    assert_eq!(
        files[0].len(),
        2,
        "networks counted as written, not as merged"
    );
    assert_eq!(
        rs2.rules[0].events[0].cond.canonical(),
        rs2.rules[1].events[0].cond.canonical()
    );
    // The canonical text names the file, not its items: a reload that changes only the list
    // keeps the rules' state, and a feed of thousands makes no text of thousands.
    assert_eq!(
        rs.rules[0].events[0].cond.canonical(),
        "(flow and src in file(\"etc/rules/lists/bad.txt\"))"
    );
}

/// A list file's bad lines are errors at their own place (at most 20 of them, then a count),
/// a network with host bits set one warning for them all; a list for a type no file holds,
/// a missing file, two files in one test and `file` as a value are errors at the rule; an
/// empty list is warned of.
#[test]
fn a_list_files_mistakes_are_said_where_they_are() {
    let one = |cond: &str, files: &[(&str, &str)]| {
        with_lists(
            &rule_text(&format!("events.a = '{cond}'\npattern = \"a\"")),
            files,
        )
        .0
    };
    let c = one(
        "flow and src in file(\"bad.txt\")",
        &[(
            "etc/rules/bad.txt",
            "10.0.0.1\n10.1.2.3/16\nweb-1\n10.9.9.9/8\n",
        )],
    );
    assert_eq!(
        errors(&c),
        [
            "etc/rules/bad.txt:2:1 warning: `10.1.2.3/16` has host bits set: it is read as the network `10.1.0.0/16` (and 1 more lines like it)",
            "etc/rules/bad.txt:3:1 error: `web-1` is not an IP address or network; this list is for `src` (an IP address)",
        ]
    );
    assert!(c.rules.is_none());
    let many: String = (0..25).map(|i| format!("x{i}\n")).collect();
    let c = one(
        "flow and dport in file(\"p.txt\")",
        &[("etc/rules/p.txt", &many)],
    );
    let e = errors(&c);
    assert_eq!(e.len(), 21, "{e:?}");
    assert!(
        e[0].starts_with("etc/rules/p.txt:1:1 error: `x0` is not a whole number"),
        "{e:?}"
    );
    assert!(e[20].ends_with("error: 5 more lines like these"), "{e:?}");
    // Mistakes at the rule: one error each, said there.
    let files = [
        ("etc/rules/a.txt", "a\n"),
        ("etc/rules/b.txt", "b\n"),
        ("etc/rules/d.txt", "1s\n"),
    ];
    for (cond, want) in [
        (
            "flow and duration in file(\"d.txt\")",
            "a list file holds texts, whole numbers or IP addresses; `duration` is a duration",
        ),
        (
            "syslog and host in file(\"gone.txt\")",
            "cannot read list file `etc/rules/gone.txt`: gone",
        ),
        (
            "syslog and host in [file(\"a.txt\"), file(\"b.txt\")]",
            "`file(...)` stands alone after `in`: one list file per test",
        ),
        (
            "syslog and host in [file(\"a.txt\")]",
            "`file(...)` stands alone after `in`: one list file per test",
        ),
        (
            "syslog and host == file(\"a.txt\")",
            "`file(...)` is a list of values, for `in`",
        ),
    ] {
        assert_eq!(error_messages(&one(cond, &files)), [want], "{cond}");
    }
    let c = one(
        "syslog and host in file(\"e.txt\")",
        &[("etc/rules/e.txt", "\n  \n")],
    );
    assert_eq!(
        messages(&c),
        [(
            Level::Warning,
            "list file `etc/rules/e.txt` lists nothing: this test is never true".to_string()
        )]
    );
    assert!(c.rules.is_some());
    // One holding only comments was left empty on purpose (an allowlist to fill in).
    let c = one(
        "syslog and not (host in file(\"e.txt\"))",
        &[("etc/rules/e.txt", "# none yet\n\n")],
    );
    assert_eq!(messages(&c), []);
    // Items a field never takes: one warning for the file, at the first.
    let c = one(
        "flow and dport in file(\"p.txt\")",
        &[("etc/rules/p.txt", "22\n70000\n-1\n")],
    );
    assert_eq!(
        errors(&c),
        [
            "etc/rules/p.txt:2:1 warning: `dport` never takes the value `70000`: this item never matches (and 1 more lines like it)"
        ]
    );
    // A byte-order mark is no column of the first line.
    let c = one(
        "flow and dport in file(\"p.txt\")",
        &[("etc/rules/p.txt", "\u{feff}x\n")],
    );
    assert!(
        errors(&c)[0].starts_with("etc/rules/p.txt:1:1 error: `x` is not"),
        "{:?}",
        errors(&c)
    );
    // A file of millions of lines is refused before its lines are read.
    let blank = "\n".repeat(2_000_001);
    let c = one(
        "syslog and host in file(\"big.txt\")",
        &[("etc/rules/big.txt", &blank)],
    );
    assert_eq!(
        error_messages(&c),
        ["list file `etc/rules/big.txt` has 2000001 lines: at most 2000000 are read"]
    );
    // A list with errors, named by two rules: its lines are reported once, and the second
    // rule says where to look.
    let text = [
        rule_text("events.a = 'syslog and host in file(\"h.txt\")'\npattern = \"a\""),
        rule_text(
            "events.a = 'syslog and app == \"x\" and host in file(\"h.txt\")'\npattern = \"a\"",
        )
        .replace("\"r\"", "\"r2\""),
    ]
    .concat();
    let (c, asked) = with_lists(&text, &[("etc/rules/h.txt", "ok\n")]);
    assert!(c.rules.is_some(), "{:?}", errors(&c));
    assert_eq!(asked.len(), 1);
    let (c, _) = with_lists(
        &text.replace("host in", "peer in"),
        &[("etc/rules/h.txt", "nope\n")],
    );
    assert_eq!(
        error_messages(&c),
        [
            "list file `etc/rules/h.txt` has errors (reported at its lines)",
            "`nope` is not an IP address or network; this list is for `peer` (an IP address)",
        ]
    );
}

/// A line of an expect file with a comma, for one group field that is not text, is said to
/// have too many values (it was "not a valid IP"); for one text field it is one name.
#[test]
fn an_expect_line_with_more_values_than_group_fields_says_so() {
    let src = |group: &str| {
        [SourceFile {
            path: "hb.toml".into(),
            text: rule_text(&format!(
                "group_by = [\"{group}\"]\nexpect = {{ file = \"hosts.txt\" }}\nevents.hb = {{ if = 'syslog', {group} = \"peer\" }}\npattern = \"absent(hb) for 1m\""
            )),
        }]
    };
    let c = compile(&src("ip"), &mut |_| Ok("10.0.0.1,22\n".into()));
    let m = messages(&c);
    assert!(
        m[0].1.contains("has 2 value(s), but group_by has 1"),
        "{m:?}"
    );
    let text = [SourceFile {
        path: "hb.toml".into(),
        text: rule_text(
            "group_by = [\"host\"]\nexpect = { file = \"hosts.txt\" }\nevents.hb = 'syslog'\npattern = \"absent(hb) for 1m\"",
        ),
    }];
    let c = compile(&text, &mut |_| Ok("web-1,22\n".into()));
    assert_eq!(
        c.rules.unwrap().rules[0].expect,
        vec![vec![Value::str("web-1,22")]]
    );
    // A value no event can form a group with (over 1 KiB) is an error, not a group that
    // alerts for ever.
    let long = format!("{}\n", "h".repeat(1025));
    let c = compile(&text, &mut |_| Ok(long.clone()));
    assert!(c.rules.is_none());
    assert!(
        messages(&c)[0].1.contains("is longer than 1024 bytes"),
        "{:?}",
        messages(&c)
    );
}

#[test]
fn duplicate_names_across_files() {
    let a = SourceFile {
        path: "b.toml".into(),
        text: rule_text("events.a = 'syslog'\npattern = \"a\""),
    };
    let b = SourceFile {
        path: "a.toml".into(),
        text: format!("# x\n{}", rule_text("events.a = 'syslog'\npattern = \"a\"")),
    };
    let c = compile(&[a, b], &mut |_| unreachable!());
    assert_eq!(c.errors(), 1);
    let d = &c.diagnostics[0];
    // files are read in path order: the second is b.toml
    assert_eq!(d.path.to_str(), Some("b.toml"));
    assert_eq!(
        d.help.as_deref(),
        Some("first defined at a.toml:3:8; rule names must be unique across files")
    );
}

#[test]
fn diagnostics_render_with_miette() {
    let c = compile_str(
        "t.toml",
        &rule_text("events.a = 'syslog and hots == \"x\"'\npattern = \"a\""),
    );
    let d = &c.diagnostics[0];
    let mut out = String::new();
    miette::NarratableReportHandler::new()
        .render_report(&mut out, d)
        .unwrap();
    assert!(out.contains("t.toml"), "{out}");
    assert!(out.contains("label at line 4, columns 24 to 27"), "{out}");
    assert!(out.contains("did you mean `host`?"), "{out}");
    assert_eq!(d.to_json()["column"], 24);
}

/// A copy of a rule under other names (its own, its event definitions') is said, pointing
/// at the first; a rule that differs in what it matches is not.
#[test]
fn a_rule_meaning_the_same_as_another_warns() {
    let rule = |name: &str, a: &str, b: &str, pattern: &str| {
        format!(
            "[[rule]]\nname = \"{name}\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nevents.{a} = 'syslog and app == \"sshd\"'\nevents.{b} = 'syslog and app == \"cron\"'\npattern = \"{pattern}\"\n"
        )
    };
    let text = [
        rule("first", "x", "y", "seq(x, y) within 5m"),
        rule("copy", "p", "q", "seq(p, q) within 5m"),
        rule("longer", "x", "y", "seq(x, y) within 6m"),
        rule("other-order", "y", "x", "seq(x, y) within 5m"),
    ]
    .concat();
    let c = cepheus_core::rules::compile_str("f.toml", &text);
    assert!(c.rules.is_some(), "a warning, not an error");
    let w: Vec<(&str, usize)> = c
        .diagnostics
        .iter()
        .map(|d| (d.message.as_str(), d.line))
        .collect();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].0.contains("`copy` means the same as rule `first`"),
        "{w:?}"
    );
    assert_eq!(w[0].1, 9, "at the copy's name");
    assert_eq!(c.diagnostics[0].related[0].line, 2, "pointing at the first");
}

#[test]
fn forget_after_shorter_than_the_pattern_warns() {
    let text = "[[rule]]\nname = \"x\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nexpect = [\"a\"]\nforget_after = \"1m\"\nevents.hb = 'syslog and app == \"hb\"'\npattern = \"absent(hb) for 5m\"\n";
    let c = cepheus_core::rules::compile_str("f.toml", text);
    assert!(c.rules.is_some(), "a warning, not an error");
    let w: Vec<&str> = c.diagnostics.iter().map(|d| d.message.as_str()).collect();
    assert!(
        w.iter()
            .any(|m| m.contains("forget_after") && m.contains("5m")),
        "{w:?}"
    );
    assert_eq!(c.diagnostics[0].line, 6);
    let ok = text.replace("\"1m\"", "\"10m\"");
    assert!(
        cepheus_core::rules::compile_str("f.toml", &ok)
            .diagnostics
            .is_empty()
    );
}

#[test]
fn rules_that_never_match_or_triggers_that_limit_nothing_warn() {
    let warnings = |pattern: &str, trigger: &str| -> Vec<String> {
        let text = format!(
            "[[rule]]\nname = \"x\"\nseverity = \"low\"\nevents.a = 'syslog and app == \"a\"'\nevents.b = 'syslog and app == \"b\"'\nevents.c = 'syslog and app == \"c\"'\npattern = \"{pattern}\"\n{trigger}"
        );
        let c = cepheus_core::rules::compile_str("f.toml", &text);
        assert!(
            c.rules.is_some(),
            "warnings, not errors: {:?}",
            c.diagnostics
        );
        c.diagnostics.iter().map(|d| d.message.clone()).collect()
    };
    let never = warnings("seq(a, absent(c) for 10s, b) within 5s", "");
    assert!(
        never.iter().any(|m| m.contains("never matches")),
        "{never:?}"
    );
    let none_of = |w: Vec<String>| {
        w.iter()
            .all(|m| !m.contains("never matches") && !m.contains("limits nothing"))
    };
    assert!(none_of(warnings(
        "seq(a, absent(c) for 5s, b) within 10s",
        ""
    )));
    for trigger in ["trigger = {}", "trigger = { every = \"0s\" }"] {
        let w = warnings("seq(a, b)", trigger);
        assert!(
            w.iter().any(|m| m.contains("limits nothing")),
            "{trigger}: {w:?}"
        );
    }
    assert!(none_of(warnings("seq(a, b) within 5s", "trigger = {}")));
    assert!(none_of(warnings(
        "seq(a, b)",
        "trigger = { every = \"1m\" }"
    )));
    assert!(
        warnings("absent(a) for 1m", "trigger = {}")
            .iter()
            .all(|m| !m.contains("limits nothing"))
    );
    // A trigger with an error (a misspelt key, a bad period) gets the error alone.
    for trigger in [
        "trigger = { evry = \"1m\" }",
        "trigger = { every = \"1x\" }",
    ] {
        let text = format!(
            "[[rule]]\nname = \"x\"\nseverity = \"low\"\nevents.a = 'syslog'\nevents.b = 'syslog'\npattern = \"seq(a, b) within 1m\"\n{trigger}"
        );
        let d = cepheus_core::rules::compile_str("f.toml", &text).diagnostics;
        assert_eq!(d.len(), 1, "{trigger}: {d:?}");
        assert!(!d[0].message.contains("limits nothing"), "{trigger}: {d:?}");
    }
}

#[test]
fn a_pattern_that_pairs_or_counts_events_without_within_is_warned_of() {
    let warnings = |pattern: &str| -> Vec<String> {
        let text = format!(
            "[[rule]]\nname = \"x\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nevents.a = 'syslog and app == \"a\"'\nevents.b = 'syslog and app == \"b\"'\npattern = \"{pattern}\"\n"
        );
        let c = cepheus_core::rules::compile_str("f.toml", &text);
        assert!(c.rules.is_some(), "{pattern}: {:?}", c.diagnostics);
        (c.diagnostics.iter())
            .map(|d| d.message.clone())
            .filter(|m| !m.contains("does not use it"))
            .collect()
    };
    for p in [
        "a{5,}",
        "a+",
        "seq(b, a{2,})",
        "or(a, b){3,}",
        "or(a{5,}, b)",
    ] {
        let w = warnings(p);
        assert!(
            w.len() == 1 && w[0].contains("this count has no window"),
            "{p}: {w:?}"
        );
    }
    // The hint writes the rule's own pattern with a window.
    let text = "[[rule]]\nname = \"x\"\nseverity = \"low\"\nevents.a = 'syslog'\nevents.b = 'syslog'\npattern = \"seq(b, a)\"\n";
    let d = cepheus_core::rules::compile_str("f.toml", text).diagnostics;
    assert_eq!(
        d[0].help.as_deref(),
        Some("add `within` to say how close they must be, e.g. `seq(b, a) within 10m`")
    );
    for p in [
        "seq(a, b)",
        "and(a, b)",
        "seq(a, absent(b) for 5m, a)",
        "or(seq(a, b), a)",
        "seq(a{2,}, b)",
    ] {
        let w = warnings(p);
        assert!(
            w.len() == 1 && w[0].contains("may be any time apart"),
            "{p}: {w:?}"
        );
    }
    // One event, an absence, or a window: nothing to say.
    for p in [
        "a",
        "or(a, b)",
        "seq(a, absent(b) for 2m)",
        "seq(absent(a) for 1m, b)",
        "seq(a, b) within 10m",
        "a{5,} within 1m",
    ] {
        assert_eq!(warnings(p), Vec::<String>::new(), "{p}");
    }
}

#[test]
fn closure_counts_are_bounded() {
    let rule = |n: &str| {
        format!(
            "[[rule]]\nname = \"x\"\nseverity = \"low\"\nevents.a = 'syslog and app == \"a\"'\npattern = \"a{{{n},}} within 1m\"\n"
        )
    };
    assert!(
        cepheus_core::rules::compile_str("f.toml", &rule("100000"))
            .rules
            .is_some()
    );
    let c = cepheus_core::rules::compile_str("f.toml", &rule("4294967295"));
    assert!(c.rules.is_none());
    assert!(
        c.diagnostics[0].message.contains("at most 100000"),
        "{:?}",
        c.diagnostics[0].message
    );
    assert_eq!((c.diagnostics[0].line, c.diagnostics[0].column), (5, 14));
}

/// A condition's canonical text (what `rules graph` prints and sharing compares) writes
/// strings and regexes as the rule file does: backslashes as written, `"` as `\"`; and
/// strings that differ only by those characters stay distinct.
#[test]
fn canonical_conditions_write_strings_as_the_rule_language_does() {
    let text = r#"
[[rule]]
name = "a"
severity = "low"
events.x = 'msg =~ "for (?P<user>\S+) from \d+\n"'
events.y = 'msg contains "say \"hi\" C:\dir"'
events.z = 'msg contains "say \\\"hi\\\" C:\dir"'
pattern = "seq(x, y, z) within 1m"
"#;
    let c = compile_str("q.toml", text);
    let rules = c.rules.unwrap_or_else(|| panic!("{:#?}", c.diagnostics));
    let canon: Vec<String> = rules.rules[0]
        .events
        .iter()
        .map(|e| e.cond.canonical())
        .collect();
    assert_eq!(canon[0], r#"msg =~ "for (?P<user>\S+) from \d+\n""#);
    assert_eq!(canon[1], r#"msg contains "say \"hi\" C:\dir""#);
    assert_ne!(
        canon[1], canon[2],
        "distinct strings, distinct canonical forms"
    );
}

/// DESIGN.md: "the checker rejects a rule where some event cannot provide every `group_by`
/// name" — also when only one alternative of an `or` lacks it (before, such events matched and
/// were dropped without a key).
#[test]
fn every_alternative_of_an_event_must_provide_the_group_fields() {
    let bad = [
        (
            "group_by = [\"host\"]\nevents.a = '(syslog and app == \"x\") or (flow and dport == 22)'",
            "event `a` cannot always provide group field `host`: it can match flow events, which have no `host`",
        ),
        // A field only flows have pins the alternative to flows.
        (
            "group_by = [\"host\"]\nevents.a = 'app == \"x\" or dport == 22'",
            "event `a` cannot always provide group field `host`: it can match flow events, which have no `host`",
        ),
        (
            "group_by = [\"user\"]\nevents.a = 'syslog and (msg =~ \"u=(?P<user>\\w+)\" or app == \"x\")'",
            "event `a` cannot always provide group field `user`: it can match without the capture `(?P<user>...)` (an alternative of its `or`, or a part of its regex under `|`, `?` or `*`)",
        ),
        // A capture in one branch of the regex's `|`, or under `?`, may not take part.
        (
            "group_by = [\"user\"]\nevents.a = 'syslog and msg =~ \"(?P<user>\\w+) x|y\"'",
            "event `a` cannot always provide group field `user`: it can match without the capture `(?P<user>...)` (an alternative of its `or`, or a part of its regex under `|`, `?` or `*`)",
        ),
        (
            "group_by = [\"user\"]\nevents.a = 'syslog and msg =~ \"login (?P<user>\\w+)?\"'",
            "event `a` cannot always provide group field `user`: it can match without the capture `(?P<user>...)` (an alternative of its `or`, or a part of its regex under `|`, `?` or `*`)",
        ),
        // Also when the capture's name is a field of other events (`src`): the capture is
        // what is missing, not the source.
        (
            "group_by = [\"src\"]\nevents.a = 'syslog and msg =~ \"from (?P<src>\\S+)?\"'",
            "event `a` cannot always provide group field `src`: it can match without the capture `(?P<src>...)` (an alternative of its `or`, or a part of its regex under `|`, `?` or `*`)",
        ),
        (
            "group_by = [\"ip\"]\nevents.a = { if = 'dport == 22 or app == \"x\"', ip = \"src\" }",
            "event `a` cannot always provide group field `ip`: it can match syslog events, which have no `src`",
        ),
    ];
    // A negation, or `true`, names no source: flows satisfy it too (a missing field makes a
    // negated test true), and they have no `host`.
    let flows = "event `a` cannot always provide group field `host`: it can match flow events, which have no `host`";
    let bad: Vec<(&str, &str)> = bad
        .into_iter()
        .chain([
            // (`not syslog` says `flow`: it can match nothing else.)
            (
                "group_by = [\"host\"]\nevents.a = 'not syslog'",
                "event `a` cannot provide group field `host`",
            ),
            (
                "group_by = [\"host\"]\nevents.a = 'not (app == \"cron\")'",
                flows,
            ),
            ("group_by = [\"host\"]\nevents.a = 'true'", flows),
            (
                "group_by = [\"host\"]\nevents.a = 'app == \"x\" or not (dport == 1)'",
                flows,
            ),
        ])
        .collect();
    for (body, want) in bad {
        let c = compile_str("t.toml", &rule_text(&format!("{body}\npattern = \"a\"")));
        assert_eq!(
            messages(&c),
            vec![(Level::Error, want.to_string())],
            "{body}"
        );
    }
    let good = [
        "group_by = [\"user\"]\nevents.a = 'syslog and (msg =~ \"u=(?P<user>\\w+)\" or msg =~ \"v=(?P<user>\\w+)\")'",
        "group_by = [\"ip\"]\nevents.a = { if = '(flow and dport == 22) or (flow and dport == 23)', ip = \"src\" }",
        "group_by = [\"host\"]\nevents.a = 'app == \"x\" or msg contains \"y\" or (syslog and not (dport == 1))'",
        "group_by = [\"host\"]\nevents.a = 'not flow and not (app == \"cron\")'",
        // `not not x` is `x`.
        "group_by = [\"host\"]\nevents.a = 'not not (app == \"x\")'",
        "group_by = [\"host\"]\nevents.a = 'not not syslog and not (app == \"x\")'",
        // An alternative that can never match (two sources at once) needs nothing.
        "group_by = [\"host\"]\nevents.a = 'syslog or (dport == 22 and app == \"x\")'",
        "group_by = [\"host\"]\nevents.a = 'syslog and (app == \"x\" or false)'",
    ];
    for body in good {
        let c = compile_str("t.toml", &rule_text(&format!("{body}\npattern = \"a\"")));
        assert_eq!(messages(&c), vec![], "{body}");
    }
}

/// An `expect` list is a set: its order and repeats (warned) do not change the rule's
/// identity, so two rules listing the same hosts in another order share one state; a comment
/// may follow a key in an expect file.
#[test]
fn expect_lists_are_sets() {
    let text = |expect: &str| {
        format!(
            "[[rule]]\nname = \"r\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nexpect = {expect}\nevents.hb = 'syslog and app == \"hb\"'\npattern = \"absent(hb) for 60s\"\n"
        )
    };
    let a = compile_str("a.toml", &text("[\"a\", \"b\"]"));
    let b = compile_str("b.toml", &text("[\"b\", \"a\", \"a\"]"));
    assert_eq!(messages(&a), vec![]);
    assert_eq!(
        messages(&b),
        vec![(Level::Warning, "`a` is listed twice".to_string())]
    );
    let (a, b) = (a.rules.unwrap(), b.rules.unwrap());
    assert_eq!(a.rules[0].canonical(), b.rules[0].canonical());
    let c = with_hosts(
        &text("{ file = \"hosts.txt\" }"),
        "b  # rack 4\na\t# rack 1\n#c\n",
    );
    assert_eq!(messages(&c), vec![]);
    assert_eq!(
        c.rules.unwrap().rules[0].expect,
        vec![vec![Value::str("a")], vec![Value::str("b")]]
    );
}

/// A key of several fields may be a JSON object naming them, so a value may hold a comma
/// (as `groups forget` takes a key); it means the same as the comma-separated form.
#[test]
fn expect_keys_may_name_their_fields_in_json() {
    let text = |expect: &str| {
        format!(
            "[[rule]]\nname = \"r\"\nseverity = \"high\"\ngroup_by = [\"host\", \"severity\"]\nexpect = {expect}\nevents.hb = 'syslog and app == \"hb\"'\npattern = \"absent(hb) for 60s\"\n"
        )
    };
    let c = compile_str(
        "t.toml",
        &text(
            r#"['{"host": "web,1", "severity": 2}', '{"severity": "4", "host": "db"}', "app,5"]"#,
        ),
    );
    assert_eq!(messages(&c), vec![]);
    assert_eq!(
        c.rules.unwrap().rules[0].expect,
        vec![
            vec![Value::str("app"), Value::Int(5)],
            vec![Value::str("db"), Value::Int(4)],
            vec![Value::str("web,1"), Value::Int(2)],
        ]
    );
    for (bad, said) in [
        (
            r#"['{"host": "x"}']"#,
            "has no value for group field `severity`",
        ),
        (
            r#"['{"host": "x", "severity": 1, "app": "y"}']"#,
            "`app` is no group_by field",
        ),
        (
            r#"['{"host": "x", "severity": 9}']"#,
            "`9` is not a valid value for group field `severity`",
        ),
        (
            r#"['{"host": "x", "severity": [1]}']"#,
            "write a string or a number",
        ),
        (
            r#"['{host: x}']"#,
            "is not a JSON object of the group's fields",
        ),
    ] {
        let m = messages(&compile_str("t.toml", &text(bad)));
        assert!(
            m.iter()
                .any(|(l, t)| *l == Level::Error && t.contains(said)),
            "{bad}: {m:?}"
        );
    }
}

#[test]
fn a_network_with_host_bits_set_is_warned_of() {
    let c = compile_str(
        "t.toml",
        &rule_text("events.a = 'flow and src in 10.0.0.1/8'\npattern = \"a\""),
    );
    assert!(c.rules.is_some());
    let d = &c.diagnostics;
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(
        d[0].message,
        "`10.0.0.1/8` has host bits set: it is the network `10.0.0.0/8`"
    );
    let c = compile_str(
        "t.toml",
        &rule_text("events.a = 'flow and src in [10.0.0.0/8, ::1]'\npattern = \"a\""),
    );
    assert!(c.diagnostics.is_empty(), "{:?}", c.diagnostics);
}

/// `{n,m}` ending a pattern limits nothing (the episode goes on): said; at the start of a
/// sequence, or as an exact count, it does, and nothing is said.
#[test]
fn an_upper_count_that_limits_nothing_is_warned_of() {
    let events = "events.a = 'syslog and app == \"a\"'\nevents.b = 'syslog and app == \"b\"'\n";
    let said = |pattern: &str| -> Vec<String> {
        let c = compile_str(
            "t.toml",
            &rule_text(&format!("{events}pattern = \"{pattern}\"")),
        );
        assert!(c.rules.is_some(), "{pattern}: {:?}", c.diagnostics);
        c.diagnostics.iter().map(|d| d.message.clone()).collect()
    };
    for (pattern, count) in [
        ("or(a{2,3}, b) within 1m", "{2,3}"),
        ("seq(b, a{2,3}) within 1m", "{2,3}"),
        // An exact count ending the pattern is `{3,}` too: its episode takes every further one.
        ("seq(b, a{3}) within 1m", "{3}"),
        ("a{3} within 1m", "{3}"),
    ] {
        let m = said(pattern);
        assert!(
            m.iter().any(|m| m.starts_with(&format!(
                "the upper count of `{count}` changes nothing here"
            ))),
            "{pattern}: {m:?}"
        );
    }
    for pattern in [
        "seq(a{2,3}, b) within 1m",
        "seq(a{3}, b) within 1m",
        "seq(b, a{2,}) within 1m",
    ] {
        let m = said(pattern);
        assert!(
            !m.iter().any(|m| m.contains("upper count")),
            "{pattern}: {m:?}"
        );
    }
}

#[test]
fn a_value_a_flow_field_never_takes_is_warned_of_with_the_right_spelling() {
    let c = compile_str(
        "t.toml",
        &rule_text(
            "events.a = 'flow and kind == \"flow_started\" and state != \"s0\" and dport == 70000'\npattern = \"a\"",
        ),
    );
    assert!(c.rules.is_some(), "warnings only");
    let d = &c.diagnostics;
    assert_eq!(d.len(), 3, "{d:?}");
    assert_eq!(
        d[0].message,
        "`kind` never takes the value \"flow_started\": this test is never true"
    );
    assert!(
        d[0].help
            .as_deref()
            .is_some_and(|h| h.starts_with("did you mean \"flow_start\"?")),
        "{d:?}"
    );
    assert_eq!(
        d[1].message,
        "`state` never takes the value \"s0\": this test is always true"
    );
    assert!(
        d[1].help
            .as_deref()
            .is_some_and(|h| h.starts_with("did you mean \"S0\"?")),
        "{d:?}"
    );
    assert!(
        d[2].message
            .starts_with("`dport` never takes the value 70000"),
        "{d:?}"
    );
    let c = compile_str(
        "t.toml",
        &rule_text(
            "events.a = 'flow and kind == \"attempt_failed\" and state == \"REJ\" and dport == 22'\npattern = \"a\"",
        ),
    );
    assert!(c.diagnostics.is_empty(), "{:?}", c.diagnostics);
    // A whole float is its integer (integers and floats mix): no false warning; `proto`'s
    // names are lower case, and the common protocols go by name, not number.
    let c = compile_str(
        "t.toml",
        &rule_text(
            "events.a = 'flow and dport == 22.0 and orig_bytes == 100.0 and proto in [\"tcp\", \"47\"]'\nevents.b = 'syslog and severity != 3.0 and facility == 4.0'\npattern = \"or(a, b)\"",
        ),
    );
    assert!(c.diagnostics.is_empty(), "{:?}", c.diagnostics);
    let c = compile_str(
        "t.toml",
        &rule_text(
            "events.a = 'flow and proto == \"TCP\" and dport != 22.5'\nevents.b = 'flow and state in [\"s0\", \"REJ\"] and proto in [\"udp\", \"6\"]'\npattern = \"or(a, b)\"",
        ),
    );
    assert!(c.rules.is_some(), "warnings only");
    let d: Vec<&str> = c.diagnostics.iter().map(|d| d.message.as_str()).collect();
    assert_eq!(
        d,
        [
            "`proto` never takes the value \"TCP\": this test is never true",
            "`dport` never takes the value 22.5: this test is always true",
            "`state` never takes the value \"s0\": this item never matches",
            "`proto` never takes the value \"6\": this item never matches",
        ],
        "{:?}",
        c.diagnostics
    );
    assert!(
        c.diagnostics[0]
            .help
            .as_deref()
            .is_some_and(|h| h.starts_with("did you mean \"tcp\"?")),
        "{:?}",
        c.diagnostics
    );
}

#[test]
fn an_absence_at_the_end_longer_than_within_is_warned_of() {
    let c = compile_str(
        "t.toml",
        &rule_text(
            "events.a = 'syslog and app == \"a\"'\nevents.b = 'syslog and app == \"b\"'\npattern = \"seq(a, absent(b) for 2m) within 1m\"",
        ),
    );
    assert!(c.rules.is_some(), "a warning only");
    let d = &c.diagnostics;
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(
        d[0].message
            .starts_with("the absence at the end waits 2m, longer than `within 1m`"),
        "{d:?}"
    );
    let c = compile_str(
        "t.toml",
        &rule_text(
            "events.a = 'syslog and app == \"a\"'\nevents.b = 'syslog and app == \"b\"'\npattern = \"seq(a, absent(b) for 1m) within 1m\"",
        ),
    );
    assert!(c.diagnostics.is_empty(), "{:?}", c.diagnostics);
}

#[test]
fn within_on_an_absence_alone_with_for_is_warned_of() {
    let one = |pattern: &str| {
        compile_str(
            "t.toml",
            &rule_text(&format!(
                "events.a = 'syslog and app == \"a\"'\npattern = \"{pattern}\""
            )),
        )
    };
    let c = one("absent(a) for 2m within 1m");
    assert!(c.rules.is_some(), "a warning only");
    assert_eq!(c.diagnostics.len(), 1, "{:?}", c.diagnostics);
    assert!(
        c.diagnostics[0]
            .message
            .starts_with("`within 1m` does nothing here"),
        "{:?}",
        c.diagnostics
    );
    for fine in ["absent(a) within 1m", "absent(a) for 1m"] {
        let c = one(fine);
        assert!(c.diagnostics.is_empty(), "{fine}: {:?}", c.diagnostics);
    }
}

/// Every hint fixes what it is about: a number in `group_by` is quoted in its list, a field
/// listed twice is dropped, and two absences of one event merge into `absent(a)`, not
/// `absent(or(a))`.
#[test]
fn hints_say_the_fix_in_place() {
    let help = |text: &str| -> Vec<Option<String>> {
        compile_str("t.toml", text)
            .diagnostics
            .iter()
            .map(|d| d.help.clone())
            .collect()
    };
    let r = |body: &str| format!("[[rule]]\nname = \"x\"\nseverity = \"low\"\n{body}\n");
    assert_eq!(
        help(&r("group_by = [5]\nevents.a = 'syslog'\npattern = \"a\"")),
        [Some("quote it: `\"5\"`".to_string())]
    );
    assert_eq!(
        help(&r(
            "group_by = [\"host\", \"host\"]\nevents.a = 'syslog'\npattern = \"a\""
        )),
        [Some("list `host` once: drop this entry".to_string())]
    );
    let h = help(&r(
        "events.a = 'syslog'\npattern = \"seq(a, absent(a) for 1m, absent(a) for 2m)\"",
    ));
    assert!(
        h.iter()
            .flatten()
            .any(|h| h.contains("absent(a) for the D you mean")),
        "{h:?}"
    );
}

#[test]
fn a_rule_name_is_one_line() {
    let c = compile_str(
        "t.toml",
        "[[rule]]\nname = \"a\\nb\"\nseverity = \"low\"\nevents.a = 'syslog'\npattern = \"a\"\n",
    );
    assert!(c.rules.is_none());
    assert_eq!(
        messages(&c)[0].1,
        "the rule name holds a control character (a newline, a tab)"
    );
}

/// A string meant to end in a backslash runs on (`\"` is a quote inside it): the hint says
/// so and gives the regex that tests for a final backslash, which compiles.
#[test]
fn a_string_ending_in_a_backslash_is_explained() {
    let c = compile_str(
        "t.toml",
        &rule_text("events.a = 'syslog and msg ends_with \"C:\\Users\\\"'\npattern = \"a\""),
    );
    let d = c
        .diagnostics
        .iter()
        .find(|d| d.severity == Level::Error)
        .expect("an error");
    assert_eq!(d.message, "unterminated string");
    let help = d.help.as_deref().unwrap_or_default();
    assert!(help.contains("cannot end in a single backslash"), "{help}");
    assert!(help.contains(r#"msg =~ "C:\\""#), "{help}");
    // The caret is at the `\"` meant as the end, not at the last quote of the line.
    assert_eq!(d.column, 47, "{d:?}");
    let plain = compile_str(
        "t.toml",
        &rule_text("events.a = 'syslog and msg == \"open'\npattern = \"a\""),
    );
    assert!(
        plain
            .diagnostics
            .iter()
            .any(|d| d.help.as_deref() == Some("close it with \"")),
        "{:?}",
        plain.diagnostics
    );
    let regex = compile_str(
        "t.toml",
        &rule_text("events.a = 'syslog and msg =~ \"\\\\$\"'\npattern = \"a\""),
    );
    assert!(regex.rules.is_some(), "{:?}", regex.diagnostics);
    // The regex the hint gives for a final backslash compiles, and what follows it is read.
    let both = compile_str(
        "t.toml",
        &rule_text("events.a = 'syslog and msg =~ \"C:[\\\\]\" and app == \"a\"'\npattern = \"a\""),
    );
    assert!(both.rules.is_some(), "{:?}", both.diagnostics);
    // DESIGN.md: a regex's backslashes are kept as written, "so it reads as in any regex
    // tool": one ending in an escaped backslash ends there (a backslash pair escapes no
    // quote), and what follows is read.
    use cepheus_core::event::Event;
    use cepheus_core::rules::ir::Captures;
    use cepheus_core::time::Timestamp;
    let pair = compile_str(
        "t.toml",
        &rule_text("events.a = 'syslog and msg =~ \"C:\\\\\" and app == \"a\"'\npattern = \"a\""),
    );
    let rules = pair
        .rules
        .unwrap_or_else(|| panic!("{:?}", pair.diagnostics));
    let cond = &rules.rules[0].events[0].cond;
    assert_eq!(
        cond.canonical(),
        r#"(app == "a" and msg =~ "C:\\" and syslog)"#
    );
    let ev = |msg: &str| {
        Event::new(Source::Syslog, Timestamp(0), Timestamp(0))
            .with(Field::App, Value::str("a"))
            .with(Field::Msg, Value::str(msg))
    };
    assert!(cond.eval(&ev(r"copied to C:\"), &mut Captures::new()));
    assert!(!cond.eval(&ev("copied to C:"), &mut Captures::new()));
}

/// What the engine cannot run is a diagnostic of `rules check`, not a rule set that
/// fails when the engine is built (found by fuzzing: each of these passed the checker).
#[test]
fn patterns_the_engine_cannot_run_are_errors() {
    let events: String = (0..6)
        .map(|i| format!("events.e{i} = 'syslog and app == \"x{i}\"'\n"))
        .collect();
    let or = "or(e0, seq(e1, e2))";
    let nine = [or; 9].join(", ");
    for (pattern, want) in [
        (
            format!("seq({nine})"),
            "expands to more than 256 alternatives",
        ),
        (
            "and(e0, e1, e2, e3, e4, e5) within 1m".to_string(),
            "and() of more than 5 parts",
        ),
        (
            "seq(e0, absent(e1) for 2s, absent(e2) for 1s, e3)".to_string(),
            "two adjacent absent()",
        ),
        (
            "seq(absent(e0) for 2s, absent(e1) for 1s, e2)".to_string(),
            "two absent() at the start",
        ),
        (
            "seq(e0, absent(e1) for 2s, absent(e2) for 1s)".to_string(),
            "two adjacent absent() with different durations (for 2s and for 1s)",
        ),
        (
            "seq(e0, seq(absent(e1) for 2s, e2)) within 1m".to_string(),
            "absent() at the start of a seq() nested",
        ),
        (
            "and(seq(absent(e1) for 2s, e2), e0) within 1m".to_string(),
            "absent() at the start of a seq() nested",
        ),
        (
            "and(e0, seq(e1, absent(e2) for 2s)) within 1m".to_string(),
            "absent() at the end of a seq() nested",
        ),
        (
            "seq(seq(e0, absent(e1) for 2s), e2) within 1m".to_string(),
            "absent() at the end of a seq() nested",
        ),
        (
            format!("seq({}) within 1m", ["e0"; 1025].join(", ")),
            "a sequence of more than 1024 steps",
        ),
    ] {
        let c = compile_str(
            "t.toml",
            &rule_text(&format!("{events}pattern = \"{pattern}\"")),
        );
        assert!(c.rules.is_none(), "{pattern}");
        let errors = error_messages(&c);
        assert_eq!(errors.len(), 1, "{pattern}: {errors:?}");
        assert!(errors[0].contains(want), "{pattern}: {errors:?}");
        assert!(errors[0].starts_with("rule `r`: "), "{errors:?}");
    }
    // The hint names the rule's own events and says which durations disagree.
    let c = compile_str(
        "t.toml",
        &rule_text(&format!(
            "{events}pattern = \"seq(e0, absent(e1) for 1m, absent(e2) for 2m, e3)\""
        )),
    );
    let d = c
        .diagnostics
        .iter()
        .find(|d| d.severity == Level::Error)
        .expect("an error");
    assert!(d.message.contains("(for 1m and for 2m)"), "{}", d.message);
    assert_eq!(
        d.help.as_deref(),
        Some("merge them into one: absent(or(e1, e2)) for the D you mean")
    );
    let many: String = (0..65)
        .map(|i| format!("events.e{i} = 'syslog and app == \"x{i}\"'\n"))
        .collect();
    let all: Vec<String> = (0..65).map(|i| format!("e{i}")).collect();
    let c = compile_str(
        "t.toml",
        &rule_text(&format!("{many}pattern = \"or({})\"", all.join(", "))),
    );
    assert!(c.rules.is_none());
    assert!(
        messages(&c)
            .iter()
            .any(|(_, m)| m.contains("more than 64 event definitions"))
    );
}

#[test]
fn an_absence_message_naming_an_event_field_is_warned_of() {
    let c = compile_str(
        "t.toml",
        &rule_text(
            "group_by = [\"host\"]\nexpect = [\"a\"]\nmessage = \"no hb from {host}: last {msg}\"\nevents.hb = 'syslog and app == \"hb\"'\npattern = \"absent(hb) for 1m\"",
        ),
    );
    assert!(c.rules.is_some());
    let d = &c.diagnostics;
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(
        d[0].message
            .starts_with("`{msg}` stays as written when this absence fires"),
        "{d:?}"
    );
    assert_eq!(
        d[0].help.as_deref(),
        Some("an absence's message can name its group: `{host}`")
    );
    // A sequence has its events: no warning.
    let c = compile_str(
        "t.toml",
        &rule_text(
            "group_by = [\"host\"]\nmessage = \"{host}: {msg}\"\nevents.a = 'syslog and app == \"a\"'\nevents.hb = 'syslog and app == \"hb\"'\npattern = \"seq(a, absent(hb) for 1m)\"",
        ),
    );
    assert!(c.diagnostics.is_empty(), "{:?}", c.diagnostics);
}

/// Every error says what would fix it (issue 2): conditions, addresses, lists, patterns,
/// counts, durations and settings that are wrong each come with a hint.
#[test]
fn every_error_comes_with_a_hint() {
    let bodies = [
        "events.a = 'syslog and app == '\npattern = \"a\"",
        "events.a = 'syslog and (app == \"x\"'\npattern = \"a\"",
        "events.a = 'flow and src in 10.0.0.0/99'\npattern = \"a\"",
        "events.a = 'flow and src == 10.0.0.300'\npattern = \"a\"",
        "events.a = 'flow and dport == 99999999999999999999'\npattern = \"a\"",
        "events.a = 'syslog and severity in [\"x\", 1]'\npattern = \"a\"",
        "events.a = 'syslog and severity in [1 2]'\npattern = \"a\"",
        "events.a = 'syslog and exists(\"host\")'\npattern = \"a\"",
        "events.a = 'syslog and app == and'\npattern = \"a\"",
        "events.a = 'syslog and app == \"x\" )'\npattern = \"a\"",
        "events.a = 'flow and -src == 1'\npattern = \"a\"",
        "events.a = ''\npattern = \"a\"",
        "events.a = 'syslog'\npattern = \"\"",
        "events.a = 'syslog'\npattern = \"seq(a,\"",
        "events.a = 'syslog'\npattern = \"seq()\"",
        "events.a = 'syslog'\npattern = \"a{x}\"",
        "events.a = 'syslog'\npattern = \"a{3,} distinct(dport)\"",
        "events.a = 'syslog'\npattern = \"a{3,} distinct(\\\"x\\\")\"",
        "events.a = 'syslog'\nevents.b = 'syslog'\nevents.c = 'syslog'\npattern = \"seq(a, not b, c)\"",
        "events.a = 'syslog'\nevents.b = 'syslog'\npattern = \"seq(a b)\"",
        "events.a = 'syslog'\npattern = \"absent(a) for\"",
        "events.a = 'syslog'\npattern = \"a within\"",
        "events.a = 'syslog'\npattern = \"within 5m\"",
        "events.a = 'syslog and host == web-1'\npattern = \"a\"",
        "events.a = 'syslog and severity == \"high\"'\npattern = \"a\"",
        "events.a = 'syslog'\npattern = \"a\"\nmax_groups = -1",
        "events.a = 'syslog'\npattern = \"a\"\ngroup_by = \"host\"",
        "events.a = 'syslog'\npattern = \"a\"\nmessage = 3",
    ];
    for body in bodies {
        let c = compile_str("t.toml", &rule_text(body));
        let errs: Vec<_> = (c.diagnostics.iter())
            .filter(|d| d.severity == Level::Error)
            .collect();
        assert!(!errs.is_empty(), "{body}: no error");
        for e in errs {
            assert!(
                e.help.as_deref().is_some_and(|h| !h.is_empty()),
                "{body}: `{}` has no hint",
                e.message
            );
        }
    }
}

/// A trigger period longer than the window is capped to it (DESIGN): `rules check` says so.
#[test]
fn a_trigger_period_longer_than_the_window_is_warned_of() {
    let body = "events.a = 'syslog'\nevents.b = 'syslog'\npattern = \"seq(a, b) within 5m\"\n";
    let c = compile_str(
        "t.toml",
        &rule_text(&format!("{body}trigger = {{ every = \"1h\" }}")),
    );
    let m = messages(&c);
    assert!(
        m.iter()
            .any(|(l, s)| *l == Level::Warning && s.contains("longer than the rule's window (5m)")),
        "{m:?}"
    );
    assert!(c.rules.is_some());
    for ok in ["every = \"5m\"", "every = \"1m\""] {
        let c = compile_str("t.toml", &rule_text(&format!("{body}trigger = {{ {ok} }}")));
        assert!(messages(&c).is_empty(), "{ok}: {:?}", messages(&c));
    }
}

/// A definition with an error adds no spurious message warning (`{host}` is a syslog field).
#[test]
fn a_condition_error_does_not_make_message_fields_unknown() {
    let c = compile_str(
        "t.toml",
        &rule_text("message = \"{host}\"\nevents.a = 'syslog and dprt == 22'\npattern = \"a\""),
    );
    let m = messages(&c);
    assert_eq!(m.len(), 1, "{m:?}");
    assert!(m[0].1.contains("unknown field `dprt`"), "{m:?}");
}

/// Time-of-day functions read a time's wall clock in UTC or in a named zone (daylight saving
/// included); a wrong argument, zone or name is an error with a hint.
#[test]
fn time_of_day_functions() {
    use cepheus_core::event::Event;
    use cepheus_core::rules::ir::Captures;
    use cepheus_core::time::Timestamp;
    let eval = |cond: &str, at: &str| -> bool {
        let c = compile_str(
            "t.toml",
            &rule_text(&format!("events.a = '{cond}'\npattern = \"a\"")),
        );
        let errs = errors(&c);
        let rs = c.rules.unwrap_or_else(|| panic!("{cond}: {errs:#?}"));
        let t = Timestamp::parse_rfc3339(at).unwrap();
        let ev = Event::new(Source::Syslog, t, t);
        rs.rules[0].events[0].cond.eval(&ev, &mut Captures::new())
    };
    // 2024-06-08 is a Saturday; Paris is UTC+2 in June, UTC+1 in January.
    let at = "2024-06-08T16:30:00Z";
    assert!(eval("hour(time) == 16 and minute(time) == 30", at));
    assert!(eval("hour(time, \"Europe/Paris\") == 18", at));
    assert!(eval("hour(time - 1h, \"Europe/Paris\") == 17", at));
    assert!(eval(
        "weekday(time) == 6 and day(time) == 8 and month(time) == 6",
        at
    ));
    assert!(eval(
        "hour(time, \"Europe/Paris\") == 17",
        "2024-01-08T16:30:00Z"
    ));
    assert!(eval(
        "weekday(time, \"Asia/Tokyo\") == 7",
        "2024-06-08T16:30:00Z"
    ));
    assert!(!eval("hour(time) in [8, 9, 10]", at));
    for (cond, msg) in [
        ("hours(time) == 1", "unknown function `hours`"),
        ("hour(host) == 1", "`hour` reads a time, not a string"),
        (
            "hour(time, \"Mars/Base\") == 1",
            "unknown time zone `Mars/Base`",
        ),
        (
            "hour(time, host) == 1",
            "the zone must be a quoted IANA name",
        ),
        ("hour() == 1", "`hour` takes a time and, optionally, a zone"),
        ("hour(time) == \"x\"", "cannot compare"),
    ] {
        let (m, _, _, help) = one_error(&rule_text(&format!(
            "events.a = 'syslog and {cond}'\npattern = \"a\""
        )));
        assert!(m.contains(msg), "{cond}: {m}");
        assert!(help.is_some(), "{cond}: {m}");
    }
}

/// Two sources in one condition can never match, however the `and`s are parenthesised.
#[test]
fn two_sources_in_nested_conjuncts_are_an_error() {
    for cond in [
        "syslog and flow",
        "(syslog and flow) and true",
        "syslog and (true and flow)",
        "(app == \"x\" and syslog) and (flow)",
        "syslog and not not flow",
        "not not (syslog and app == \"x\") and flow",
        "syslog and not syslog",
        "not flow and not syslog",
        "flow and not flow",
    ] {
        let text = rule_text(&format!("events.a = '{cond}'\npattern = \"a\""));
        let (msg, _, _, _) = one_error(&text);
        assert!(msg.contains("never both"), "{cond}: {msg}");
    }
}

/// `not flow` says `syslog` as `syslog` does: a flow field after it is unknown, as after
/// `syslog` (`not flow and dport == 22` was accepted, and never matched).
#[test]
fn a_negated_source_says_the_other_one() {
    for (cond, msg) in [
        (
            "not flow and dport == 22",
            "unknown field `dport` for syslog events",
        ),
        (
            "not syslog and app == \"sshd\"",
            "unknown field `app` for flow events",
        ),
        (
            "(not syslog) and host == \"h\"",
            "unknown field `host` for flow events",
        ),
    ] {
        let text = rule_text(&format!("events.a = '{cond}'\npattern = \"a\""));
        let (m, _, _, _) = one_error(&text);
        assert!(m.contains(msg), "{cond}: {m}");
    }
    // Still accepted: a negated source with its own fields, or inside an `or`.
    for cond in [
        "not flow and app == \"sshd\"",
        "not syslog and dport == 22",
        "not flow or dport == 22",
    ] {
        let text = rule_text(&format!("events.a = '{cond}'\npattern = \"a\""));
        let c = compile_str("t.toml", &text);
        assert!(c.rules.is_some(), "{cond}: {:?}", errors(&c));
    }
}

/// Fields of both sources that every way to match needs at once can never match either: an
/// error at the second source's field. A negated test or an `or` requires nothing of it.
#[test]
fn fields_of_both_sources_in_one_match_are_an_error() {
    for (cond, col) in [
        ("app == \"a\" and dport == 22", 28),
        ("(app == \"a\" or msg =~ \"x\") and dport == 22", 44),
        ("exists(dport) and host == \"h\"", 20),
    ] {
        let text = rule_text(&format!("events.a = '{cond}'\npattern = \"a\""));
        let (msg, line, column, help) = one_error(&text);
        assert!(msg.contains("never both"), "{cond}: {msg}");
        assert_eq!((line, column), (4, col), "{cond}: {msg}");
        assert!(help.is_some(), "{cond}");
    }
    for cond in [
        "app == \"a\" or dport == 22",
        "app == \"a\" and not (dport == 22)",
        "false and app == \"a\"",
        "msg =~ \"port (?P<dport>\\\\d+)\" and dport == 22",
    ] {
        let text = rule_text(&format!("events.a = '{cond}'\npattern = \"a\""));
        let c = compile_str("t.toml", &text);
        assert!(c.rules.is_some(), "{cond}: {:#?}", errors(&c));
    }
}

/// Findings a 3 a.m. reader needs told plainly: an unquoted `expect` key (quote the key, not
/// the whole `expect`), an `expect` of the wrong shape beside a broken `events` (not hidden
/// behind it), `[rule]` after `[[rule]]`.
#[test]
fn misplaced_values_say_how_to_write_them() {
    let (m, _, _, help) = one_error(&rule_text(
        "group_by = [\"host\"]\nexpect = [\"a\", 5]\nevents.a = 'syslog'\npattern = \"absent(a) for 1m\"",
    ));
    assert!(m.contains("an `expect` key is a string"), "{m}");
    assert_eq!(help.as_deref(), Some("quote it: `\"5\"`"));
    let c = compile_str(
        "t.toml",
        &rule_text("group_by = [\"host\"]\nexpect = \"web-1\"\nevents = 'syslog'\npattern = \"a\""),
    );
    let msgs = errors(&c).join("\n");
    assert!(msgs.contains("`events` must be a table"), "{msgs}");
    assert!(msgs.contains("`expect` must be a list of keys"), "{msgs}");
    let text = format!(
        "{}[rule]\nname = \"x\"\n",
        rule_text("events.a = 'syslog'\npattern = \"a\"")
    );
    let (m, line, _, help) = one_error(&text);
    assert!(m.contains("duplicate key"), "{m}");
    assert_eq!(line, 6);
    assert!(help.is_some_and(|h| h.contains("`[[rule]]` line")), "{m}");
}

/// A negative number is a literal in an `in` list too.
#[test]
fn negative_numbers_are_list_items() {
    let c = compile_str(
        "t.toml",
        &rule_text("events.a = 'syslog and severity in [0, -1, -2.5]'\npattern = \"a\""),
    );
    let rules = c.rules.expect("compiles");
    let canon = rules.rules[0].events[0].cond.canonical();
    assert!(canon.contains("-1") && canon.contains("-2.5"), "{canon}");
}

/// An `expect` list as long as `max_groups` leaves no room to discover a group: said.
#[test]
fn an_expect_list_filling_max_groups_is_warned() {
    let text = |max: u32| {
        rule_text(&format!(
            "group_by = [\"host\"]\nexpect = [\"a\", \"b\"]\nmax_groups = {max}\n\
             events.hb = 'syslog and app == \"hb\"'\npattern = \"absent(hb) for 1m\""
        ))
    };
    let warned = |max: u32| {
        messages(&compile_str("t.toml", &text(max)))
            .iter()
            .any(|(l, m)| *l == Level::Warning && m.contains("`expect` lists 2 groups"))
    };
    assert!(warned(2));
    assert!(warned(1));
    assert!(!warned(3));
    // With the default `max_groups` (not written in the rule) as well.
    let src = [SourceFile {
        path: "hb.toml".into(),
        text: rule_text(
            "group_by = [\"host\"]\nexpect = { file = \"hosts.txt\" }\nevents.hb = 'syslog'\npattern = \"absent(hb) for 1m\"",
        ),
    }];
    let hosts = |n: u64| (0..n).map(|i| format!("h{i}\n")).collect::<String>();
    let n = cepheus_core::engine::DEFAULT_MAX_GROUPS;
    for (listed, warn) in [(n, true), (n - 1, false)] {
        let c = compile(&src, &mut |_| Ok(hosts(listed)));
        let said = messages(&c).iter().any(|(l, m)| {
            *l == Level::Warning && m.contains("as many as the default `max_groups` (1000000)")
        });
        assert_eq!(said, warn, "{listed}");
    }
}

/// A regex counting one repetition (nested ones multiplied) past 1,000 is refused where the
/// count is written: `[a-z]{50000}z` took 9 s per 64 KiB message and stalled every shard.
#[test]
fn a_regex_counting_past_a_thousand_is_refused_where_it_counts() {
    let (m, line, col, help) = one_error(&rule_text(
        "events.a = 'syslog and msg =~ \"x[a-z]{50000}z\"'\npattern = \"a\"",
    ));
    assert!(
        m.contains("counted to 50000") && m.contains("at most 1000"),
        "{m}"
    );
    assert_eq!((line, col), (4, 33));
    assert!(help.unwrap_or_default().contains("{1000,}"));
    let (m, _, _, _) = one_error(&rule_text(
        "events.a = 'syslog and msg =~ \"(?:ab{40}){30}\"'\npattern = \"a\"",
    ));
    assert!(m.contains("counted to 1200"), "{m}");
    for fine in [
        "(?:[0-9a-f]{2}:){5}[0-9a-f]{2}",
        "[A-Za-z0-9+/=]{1000,}",
        "(?:a{10}){100}",
        "x+y*",
    ] {
        let c = compile_str(
            "t.toml",
            &rule_text(&format!(
                "events.a = 'syslog and msg =~ \"{fine}\"'\npattern = \"a\""
            )),
        );
        assert!(c.rules.is_some(), "{fine}: {:#?}", errors(&c));
    }
}

/// A regex whose compiled form passes 10 MB is refused where it is written, with what to do.
#[test]
fn a_regex_too_large_to_compile_is_refused_with_a_hint() {
    let (m, line, col, help) = one_error(&rule_text(
        "events.a = 'syslog and msg =~ \"\\w{900}\\w{900}\\w{900}\\w{900}\"'\npattern = \"a\"",
    ));
    assert_eq!(m, "invalid regex: its compiled form would exceed 10 MB");
    assert_eq!((line, col), (4, 31));
    assert!(help.unwrap_or_default().contains("(?-u:\\w)"));
    // A long list of plain words (an IOC list) is not told to use narrower classes (found by
    // an audit).
    let (m, _, _, help) = one_error(&rule_text(&format!(
        "events.a = 'syslog and msg =~ \"{}\"'\npattern = \"a\"",
        "a".repeat(1 << 20)
    )));
    assert_eq!(m, "invalid regex: its compiled form would exceed 10 MB");
    assert!(help.unwrap_or_default().contains("split it"));
}

/// Rules that say something they cannot do are warned of, with the reason: a least duration
/// a match of one event never lasts, a zero period that limits nothing, a message field only
/// an absent event could fill. Rules that can do it are not.
#[test]
fn rules_that_cannot_do_what_they_say_are_warned_of() {
    let events = "events.a = 'syslog and app == \"a\"'\nevents.b = 'syslog and app == \"b\"'\n";
    let said = |extra: &str, pattern: &str| -> Vec<String> {
        let c = compile_str(
            "t.toml",
            &rule_text(&format!("{events}{extra}pattern = \"{pattern}\"")),
        );
        assert!(c.rules.is_some(), "{pattern}: {:?}", c.diagnostics);
        c.diagnostics.iter().map(|d| d.message.clone()).collect()
    };
    let least = "this rule never matches: a match holds one event";
    for pattern in [
        "seq(a, absent(b) for 30s) within 10s..1m",
        "seq(absent(b) for 30s, a) within 10s..1m",
        "a within 10s..1m",
        "or(a, b) within 1s..1m",
    ] {
        let m = said("", pattern);
        assert!(m.iter().any(|m| m.starts_with(least)), "{pattern}: {m:?}");
    }
    for pattern in [
        "seq(a, b) within 10s..1m",
        "and(a, b) within 10s..1m",
        "seq(a, absent(b) for 30s) within 1m",
        "a{2,} within 1s..1m",
    ] {
        let m = said("", pattern);
        assert!(!m.iter().any(|m| m.starts_with(least)), "{pattern}: {m:?}");
    }
    let zero = "this trigger limits nothing: `every = \"0s\"`";
    for pattern in ["seq(a, b) within 1m", "absent(a) for 10s"] {
        let m = said("trigger = { every = \"0s\" }\n", pattern);
        assert!(m.iter().any(|m| m.starts_with(zero)), "{pattern}: {m:?}");
        let m = said("trigger = { every = \"5s\" }\n", pattern);
        assert!(
            !m.iter().any(|m| m.contains("limits nothing")),
            "{pattern}: {m:?}"
        );
    }
    let only_absent = "`{dport}` stays as written: only events inside `absent(..)` provide it";
    let flows = "events.f = 'flow and dport == 22'\nevents.s = 'syslog and app == \"x\"'\n";
    let c = compile_str(
        "t.toml",
        &rule_text(&format!(
            "{flows}message = \"{{app}} silent; port {{dport}}\"\npattern = \"seq(s, absent(f) for 1m)\""
        )),
    );
    let m: Vec<String> = c.diagnostics.iter().map(|d| d.message.clone()).collect();
    assert!(m.iter().any(|m| m.starts_with(only_absent)), "{m:?}");
    assert!(!m.iter().any(|m| m.contains("`{app}`")), "{m:?}");
}

/// An `expect` value no event can carry (a port over 65535, a severity of 9) is refused, as
/// the same value in a condition or a JSON event is: that group would alert for ever.
#[test]
fn expect_values_out_of_their_fields_range_are_refused() {
    let c = compile_str(
        "t.toml",
        &rule_text(
            "group_by = [\"dst\", \"dport\"]\nexpect = [\"10.0.0.1,22\", \"10.0.0.4,70000\"]\nevents.f = 'flow'\npattern = \"absent(f) for 1m\"",
        ),
    );
    assert_eq!(
        messages(&c),
        vec![(
            Level::Error,
            "`70000` is not a valid value for group field `dport`: no event carries it".to_string()
        )]
    );
    let c = compile_str(
        "t.toml",
        &rule_text(
            "group_by = [\"severity\"]\nexpect = [\"3\", \"9\"]\nevents.s = 'syslog'\npattern = \"absent(s) for 1m\"",
        ),
    );
    assert_eq!(
        messages(&c),
        vec![(
            Level::Error,
            "`9` is not a valid value for group field `severity`: no event carries it".to_string()
        )]
    );
    let c = compile_str(
        "t.toml",
        &rule_text(
            "group_by = [\"dport\"]\nexpect = [\"0\", \"65535\"]\nevents.f = 'flow'\npattern = \"absent(f) for 1m\"",
        ),
    );
    assert!(
        c.rules.is_some() && c.diagnostics.is_empty(),
        "{:?}",
        c.diagnostics
    );
}

/// What follows a complete pattern gets a pattern's advice, never a condition's (`and`/`or`
/// between operands): a dash in an event's name says what a name may hold.
#[test]
fn a_pattern_that_goes_on_gets_a_patterns_advice() {
    let text = |p: &str| {
        format!(
            "[[rule]]\nname = \"r\"\nseverity = \"low\"\nevents.a = 'syslog'\npattern = \"{p}\"\n"
        )
    };
    let (m, line, col, help) = one_error(&text("my-ev"));
    assert_eq!((m.as_str(), line, col), ("unexpected `-` here", 5, 14));
    assert!(help.unwrap_or_default().contains("letters, digits and `_`"));
    let (_, _, _, help) = one_error(&text("a 5"));
    let help = help.unwrap_or_default();
    assert!(
        help.contains("seq(..)") && !help.contains("join two"),
        "{help}"
    );
}

/// A control character in a TOML string (a NUL, a tab pasted in) is named, not taken for a
/// string left open.
#[test]
fn a_control_character_in_a_string_is_named() {
    let c = compile_str(
        "t.toml",
        "[[rule]]\nname = \"a\u{0}\"\nseverity = \"high\"\nevents.x = 'app == \"x\"'\npattern = \"x\"\n",
    );
    let d = c
        .diagnostics
        .iter()
        .find(|d| d.severity == Level::Error)
        .expect("an error");
    let help = d.help.as_deref().unwrap_or_default();
    assert!(help.contains("control character (U+0000)"), "{help}");
}

/// Conditions that hold for exactly the same events have one predicate key (they are one
/// predicate when shared); conditions that differ on some event keep different keys, and a
/// rule's meaning (its saved state's key) is not normalised.
#[test]
fn predicate_keys_normalise_only_what_cannot_change_a_result() {
    let key = |cond: &str| {
        let text = format!(
            "[[rule]]\nname = \"a\"\nseverity = \"low\"\nevents.x = '{cond}'\npattern = \"x\"\n"
        );
        let c = compile_str("k.toml", &text);
        let rules = c
            .rules
            .unwrap_or_else(|| panic!("{cond}: {:#?}", c.diagnostics));
        let cond = &rules.rules[0].events[0].cond;
        (cond.predicate_key(), cond.canonical())
    };
    let same = [
        vec![
            r#"syslog and app == "x""#,
            r#"app == "x""#,
            r#"app == "x" and syslog"#,
            r#"app in ["x"]"#,
            r#"syslog and (app == "x")"#,
        ],
        vec![
            r#"app == "a" or app == "b""#,
            r#"app in ["b", "a"]"#,
            r#"syslog and app in ["a", "b", "a"]"#,
            r#"(syslog and app == "a") or app == "b""#,
            r#"app == "a" or (app == "b" or app == "a")"#,
        ],
        vec![
            r#"flow and dport == 22 and proto == "tcp""#,
            r#"dport == 22 and proto == "tcp""#,
            r#"proto == "tcp" and flow and dport in [22]"#,
        ],
        vec![
            r#"syslog and msg contains "x" and severity <= 3"#,
            r#"msg contains "x" and severity <= 3"#,
        ],
        vec![r#"syslog and exists(msgid)"#, r#"exists(msgid)"#],
        // A condition that captures: its source test goes where an operand reading no
        // captured name says the source (only syslog events have `msg`).
        vec![
            r#"syslog and app == "sshd" and msg =~ "from (?P<src>\S+)" and src in 10.0.0.0/8"#,
            r#"app == "sshd" and msg =~ "from (?P<src>\S+)" and src in 10.0.0.0/8"#,
            r#"app == "sshd" and (syslog and msg =~ "from (?P<src>\S+)") and src in 10.0.0.0/8"#,
        ],
    ];
    for spellings in &same {
        let first = key(spellings[0]).0;
        for s in spellings {
            assert_eq!(
                key(s).0,
                first,
                "{s} and {} are one predicate",
                spellings[0]
            );
        }
    }
    let different = [
        // `not` holds on events without the field (a flow has no app).
        (r#"syslog and not (app == "x")"#, r#"not (app == "x")"#),
        // `time` is in every source's events.
        (r#"syslog and hour(time) < 8"#, r#"hour(time) < 8"#),
        (
            r#"app == "a" or app == "b""#,
            r#"app == "a" or host == "b""#,
        ),
        // A capture may stand for a registry field of another source (`src` out of a
        // structured-data parameter): a test on it says nothing of the source, so `syslog`
        // stays (a structured-data field is not taken to say it either).
        (
            r#"syslog and sd.x.p =~ "(?P<src>\S+)" and src in 10.0.0.0/8"#,
            r#"sd.x.p =~ "(?P<src>\S+)" and src in 10.0.0.0/8"#,
        ),
        // Captures flow left to right: the order of operands around one stays.
        (
            r#"msg =~ "(?P<src>\S+)" and app == "x""#,
            r#"app == "x" and msg =~ "(?P<src>\S+)""#,
        ),
    ];
    for (a, b) in different {
        assert_ne!(key(a).0, key(b).0, "{a} and {b}");
    }
    // The meaning keeps the condition as written (normalised only by operand order).
    assert_ne!(key(r#"syslog and app == "x""#).1, key(r#"app == "x""#).1);
}

/// A rule's meaning digest (kept with its alerts) is the same for another `expect` list, as
/// the engine keeps such a rule's state, and differs for any other change of meaning.
#[test]
fn meaning_digests_ignore_only_the_expect_list() {
    let digest = |expect: &str, pattern: &str| {
        let text = format!(
            "[[rule]]\nname = \"hb\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nexpect = {expect}\nevents.x = 'syslog and app == \"hb\"'\npattern = \"{pattern}\"\n"
        );
        let c = compile_str("d.toml", &text);
        let rules = c.rules.unwrap_or_else(|| panic!("{:#?}", c.diagnostics));
        rules.rules[0].meaning_digest()
    };
    let base = digest(r#"["a"]"#, "absent(x) for 1m");
    assert_eq!(base, digest(r#"["a", "b"]"#, "absent(x) for 1m"));
    assert_eq!(base, digest("[]", "absent(x) for 1m"));
    assert_ne!(base, digest(r#"["a"]"#, "absent(x) for 2m"));
    // Pinned: the digests are stored with firing alerts, so a build that writes a rule's
    // canonical form differently must map the earlier digests (this fails to say so).
    assert_eq!(base, 0x29b5_5124_d798_7e4a, "{base:#018x}");
}

/// The mistakes a rule writer makes most get a hint that says the fix: a regex's backslash
/// in a "..." string, `~=`, a misspelt operator word, a list in parentheses, a zero length.
#[test]
fn common_mistakes_get_a_hint_with_the_fix() {
    let cases = [
        (
            r#"events.a = "syslog and msg =~ \"Accepted \w+\""
pattern = "a""#,
            "single quotes",
        ),
        (
            "events.a = 'syslog and msg ~= \"x\"'\npattern = \"a\"",
            "`=~`",
        ),
        (
            "events.a = 'syslog and msg contain \"x\"'\npattern = \"a\"",
            "did you mean `contains`?",
        ),
        (
            "events.a = 'syslog and app in (\"a\", \"b\")'\npattern = \"a\"",
            "[\"sshd\", \"dropbear\"]",
        ),
        (
            "events.a = 'syslog'\npattern = \"absent(a) for 0s\"",
            "absent(hb) for 1m",
        ),
        (
            "events.a = 'syslog'\npattern = \"a{2,} within 0s\"",
            "within 5m",
        ),
    ];
    for (body, want) in cases {
        let (msg, _, _, help) = one_error(&rule_text(body));
        let help = help.unwrap_or_default();
        assert!(help.contains(want), "{body}: {msg} / {help}");
    }
}

/// Found by an audit of `rules check`: each of these said something wrong or gave no hint.
#[test]
fn small_mistakes_are_said_as_they_are() {
    let first_error = |c: &Compiled| {
        c.diagnostics
            .iter()
            .find(|d| d.severity == Level::Error)
            .map(|d| (d.message.clone(), d.help.clone().unwrap_or_default()))
            .unwrap_or_else(|| panic!("no error: {:?}", c.diagnostics))
    };
    // A duration finer than a nanosecond is not "too long".
    for d in ["0.5ns", "0.0000000001s"] {
        let c = compile_str(
            "t.toml",
            &rule_text(&format!(
                "events.a = 'syslog'\npattern = \"seq(a, a) within {d}\""
            )),
        );
        let (msg, help) = first_error(&c);
        assert!(
            format!("{msg} {help}").contains("finer than a nanosecond"),
            "{d}: {msg} / {help}"
        );
    }
    // A budget too large for an integer is not "not positive".
    let c = compile_str(
        "t.toml",
        &rule_text(
            "events.a = 'syslog'\npattern = \"a\"\nmax_partial_matches = 99999999999999999999",
        ),
    );
    let errs = messages(&c);
    assert!(
        errs.iter()
            .any(|(_, m)| m == "`max_partial_matches` is too large"),
        "{errs:?}"
    );
    // Errors that had no hint.
    let c = compile_str(
        "t.toml",
        "[[rule]]\nname = \"\"\nseverity = \"low\"\nevents.a = 'syslog'\npattern = \"a\"\n",
    );
    let (msg, help) = first_error(&c);
    assert_eq!(msg, "the rule name is empty");
    assert!(help.contains("name = "), "{help}");
    let c = compile_str(
        "t.toml",
        &rule_text("events.a = 'syslog'\npattern = \"séq(a, a)\""),
    );
    let (msg, help) = first_error(&c);
    assert!(msg.contains("unexpected character `é`"), "{msg}");
    assert!(help.contains("ASCII"), "{help}");
    let c = compile_str(
        "t.toml",
        &rule_text(
            "group_by = [\"host\"]\nexpect = [\"web-1\", \"\"]\nevents.a = 'syslog'\npattern = \"absent(a) for 1m\"",
        ),
    );
    let (_, help) = first_error(&c);
    assert!(help.contains("empty value"), "{help}");
    // A byte-order mark (as Windows editors write) is no part of an expect file's first key.
    let c = with_hosts(DESIGN_EXAMPLES, "\u{feff}web-1\r\nweb-2\r\n");
    assert!(c.rules.is_some(), "{:?}", errors(&c));
    assert_eq!(
        c.rules.unwrap().rules[0].expect.len(),
        2,
        "both hosts, the first without its mark"
    );
    // Nor of a later line's key (lists joined with `cat`, each with its mark).
    let c = with_hosts(DESIGN_EXAMPLES, "web-1\n\u{feff}web-5\n");
    let keys: Vec<String> = (c.rules.unwrap().rules[0].expect.iter())
        .map(|k| k[0].to_string())
        .collect();
    assert_eq!(keys, ["web-1", "web-5"]);
    // Text that is not UTF-8 is said at its line and column.
    let e = String::from_utf8(b"web-1\nweb-\xff2\n".to_vec()).unwrap_err();
    assert_eq!(
        cepheus_core::rules::not_utf8(&e),
        "not UTF-8 text: byte 0xff at line 2, column 5 (offset 10) is not valid here"
    );
}

/// Not given, `forget_after` is 7 days, or twice the pattern's longest wait when longer: a
/// default never forgets a group before its rule could alert (an audit found "first `su` in 30
/// days" firing for a user seen 8 days before), nor as it alerts (`absent(ok) for 7d` fired
/// and was resolved `forgotten` at the same instant).
#[test]
fn the_default_forget_after_covers_the_patterns_longest_wait() {
    let events = "events.su = 'syslog and app == \"su\"'\n";
    for (pattern, days) in [
        ("absent(su) for 60s", 7),
        ("absent(su) for 3d", 7),
        ("absent(su) for 7d", 14),
        ("seq(su, absent(su) for 8d)", 16),
        ("seq(absent(su) for 30d, su)", 60),
        ("su{5,} within 14d", 28),
    ] {
        let c = compile_str(
            "t.toml",
            &rule_text(&format!(
                "group_by = [\"host\"]\n{events}pattern = \"{pattern}\""
            )),
        );
        let rules = c
            .rules
            .unwrap_or_else(|| panic!("{pattern}: {:?}", c.diagnostics));
        assert_eq!(
            rules.rules[0].forget_after,
            cepheus_core::time::Duration::from_secs(days * 86_400),
            "{pattern}"
        );
    }
}

/// A misspelt time mode is the error, alone: `max_delay` beside it is not also said to have
/// no effect with processing time (the author meant event time).
#[test]
fn a_misspelt_time_mode_is_said_alone() {
    let text =
        rule_text("time = \"evnt\"\nmax_delay = \"10s\"\nevents.a = 'syslog'\npattern = \"a\"");
    let c = compile_str("t.toml", &text);
    assert_eq!(
        messages(&c),
        [(Level::Error, "unknown time mode `evnt`".to_string())]
    );
}

/// An absence-only rule per group watches only groups it has seen or is told of: with no
/// `expect`, or one that lists no group (an empty list, an empty file), it is warned of; with
/// a group listed, or a file that says in comments that none is listed yet (as the installer
/// leaves `hosts.txt`: warned at every start and reload, the warning was noise), not.
#[test]
fn an_absence_rule_with_no_group_to_expect_is_warned_of() {
    let text = |expect: &str| {
        rule_text(&format!(
            "group_by = [\"host\"]\n{expect}events.ok = 'syslog and app == \"ok\"'\npattern = \"absent(ok) for 1m\""
        ))
    };
    let warned = |c: &Compiled| -> Vec<String> {
        assert!(c.rules.is_some(), "{:?}", errors(c));
        messages_at(c, Level::Warning)
    };
    let never = "a group never seen will never alert";
    for expect in ["", "expect = []\n"] {
        let w = warned(&compile_str("t.toml", &text(expect)));
        assert!(w.len() == 1 && w[0].contains(never), "{expect}: {w:?}");
    }
    let file = "expect = { file = \"hosts.txt\" }\n";
    let w = warned(&with_hosts(&text(file), "\n"));
    assert!(
        w.len() == 1 && w[0].contains("`expect` lists no group"),
        "{w:?}"
    );
    assert!(warned(&with_hosts(&text(file), "# none yet\n")).is_empty());
    assert!(warned(&with_hosts(&text(file), "web-1\n")).is_empty());
    assert!(warned(&compile_str("t.toml", &text("expect = [\"web-1\"]\n"))).is_empty());
}

/// A `forget_after` shorter than the pattern's longest wait, or equal to it, is warned of:
/// the group would be forgotten before it could alert, or as it alerts.
#[test]
fn a_forget_after_no_longer_than_the_wait_is_warned_of() {
    let body = |f: &str| {
        rule_text(&format!(
            "group_by = [\"host\"]\nforget_after = \"{f}\"\nevents.ok = 'syslog and app == \"ok\"'\npattern = \"absent(ok) for 7d\""
        ))
    };
    for (f, want) in [
        ("6d", Some("is shorter than the pattern's 7d")),
        (
            "7d",
            Some("is the pattern's 7d: a silent group is forgotten as it alerts"),
        ),
        ("8d", None),
    ] {
        let c = compile_str("t.toml", &body(f));
        assert!(c.rules.is_some(), "{f}: {:?}", errors(&c));
        let mut warned = messages_at(&c, Level::Warning);
        warned.retain(|m| m.contains("forget_after"));
        match want {
            Some(w) => assert!(warned.iter().any(|m| m.contains(w)), "{f}: {warned:?}"),
            None => assert!(warned.is_empty(), "{f}: {warned:?}"),
        }
    }
    // A `within` alone alerts on an event: one as long is no trouble.
    let text = rule_text(
        "group_by = [\"host\"]\nforget_after = \"1h\"\nevents.a = 'syslog and app == \"a\"'\nevents.b = 'syslog and app == \"b\"'\npattern = \"seq(a, b) within 1h\"",
    );
    let c = compile_str("t.toml", &text);
    assert!(c.diagnostics.is_empty(), "{:?}", errors(&c));
}

/// `distinct(field)` needs a field every repeated event carries, as a group field does: a
/// flow field on events a syslog-only test matches, or an optional capture, is refused (an
/// audit found such rules accepted and never firing).
#[test]
fn a_distinct_field_some_events_lack_is_refused() {
    for (def, pattern, want) in [
        (
            "events.a = 'app == \"sshd\"'",
            "a{3,} distinct(dport) within 1m",
            "event `a` cannot always provide `dport` to count distinct values of: it can match syslog events",
        ),
        (
            "events.a = 'syslog and msg =~ \"closed by (?:user (?P<user>\\\\S+) )?(?P<src>\\\\S+) port\"'",
            "a{3,} distinct(user) within 1m",
            "event `a` cannot always provide `user` to count distinct values of: it can match without the capture",
        ),
    ] {
        let c = compile_str(
            "t.toml",
            &rule_text(&format!("{def}\npattern = \"{pattern}\"")),
        );
        assert!(c.rules.is_none(), "{pattern}");
        let errors = error_messages(&c);
        assert!(
            errors.iter().any(|e| e.contains(want)),
            "{pattern}: {errors:?}"
        );
    }
    // Carried by every event: accepted.
    let c = compile_str(
        "t.toml",
        &rule_text(
            "events.a = 'flow and kind == \"flow_start\"'\npattern = \"a{3,} distinct(dport) within 1m\"",
        ),
    );
    assert!(c.rules.is_some(), "{:?}", c.diagnostics);
}

/// `in` without brackets takes a network (or one address); a string or number there is
/// refused, since `msg in "Failed password"` reads as a substring test and meant `==` (found
/// by an audit).
#[test]
fn in_without_brackets_takes_only_a_network() {
    let c = compile_str(
        "t.toml",
        &rule_text("events.a = 'msg in \"Failed password\"'\npattern = \"a\""),
    );
    assert!(c.rules.is_none());
    let errors = messages(&c);
    assert!(
        errors.iter().any(|(l, m)| *l == Level::Error
            && m.contains("`in` without square brackets takes a network")),
        "{errors:?}"
    );
    for ok in ["src in 10.0.0.0/8", "peer in ::1", "app in [\"sshd\"]"] {
        let c = compile_str(
            "t.toml",
            &rule_text(&format!("events.a = '{ok}'\npattern = \"a\"")),
        );
        assert!(c.rules.is_some(), "{ok}: {:?}", c.diagnostics);
    }
}

/// A capture named as a field the matched event has itself replaces its value with message
/// text, which the sender writes: `peer` (the socket's address) is refused, any other is
/// warned about; a field of another source (`src` in a syslog message, for its type) is not.
#[test]
fn a_capture_replacing_the_events_own_field_is_refused_or_warned() {
    let c = compile_str(
        "t.toml",
        &rule_text("events.a = 'syslog and msg =~ \"from (?P<peer>\\S+)\"'\npattern = \"a\""),
    );
    assert!(c.rules.is_none(), "{:?}", c.diagnostics);
    assert!(
        messages(&c)
            .iter()
            .any(|(l, m)| *l == Level::Error && m.starts_with("a capture cannot be named `peer`")),
        "{:?}",
        c.diagnostics
    );
    // Over a structured-data parameter too (a syslog field).
    let c = compile_str(
        "t.toml",
        &rule_text("events.a = 'syslog and sd.origin.ip =~ \"(?P<peer>\\S+)\"'\npattern = \"a\""),
    );
    assert!(c.rules.is_none(), "{:?}", c.diagnostics);
    let c = compile_str(
        "t.toml",
        &rule_text(
            "events.a = 'syslog and msg =~ \"from (?P<host>\\S+) port (?P<src>\\S+)\"'\npattern = \"a\"",
        ),
    );
    assert!(c.rules.is_some(), "{:?}", c.diagnostics);
    let said = messages(&c);
    assert_eq!(
        said.iter()
            .filter(|(l, m)| *l == Level::Warning && m.contains("replaces the event's own"))
            .map(|(_, m)| m.as_str())
            .collect::<Vec<_>>(),
        [
            "the capture `host` replaces the event's own `host` with text from the message, in grouping, conditions and the alert's events"
        ],
        "{said:?}"
    );
}

/// A capture named `time` would show one time in an alert's events while the match used
/// the event's own: refused, with the capture's regex under the caret.
#[test]
fn a_capture_named_time_is_refused() {
    let c = compile_str(
        "t.toml",
        &rule_text("events.a = 'syslog and msg =~ \"^ts=(?P<time>\\S+) \"'\npattern = \"a\""),
    );
    assert!(c.rules.is_none(), "{:?}", c.diagnostics);
    assert!(
        c.diagnostics
            .iter()
            .any(|d| d.message == "a capture cannot be named `time`: an event's time is its own"),
        "{:?}",
        c.diagnostics
    );
    // Other names, a registry field's included, stay captures.
    let c = compile_str(
        "t.toml",
        &rule_text(
            "events.a = 'syslog and msg =~ \"^ts=(?P<ts>\\S+) h=(?P<host>\\S+)\"'\npattern = \"a\"",
        ),
    );
    assert!(c.rules.is_some(), "{:?}", c.diagnostics);
}

/// Hints that say what to write: a negation before the test, an address's four parts, no
/// timestamp literal, a unit for a float duration.
#[test]
fn hints_for_common_slips_say_what_to_write() {
    for (cond, help) in [
        (
            "app not in [\"a\"]",
            "a negation goes before the test: `not (app in",
        ),
        ("src == 10.0.0", "an IPv4 address has four parts"),
        (
            "time > \"2026-01-01T00:00:00Z\"",
            "there is no timestamp literal",
        ),
        ("duration > 1.5", "give a unit: 1.5s"),
    ] {
        let c = compile_str(
            "t.toml",
            &rule_text(&format!("events.a = '{cond}'\npattern = \"a\"")),
        );
        assert!(c.rules.is_none(), "{cond}");
        assert!(
            c.diagnostics
                .iter()
                .any(|d| d.help.as_deref().is_some_and(|h| h.contains(help))),
            "{cond}: {:?}",
            c.diagnostics
        );
    }
}

/// `sd.origin` names an SD-ID, not a parameter: no event carries it, so a test of it is
/// warned of (it was silently never true).
#[test]
fn a_structured_data_id_alone_is_warned_of() {
    let c = compile_str(
        "t.toml",
        &rule_text("events.a = 'syslog and exists(sd.origin)'\npattern = \"a\""),
    );
    assert!(c.rules.is_some(), "a warning only");
    assert!(
        c.diagnostics.iter().any(|d| d.message
            == "`sd.origin` is never set: structured data gives one field per parameter"),
        "{:?}",
        c.diagnostics
    );
    let c = compile_str(
        "t.toml",
        &rule_text(
            "events.a = 'syslog and exists(sd.origin.ip) and sd.x@1.a == \"1\"'\npattern = \"a\"",
        ),
    );
    assert!(c.diagnostics.is_empty(), "{:?}", c.diagnostics);
}

/// `{count}` is the alert's own (how many events its match or episode took): a message may
/// name it in any rule, an absence's included, without a warning; a group field named
/// `count` is shown instead.
#[test]
fn a_message_may_name_the_count_of_its_events() {
    for (body, shows) in [
        (
            "group_by = [\"host\"]\nmessage = \"{count} failures on {host}\"\nevents.f = 'syslog and app == \"f\"'\npattern = \"f{5,} within 1m\"",
            true,
        ),
        (
            "group_by = [\"host\"]\nexpect = [\"a\"]\nmessage = \"{host} silent ({count})\"\nevents.hb = 'syslog and app == \"hb\"'\npattern = \"absent(hb) for 1m\"",
            true,
        ),
        (
            "group_by = [\"count\"]\nmessage = \"{count}\"\nevents.f = { if = 'syslog and app == \"f\"', count = \"host\" }\npattern = \"f\"",
            false,
        ),
    ] {
        let c = compile_str("t.toml", &rule_text(body));
        assert!(c.diagnostics.is_empty(), "{body}: {:?}", c.diagnostics);
        let rules = c.rules.expect("compiles");
        assert_eq!(rules.rules[0].shows_count(), shows, "{body}");
    }
}
