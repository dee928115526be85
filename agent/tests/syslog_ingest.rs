//! Syslog ingest against real corpora (loghub with its ground truth, syslog_loose's own test
//! and bench inputs), the time rules (zone, year), and random bytes (no panic, ever).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use cepheus_core::event::{Event, Field, FieldKey, Source, Value};
use cepheus_core::time::Timestamp;
use proptest::prelude::*;

use crate::ingest::Malformed;
use crate::ingest::input::{Counters, Inputs, open_inputs};
use crate::ingest::jsonl::parse_json_event;
use crate::ingest::syslog::{SyslogParser, Year, Zone};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/syslog")
        .join(name)
}

fn read(name: &str) -> String {
    std::fs::read_to_string(data(name)).unwrap()
}

fn at(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn text(e: &Event, f: Field) -> Option<&str> {
    e.get(f).and_then(Value::as_str)
}

fn sd<'a>(e: &'a Event, name: &str) -> Option<&'a str> {
    e.get_key(&FieldKey::from_name(name))
        .and_then(Value::as_str)
}

/// A minimal RFC 4180 reader (quoted fields, doubled quotes); enough for loghub's CSVs.
fn csv_rows(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\r') => {}
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => field.push(c),
        }
    }
    if !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    rows
}

/// Parses every line of a loghub log and compares host/app/procid/msg with the ground truth.
/// `cols` are the CSV columns of (host, app or None, pid, content).
///
/// `divergent` lists the line numbers where loghub's hand-made split differs from what a
/// syslog daemon does, each checked to differ (so the list cannot go stale).
fn check_loghub(
    log: &str,
    csv: &str,
    cols: (usize, Option<usize>, usize, usize),
    app: &str,
    divergent: &[usize],
) {
    let parser = SyslogParser::new(Zone::default(), Year::Fixed(2005));
    let log_text = read(log);
    let lines: Vec<&str> = log_text.lines().collect();
    let rows = csv_rows(&read(csv));
    assert_eq!(rows.len(), lines.len() + 1, "header + one row per line");
    let arrival = at("2005-12-31T00:00:00Z");
    let mut mismatches = Vec::new();
    for (i, (line, row)) in lines.iter().zip(&rows[1..]).enumerate() {
        let e = match parser.parse(line.as_bytes(), arrival, None) {
            Ok(e) => e,
            Err(err) => panic!("line {}: {err}: {line}", i + 1),
        };
        assert_eq!(e.source, Source::Syslog);
        assert_ne!(e.time, arrival, "line {} has a stamp", i + 1);
        let want_app = cols.1.map_or(app, |c| row[c].as_str());
        let pid = row[cols.2].as_str();
        let got = (
            text(&e, Field::Host),
            text(&e, Field::App),
            text(&e, Field::Procid),
            text(&e, Field::Msg).map(str::trim),
        );
        // A line rsyslog folded (`message repeated 5 times: [ MSG]`): the event is MSG, with
        // the count in `repeat`.
        let content = row[cols.3].trim();
        let content = match content
            .strip_prefix("message repeated ")
            .and_then(|r| r.split_once(" times: ["))
            .and_then(|(n, m)| Some((n.parse::<i64>().ok()?, m.strip_suffix(']')?)))
        {
            Some((n, inner)) => {
                assert_eq!(
                    e.get(Field::Repeat),
                    Some(&cepheus_core::event::Value::Int(n)),
                    "line {}",
                    i + 1
                );
                inner.trim()
            }
            None => content,
        };
        let want = (
            Some(row[cols.0].as_str()),
            Some(want_app),
            (!pid.is_empty()).then_some(pid),
            Some(content),
        );
        if divergent.contains(&(i + 1)) {
            assert_ne!(
                got,
                want,
                "line {} is listed as divergent but matches",
                i + 1
            );
        } else if got != want {
            mismatches.push(format!("line {}: got {got:?}, want {want:?}", i + 1));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

#[test]
fn syslog_loghub_openssh_matches_ground_truth() {
    // LineId,Date,Day,Time,Component(host),Pid,Content,...; every line is sshd.
    check_loghub(
        "loghub_OpenSSH_2k.log",
        "loghub_OpenSSH_2k.log_structured.csv",
        (4, None, 5, 6),
        "sshd",
        &[],
    );
}

#[test]
fn syslog_loghub_linux_matches_ground_truth() {
    // LineId,Month,Date,Time,Level(host),Component(app),PID,Content,...
    check_loghub(
        "loghub_Linux_2k.log",
        "loghub_Linux_2k.log_structured.csv",
        (4, Some(5), 6, 7),
        "",
        // `combo syslogd 1.4.1: restart.`: loghub's Component is `syslogd 1.4.1`; an RFC 3164
        // tag ends at the first space, so app is `syslogd` and msg `1.4.1: restart.` (rsyslog
        // reads it the same way). `combo -- root[2421]: ROOT LOGIN ON tty2`: loghub takes
        // `-- root` as the app; the parser sees `-` (nil) and keeps the rest as msg.
        &[146, 374, 714, 899, 1086, 1364, 1754, 1908],
    );
}

#[test]
fn syslog_loghub_time_and_year() {
    let parser = SyslogParser::new(Zone::default(), Year::Fixed(2005));
    let first = read("loghub_Linux_2k.log");
    let first = first.lines().next().unwrap();
    let e = parser
        .parse(first.as_bytes(), Timestamp::default(), None)
        .unwrap();
    assert_eq!(e.time, at("2005-06-14T15:16:01Z"));
}

#[test]
fn syslog_loose_bench_lines_parse() {
    let p = SyslogParser::default();
    let arrival = at("2019-03-01T00:00:00Z");
    let cases: &[(&str, &str, &str, Option<&str>)] = &[
        // file, host, app, an SD field that must be present
        ("rfc3164_long_msg", "plertrood-thinkpad-x220", "nginx", None),
        (
            "rfc3164_rfc3339_timestamp",
            "74794bfb6795",
            "liblogging-stdlog",
            Some("sd.origin.software"),
        ),
        ("rfc3164_simple", "74794bfb6795", "root", None),
        (
            "rfc3164_with_structured_data",
            "74794bfb6795",
            "liblogging-stdlog",
            Some("sd.origin.x-pid"),
        ),
        (
            "rfc5424_with_structured_data",
            "mymachine.example.com",
            "evntslog",
            Some("sd.exampleSDID@32473.iut"),
        ),
        (
            "rfc5424_with_structured_data_long_msg",
            "mymachine.example.com",
            "evntslog",
            None,
        ),
        (
            "rfc5424_without_structured_data",
            "mymachine.example.com",
            "evntslog",
            None,
        ),
        (
            "rfc5424_without_structured_data_long_msg",
            "mymachine.example.com",
            "evntslog",
            Some("sd.exampleSDID@32473.eventSource"),
        ),
    ];
    for (file, host, app, sd_key) in cases {
        let line = read(&format!("syslog_loose_bench_{file}.txt"));
        let e = p
            .parse(line.as_bytes(), arrival, None)
            .unwrap_or_else(|err| panic!("{file}: {err}"));
        assert_eq!(text(&e, Field::Host), Some(*host), "{file}");
        assert_eq!(text(&e, Field::App), Some(*app), "{file}");
        assert!(e.get(Field::Facility).is_some(), "{file}");
        assert!(!text(&e, Field::Msg).unwrap_or("").is_empty(), "{file}");
        if let Some(k) = sd_key {
            assert!(sd(&e, k).is_some(), "{file}: {k} missing in {:?}", e.fields);
        }
    }
}

#[test]
fn syslog_loose_test_inputs_are_events_or_malformed() {
    let p = SyslogParser::default();
    let arrival = at("2026-02-01T00:00:00Z");
    let mut seen = 0;
    for line in read("syslog_loose_test_inputs.jsonl").lines() {
        let case: serde_json::Value = serde_json::from_str(line).unwrap();
        let name = case["test_fn"].as_str().unwrap();
        let input = case["input"].as_str().unwrap();
        let got = p.parse(input.as_bytes(), arrival, None);
        seen += 1;
        let garbage = [
            "parse_invalid_message",
            "syslog_ng_network_syslog_protocol",
            "parse_exact_error",
        ];
        if garbage.contains(&name) {
            assert_eq!(got, Err(Malformed::NotSyslog), "{name}");
            continue;
        }
        let e = got.unwrap_or_else(|err| panic!("{name}: {err}: {input}"));
        assert!(text(&e, Field::Msg).is_some(), "{name}");
        match name {
            "parse_5424_structured_data" => {
                assert_eq!(sd(&e, "sd.exampleSDID@32473.iut"), Some("3"));
                assert_eq!(
                    sd(&e, "sd.exampleSDID@32473.eventSource"),
                    Some("Application")
                );
                assert_eq!(sd(&e, "sd.exampleSDID@32473.eventID"), Some("1011"));
                assert_eq!(text(&e, Field::Msgid), Some("ID47"));
                assert_eq!(e.get(Field::Facility), Some(&Value::Int(20)));
                assert_eq!(e.get(Field::Severity), Some(&Value::Int(5)));
                assert_eq!(e.time, at("2003-10-11T22:14:15.003Z"));
                assert_eq!(
                    text(&e, Field::Msg),
                    Some("BOMAn application event log entry...")
                );
            }
            "parse_5424_empty_structured_data" => {
                assert_eq!(sd(&e, "sd.exampleSDID@32473.eventSource"), Some(""));
            }
            "parse_5424_multiple_structured_data" => {
                assert_eq!(sd(&e, "sd.examplePriority@32473.class"), Some("high"));
                assert_eq!(
                    sd(&e, "sd.exampleSDID@32473.eventSource"),
                    Some("Application")
                );
            }
            "parse_rsyslog" => {
                assert_eq!(sd(&e, "sd.origin.swVersion"), Some("8.32.0"));
                assert_eq!(text(&e, Field::Msg), Some("start"));
            }
            "parse_haproxy" => {
                assert_eq!(text(&e, Field::Host), None);
                assert_eq!(text(&e, Field::App), Some("haproxy"));
                assert_eq!(text(&e, Field::Procid), Some("73411"));
            }
            "parse_5424_no_timestamp" => assert_eq!(e.time, arrival),
            "non_leapyear" => {
                // Feb 29 in no year near the arrival's (2026-02-01): the last leap year's.
                assert_eq!(e.time, at("2024-02-29T14:07:19Z"));
                assert_eq!(text(&e, Field::Host), Some("myhostname"));
                assert_eq!(e.get(Field::Facility), Some(&Value::Int(16)));
                assert_eq!(e.get(Field::Severity), Some(&Value::Int(6)));
            }
            "parse_european_chars" => {
                assert_eq!(text(&e, Field::Host), Some("Übergröße"));
            }
            "logical_system_juniper_routers" | "parse_missing_pri_5424" => {
                assert_eq!(text(&e, Field::App), Some("OX-XXX-CONTEUDO:rpd"));
                assert_eq!(e.time, at("2020-05-22T17:59:09.250Z"));
            }
            "parse_ipv6_hostname" => {
                assert_eq!(text(&e, Field::Host), Some("::FFFF:129.144.52.38"));
            }
            _ => {}
        }
    }
    assert_eq!(seen, 29);
}

#[test]
fn syslog_year_resolution() {
    let p = SyslogParser::default();
    let dec = b"<13>Dec 28 16:49:07 host app: x";
    // December read in January: last year.
    let e = p.parse(dec, at("2027-01-03T08:00:00Z"), None).unwrap();
    assert_eq!(e.time, at("2026-12-28T16:49:07Z"));
    // December read in December: this year.
    let e = p.parse(dec, at("2026-12-29T08:00:00Z"), None).unwrap();
    assert_eq!(e.time, at("2026-12-28T16:49:07Z"));
    // More than a month ahead of the arrival: last year.
    let jul = b"<13>Jul  4 12:00:00 host app: x";
    let e = p.parse(jul, at("2026-05-01T00:00:00Z"), None).unwrap();
    assert_eq!(e.time, at("2025-07-04T12:00:00Z"));
    // A few days ahead (sender clock drift): this year.
    let e = p.parse(jul, at("2026-06-30T00:00:00Z"), None).unwrap();
    assert_eq!(e.time, at("2026-07-04T12:00:00Z"));
    // January read on New Year's Eve: next year (syslog-ng does the same).
    let jan = b"<13>Jan  1 00:00:05 host app: x";
    let e = p.parse(jan, at("2026-12-31T23:59:58Z"), None).unwrap();
    assert_eq!(e.time, at("2027-01-01T00:00:05Z"));
    // replay --year: fixed whatever the arrival.
    let fixed = SyslogParser::new(Zone::default(), Year::Fixed(2019));
    for arrival in ["2027-01-03T08:00:00Z", "2020-06-01T00:00:00Z"] {
        let e = fixed.parse(dec, at(arrival), None).unwrap();
        assert_eq!(e.time, at("2019-12-28T16:49:07Z"));
    }
    // An explicit year in the stamp wins over both.
    let e = fixed
        .parse(
            b"<13>Dec 28 2008 16:49:07 host app: x",
            at("2026-01-01T00:00:00Z"),
            None,
        )
        .unwrap();
    assert_eq!(e.time, at("2008-12-28T16:49:07Z"));
}

#[test]
fn syslog_zone_applies_to_3164_stamps_only() {
    let plus2 = SyslogParser::new("+02:00".parse().unwrap(), Year::Fixed(2026));
    let arrival = at("2026-06-01T00:00:00Z");
    let bsd = plus2
        .parse(b"<13>Feb 13 20:07:26 h root[1]: x", arrival, None)
        .unwrap();
    assert_eq!(bsd.time, at("2026-02-13T18:07:26Z"));
    // With an explicit year, too (syslog_loose alone would read that wall clock as UTC).
    let bsd_year = plus2
        .parse(b"<13>Feb 13 2026 20:07:26 h root[1]: x", arrival, None)
        .unwrap();
    assert_eq!(bsd_year.time, at("2026-02-13T18:07:26Z"));
    // RFC 5424 and RFC 3339 stamps carry their own offset.
    let rfc5424 = plus2
        .parse(
            b"<13>1 2026-02-13T20:07:26-03:00 h app - - - x",
            arrival,
            None,
        )
        .unwrap();
    assert_eq!(rfc5424.time, at("2026-02-13T23:07:26Z"));
    let rsyslog = plus2
        .parse(b"<13>2026-02-13T20:07:26Z h app: x", arrival, None)
        .unwrap();
    assert_eq!(rsyslog.time, at("2026-02-13T20:07:26Z"));
    // The default zone is UTC.
    let utc = SyslogParser::default();
    let e = utc
        .parse(
            b"Feb 13 20:07:26 h root[1]: x",
            at("2026-03-01T00:00:00Z"),
            None,
        )
        .unwrap();
    assert_eq!(e.time, at("2026-02-13T20:07:26Z"));
}

#[test]
fn syslog_fields_peer_and_lossy_utf8() {
    let p = SyslogParser::default();
    let peer: IpAddr = "10.0.0.13".parse().unwrap();
    let arrival = at("2026-02-14T00:00:00Z");
    let mut line = b"<38>Feb 13 20:07:26 web-3 heartbeat[77]: alive \xff\xfe ok\r\n\0".to_vec();
    let e = p.parse(&line, arrival, Some(peer)).unwrap();
    assert_eq!(e.arrival, arrival);
    assert_eq!(e.get(Field::Peer), Some(&Value::Ip(peer)));
    assert_eq!(e.get(Field::Facility), Some(&Value::Int(4)));
    assert_eq!(e.get(Field::Severity), Some(&Value::Int(6)));
    assert_eq!(text(&e, Field::Host), Some("web-3"));
    assert_eq!(text(&e, Field::App), Some("heartbeat"));
    assert_eq!(text(&e, Field::Procid), Some("77"));
    assert_eq!(text(&e, Field::Msg), Some("alive \u{fffd}\u{fffd} ok"));
    // The same through &str bytes and with a leading newline (TCP framing leftovers).
    line.insert(0, b'\n');
    assert_eq!(p.parse(&line, arrival, Some(peer)).unwrap(), e);
}

#[test]
fn syslog_replay_inputs_read_the_corpus() {
    let mut inputs = open_inputs(
        &[
            data("loghub_OpenSSH_2k.log"),
            data("syslog_loose_test_inputs.jsonl"),
        ],
        SyslogParser::new(Zone::default(), Year::Fixed(2005)),
        Timestamp::default(),
    )
    .unwrap();
    let mut ok = 0;
    let mut bad = Vec::new();
    for item in inputs.by_ref() {
        let item = item.unwrap();
        match item.event {
            Ok(_) => ok += 1,
            Err(e) => bad.push((item.source_name, item.line_no, e)),
        }
    }
    // The JSONL file is not in the event schema: each of its 29 lines lacks `source`.
    assert_eq!(ok, 2000);
    assert_eq!(bad.len(), 29);
    assert!(
        bad.iter()
            .all(|(_, _, e)| *e == Malformed::Missing("source"))
    );
    assert_eq!(
        inputs.counters(),
        Counters {
            read: 2029,
            malformed: 29,
            oversized: 0,
        }
    );
}

#[test]
fn syslog_json_events_for_rule_tests() {
    let e = parse_json_event(
        r#"{"source":"syslog","time":"2026-01-01T00:00:00Z","host":"web-1","app":"heartbeat","msg":"alive","peer":"10.0.0.13"}"#,
    )
    .unwrap();
    assert_eq!(e.source, Source::Syslog);
    assert_eq!(text(&e, Field::App), Some("heartbeat"));
    assert!(matches!(
        parse_json_event(r#"{"source":"syslog","time":"2026-01-01T00:00:00Z","hots":"x"}"#),
        Err(Malformed::UnknownField { field, near: Some("host") }) if field == "hots"
    ));
    let Err(e) = parse_json_event(r#"{"source":"flow","time":"2026-01-01T00:00:00Z","dprot":22}"#)
    else {
        panic!("an unknown field is an error")
    };
    assert_eq!(
        e.to_string(),
        "unknown field `dprot` (did you mean `dport`?)"
    );
    let Err(e) = parse_json_event(r#"{"source":"flow","time":"2026-01-01T00:00:00Z","zzzzzz":1}"#)
    else {
        panic!("an unknown field is an error")
    };
    assert_eq!(e.to_string(), "unknown field `zzzzzz`");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn syslog_input_reader_random_bytes(
        bytes in proptest::collection::vec(
            prop_oneof![Just(b'\n'), Just(b'{'), Just(b' '), any::<u8>()], 0..400),
        cap in 1usize..40,
        buffer in 1usize..64,
    ) {
        let reader = std::io::BufReader::with_capacity(buffer, std::io::Cursor::new(bytes.clone()));
        let mut inputs = Inputs::from_readers(
            vec![("rand".into(), Box::new(reader))],
            SyslogParser::default(),
            Timestamp::default(),
        )
        .with_max_line(cap);
        let items: Vec<_> = inputs.by_ref().map(Result::unwrap).collect();
        let c = inputs.counters();
        // A JSON event line (its first byte past a mark and blanks is `{`) has a larger cap.
        let cap_of = |l: &[u8]| {
            let body = l.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(l);
            if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
                cap * cepheus_agent::ingest::input::JSON_LINE_FACTOR
            } else {
                cap
            }
        };
        // Every non-blank or oversized line is one item, numbered as in the input.
        let lines: Vec<(u64, &[u8])> = bytes
            .split(|b| *b == b'\n')
            .enumerate()
            .map(|(i, l)| (i as u64 + 1, l))
            // Blank lines are skipped, unless over the cap (the reader only sees its start).
            .filter(|(_, l)| l.len() > cap_of(l) || !l.iter().all(|b| b.is_ascii_whitespace() || *b == 0))
            .collect();
        prop_assert_eq!(items.len(), lines.len());
        prop_assert_eq!(c.read, items.len() as u64);
        for (item, (no, line)) in items.iter().zip(&lines) {
            prop_assert_eq!(item.line_no, *no);
            let over = line.len() > cap_of(line);
            prop_assert_eq!(
                over,
                item.event == Err(Malformed::Oversized { limit: cap_of(line) }),
                "line {:?}",
                line
            );
        }
        prop_assert_eq!(
            c.oversized,
            lines.iter().filter(|(_, l)| l.len() > cap_of(l)).count() as u64
        );
        prop_assert_eq!(c.malformed, items.iter().filter(|i| i.event.is_err()).count() as u64);
    }

}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn syslog_random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let p = SyslogParser::new("Europe/Paris".parse().unwrap(), Year::Resolve);
        let _ = p.parse(&bytes, at("2026-01-01T00:00:00Z"), None);
        let _ = parse_json_event(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn syslog_syslogish_text_never_panics(
        line in r#"(<[0-9]{1,5}>)?(1 )?([A-Za-z]{3} {1,2}[0-9]{1,3} (-?[0-9]{1,7} )?[0-9]{1,3}:[0-9]{1,3}:[0-9]{1,3}|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{8,12}(Z|[+-][0-9]{2}:[0-9]{2})|-)? ?[a-z\-]{0,8} ?[a-z]{0,6}(\[[0-9a-z]{0,6}\])?:? ?(\[[a-z@0-9]{0,5}( [a-z]{1,3}="[^"]{0,4}"){0,2}\])* ?.{0,20}"#,
        year in prop_oneof![Just(Year::Resolve), (-300i32..3000).prop_map(Year::Fixed)],
        arrival in any::<i64>(),
    ) {
        let p = SyslogParser::new("-12:00".parse().unwrap(), year);
        let _ = p.parse(line.as_bytes(), Timestamp(arrival), None);
        let _ = SyslogParser::new("America/New_York".parse().unwrap(), year)
            .parse(line.as_bytes(), Timestamp(arrival), None);
    }

    #[test]
    fn syslog_json_like_never_panics(
        line in r#"\{("(source|time|arrival|dport|src|duration|msg|sd\.a\.b|x)":("syslog"|"flow"|"2026-01-01T00:00:00Z"|-?[0-9]{1,25}(\.[0-9]{1,3})?(e[0-9]{1,3})?|"[0-9.:a-z]{0,10}"|null|true|\[\]),?){0,6}\}"#
    ) {
        let _ = parse_json_event(&line);
    }
}
