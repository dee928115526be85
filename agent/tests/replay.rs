//! `cepheus replay` through the binary, against independent counts and the peers' scorer.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn cepheus() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cepheus"))
}

/// Runs the binary; returns stdout (alert lines) after asserting success.
fn replay(args: &[&str]) -> String {
    let out = cepheus().arg("replay").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "replay {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `cepheus rules test PATH`: the exit code, and stdout followed by stderr.
fn rules_test(path: &Path) -> (Option<i32>, String) {
    let out = cepheus()
        .args(["rules", "test"])
        .arg(path)
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

fn python() -> Option<&'static str> {
    let ok = Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Some("python3")
    } else {
        eprintln!("SKIP: python3 not found (the independent counts are Python scripts)");
        None
    }
}

fn epoch(rfc3339: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .unwrap()
        .timestamp()
}

#[test]
fn ssh_rules_on_real_openssh_log_match_an_independent_count() {
    let Some(py) = python() else { return };
    let log = manifest().join("tests/data/syslog/loghub_OpenSSH_2k.log");
    let rules = manifest().join("../rules/ssh.toml");
    let alerts = replay(&[
        "--rules",
        rules.to_str().unwrap(),
        "--year",
        "2024",
        log.to_str().unwrap(),
    ]);
    let mut got: Vec<String> = alerts
        .lines()
        .map(|l| {
            let a: Value = serde_json::from_str(l).unwrap();
            format!(
                "{} {} {} {}",
                a["rule"].as_str().unwrap(),
                a["state"].as_str().unwrap(),
                a["group"]["src"].as_str().unwrap(),
                epoch(a["time"].as_str().unwrap())
            )
        })
        .collect();
    got.sort();
    let script = manifest().join("tests/fixtures/ssh_count.py");
    let out = Command::new(py)
        .arg(&script)
        .arg("2024")
        .arg(&log)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert!(!want.is_empty(), "the log has brute-force episodes");
    assert_eq!(got, want);
}

#[test]
fn replay_is_byte_identical_across_runs() {
    let log = manifest().join("tests/data/syslog/loghub_OpenSSH_2k.log");
    let rules = manifest().join("../rules");
    let args = [
        "--rules",
        rules.to_str().unwrap(),
        "--year",
        "2024",
        "--until",
        "+1h",
        log.to_str().unwrap(),
    ];
    let a = replay(&args);
    let b = replay(&args);
    assert!(!a.is_empty());
    assert_eq!(a, b);
}

fn score_seed(py: &str, dir: &Path, seed: u32, hosts: u32, lines: u32) {
    let fx = manifest().join("tests/fixtures/peers");
    let prefix = dir.join(format!("w{seed}"));
    let st = Command::new(py)
        .arg(fx.join("gen_workload.py"))
        .args([
            "--hosts",
            &hosts.to_string(),
            "--lines",
            &lines.to_string(),
            "--seed",
            &seed.to_string(),
        ])
        .arg("--out")
        .arg(&prefix)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let log = prefix.with_extension("log");
    let alerts = replay(&[
        "--rules",
        fx.join("rules.toml").to_str().unwrap(),
        "--year",
        "2026",
        log.to_str().unwrap(),
    ]);
    let mut conv = Command::new(py)
        .arg(fx.join("to_score.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    conv.stdin
        .take()
        .unwrap()
        .write_all(alerts.as_bytes())
        .unwrap();
    let scored = conv.wait_with_output().unwrap();
    let lines_file = dir.join(format!("w{seed}.score"));
    std::fs::write(&lines_file, &scored.stdout).unwrap();
    let out = Command::new(py)
        .arg(fx.join("score.py"))
        .arg(prefix.with_extension("truth.json"))
        .arg(&lines_file)
        .output()
        .unwrap();
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in [
        "hb_missed",
        "hb_extra",
        "res_missed",
        "res_extra",
        "bf_missed",
        "bf_extra",
    ] {
        assert_eq!(s[k], 0, "seed {seed}: {k} in {s}");
    }
    assert!(
        s["hb_expected"].as_u64().unwrap() > 0 && s["bf_expected"].as_u64().unwrap() > 0,
        "{s}"
    );
}

#[test]
fn peers_workload_scores_exact_on_several_seeds() {
    let Some(py) = python() else { return };
    let dir = std::env::temp_dir().join(format!("cepheus-peers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for seed in [1, 2, 3, 7] {
        score_seed(py, &dir, seed, 300, 20_000);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_rules_exit_1_and_missing_input_exits_2() {
    let dir = std::env::temp_dir().join(format!("cepheus-badrules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[[rule]]\nname = \"x\"\nseverity = \"high\"\nevents.a = 'syslog and'\npattern = \"a\"\n",
    )
    .unwrap();
    let out = cepheus()
        .args(["replay", "--rules", bad.to_str().unwrap(), "-"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cepheus()
        .args(["replay", "--rules"])
        .arg(manifest().join("../rules"))
        .arg("/nonexistent/input.log")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/input.log"));
    // An empty file is read (nothing in it), and said, not taken for a quiet log.
    let empty = dir.join("empty.pcap");
    std::fs::write(&empty, "").unwrap();
    for cmd in ["replay", "events"] {
        let out = cepheus()
            .args([cmd, "--rules"])
            .arg(manifest().join("../rules"))
            .arg(&empty)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{cmd}: {err}");
        assert!(err.contains("the file is empty (0 bytes)"), "{cmd}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shipped_rules_pass_their_unit_tests() {
    let (code, stdout) = rules_test(&manifest().join("../rules"));
    assert_eq!(code, Some(0), "{stdout}");
    // Every shipped rule file has a test file beside it.
    for name in ["heartbeat", "ssh", "scan", "silent-agent"] {
        assert!(
            stdout.contains(&format!("{name}.test.toml")),
            "{name} has no tests: {stdout}"
        );
    }
    assert!(stdout.contains(" 0 failed"), "{stdout}");
}

/// A test file that cannot be run (a bad `until`, TOML that is no test file) is said, and
/// every other test still runs: the summary counts it and the exit code is 2.
#[test]
fn a_broken_test_file_does_not_stop_the_others() {
    let dir = std::env::temp_dir().join(format!("cepheus-ruletest-broken-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["heartbeat.toml", "heartbeat.test.toml", "hosts.txt"] {
        std::fs::copy(manifest().join("../rules").join(f), dir.join(f)).unwrap();
    }
    // A bad `until`, a mistyped key and a test with no name; the good test beside them runs.
    let bad_until = "[[test]]\nname = \"late\"\ninput = \"\"\nuntil = \"tomorrow\"\n\
                     [[test]]\nname = \"typo\"\ninputt = \"\"\n\
                     [[test]]\ninput = \"\"\n\
                     [[test]]\nname = \"fine\"\ninput = \"\"\n";
    std::fs::write(dir.join("a.test.toml"), bad_until).unwrap();
    std::fs::copy(dir.join("heartbeat.toml"), dir.join("a.toml")).unwrap();
    std::fs::write(dir.join("b.test.toml"), "[[tests]]\n").unwrap();
    let (code, stdout) = rules_test(&dir);
    assert_eq!(code, Some(2), "{stdout}");
    // Each said where it is (more of them in `per_test_errors_say_where_in_the_test_file`).
    let a = dir.join("a.test.toml").display().to_string();
    assert!(
        stdout.contains(&format!("ERROR late: {a}:4:9: `until`: `tomorrow`")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "ERROR test `typo` is not valid: {a}:7:1: unknown field `inputt`"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("(did you mean `input`?)"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "ERROR test number 3 is not valid: {a}:8:1: missing field `name`"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("ok fine"), "{stdout}");
    assert!(
        stdout.contains("b.test.toml is not a valid test file"),
        "{stdout}"
    );
    assert!(
        stdout.contains("3 test file(s): 3 passed, 0 failed, 4 could not be run"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A line of a test's input that is refused is said at its line in the test file.
#[test]
fn a_refused_test_input_line_is_said_at_its_line_in_the_test_file() {
    let dir = std::env::temp_dir().join(format!("cepheus-ruletest-lines-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(manifest().join("../rules/ssh.toml"), dir.join("ssh.toml")).unwrap();
    let text = "# line 1\n[[test]]\nname = \"lines\"\ninput = \"\"\"\nDec 10 06:55:46 gw sshd[1]: fine\n{\"source\": 1}\n\"\"\"\n[[test]]\nname = \"one line\"\ninput = '{\"time\": 2}'\n";
    std::fs::write(dir.join("ssh.test.toml"), text).unwrap();
    let (code, out) = rules_test(&dir);
    // (A refused line fails its test: the test would not test what it says.)
    assert_eq!(code, Some(1), "{out}");
    let file = dir.join("ssh.test.toml");
    for line in [6, 10] {
        let at = format!("{}:{line}: ", file.display());
        assert!(out.contains(&at), "{at} in {out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// What is wrong with one test (its `until`, a key, a value's type, an expectation) is said
/// at FILE:LINE:COLUMN of what is wrong, as a refused input line is said at its line.
#[test]
fn per_test_errors_say_where_in_the_test_file() {
    let (dir, _) = scratch_rules(
        "ruletest-where",
        "[[rule]]\nname = \"x\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nevents.a = 'syslog'\npattern = \"a\"\n",
    );
    let lines = [
        "[[test]]",                               // 1
        "name = \"late\"",                        // 2
        "input = \"\"",                           // 3
        "until = \"tomorrow\"",                   // 4
        "[[test]]",                               // 5
        "name = \"typo\"",                        // 6
        "input = \"\"",                           // 7
        "  inputt = \"\"",                        // 8
        "[[test]]",                               // 9
        "input = \"\"",                           // 10
        "[[test]]",                               // 11
        "name = \"type\"",                        // 12
        "input = \"\"",                           // 13
        "[[test.expect]]",                        // 14
        "rule = \"x\"",                           // 15
        "state = 3",                              // 16
        "[[test]]",                               // 17
        "name = \"expect key\"",                  // 18
        "input = \"\"",                           // 19
        "[[test.expect]]",                        // 20
        "rule = \"x\"",                           // 21
        "mesage = \"m\"",                         // 22
        "[[test]]",                               // 23
        "name = \"bad expectations\"",            // 24
        "input = \"<13>Jan  1 00:00:00 h a: x\"", // 25
        "rules_under_test = [\"x\", \"y\"]",      // 26
        "[[test.expect]]",                        // 27
        "rule = \"x\"",                           // 28
        "state = \"fired\"",                      // 29
        "group = { hots = \"h\" }",               // 30
        "time = \"yesterday\"",                   // 31
        "reason = \"because\"",                   // 32
        "[[test.expect]]",                        // 33
        "rule = \"z\"",                           // 34
        "[[test.expect]]",                        // 35
        "rule = \"x\"",                           // 36
        "[[test]]",                               // 37
        "name = \"fine\"",                        // 38
        "input = \"\"",                           // 39
    ];
    let test = dir.join("x.test.toml");
    std::fs::write(&test, lines.join("\n") + "\n").unwrap();
    let (code, out) = rules_test(&test);
    assert_eq!(code, Some(2), "{out}");
    let file = test.display().to_string();
    for want in [
        // The test cannot run: ERROR, the position before what is wrong.
        "ERROR late: {file}:4:9: `until`: `tomorrow`: expected an RFC 3339 time",
        "ERROR test `typo` is not valid: {file}:8:3: unknown field `inputt`",
        "ERROR test number 3 is not valid: {file}:9:1: missing field `name`",
        "ERROR test `type` is not valid: {file}:16:9: invalid type: integer `3`, expected a string",
        "ERROR test `expect key` is not valid: {file}:22:1: unknown field `mesage`",
        // (stderr: the position first.)
        "error: {file}:4:9: test `late`: `until`: `tomorrow`",
        "error: {file}:8:3: test `typo` is not valid: unknown field `inputt`",
        // The test fails: each bad expectation at its value.
        "{file}:26:26: rules_under_test: no rule named `y` in the rules under test (x)",
        "{file}:29:9: expect.state: `fired` is not an alert state",
        "{file}:30:11: expect.group: `hots` is not a group_by field of rule `x` (host)",
        "{file}:30:9: expect.group: rule `x` groups by host: name every field",
        "{file}:31:8: expect.time: `yesterday` is not an RFC 3339 time",
        "{file}:32:10: expect.reason: `because` is not a reason an alert gives",
        "{file}:34:8: expect.rule: no rule named `z` in the rules under test (x)",
        "{file}:35:1: expect.group: rule `x` groups by host: name every field",
        "ok fine",
        "1 test file(s): 1 passed, 1 failed, 5 could not be run",
    ] {
        let want = want.replace("{file}", &file);
        assert!(out.contains(&want), "{want}\n{out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Found by an audit: a group value the rule's field can never hold was only said as
/// `missing:` when no alert of the rule came, and a rule file the head names that cannot be
/// read was said without where it is named.
#[test]
fn group_values_of_the_wrong_type_and_missing_rule_files_are_said_where_written() {
    let (dir, _) = scratch_rules(
        "ruletest-types",
        "[[rule]]\nname = \"x\"\nseverity = \"low\"\ngroup_by = [\"peer\", \"port\"]\nevents.a = { if = 'syslog', port = \"procid\" }\npattern = \"a\"\n",
    );
    let test = dir.join("x.test.toml");
    std::fs::write(
        &test,
        "[[test]]\nname = \"t\"\ninput = \"\"\n[[test.expect]]\nrule = \"x\"\ngroup = { peer = \"not-ip\", port = \"p\" }\n[[test.expect]]\nrule = \"x\"\ngroup = { peer = 5, port = \"7\" }\n",
    )
    .unwrap();
    let (code, out) = rules_test(&test);
    assert_eq!(code, Some(1), "{out}");
    let file = test.display().to_string();
    for want in [
        format!(
            "{file}:6:11: expect.group: `peer` = \"not-ip\" is not a valid IP address (rule `x` takes `peer` from `peer`)"
        ),
        format!("{file}:9:11: expect.group: `peer` = 5 is not a valid IP address"),
    ] {
        assert!(out.contains(&want), "{want}\n{out}");
    }
    // (`procid` is text: any value fits, a number too, as it is matched as text.)
    assert!(!out.contains("`port` ="), "{out}");
    std::fs::write(
        &test,
        "[[test]]\nname = \"t\"\ninput = \"<13>1 2026-01-01T00:00:00Z h app 1234 - - x\"\n[[test.expect]]\nrule = \"x\"\ngroup = { peer = \"127.0.0.1\", port = 1234 }\n",
    )
    .unwrap();
    let (_, out) = rules_test(&test);
    assert!(!out.contains("expect.group"), "{out}");
    let named = dir.join("named.test.toml");
    std::fs::write(
        &named,
        "rules = [\"x.toml\", \"nothere.toml\"]\n[[test]]\nname = \"t\"\ninput = \"\"\n",
    )
    .unwrap();
    let (code, out) = rules_test(&named);
    assert_eq!(code, Some(2), "{out}");
    let want = format!("{}:1:20: rules: cannot read ", named.display());
    assert!(out.contains(&want), "{want}\n{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A line from a host whose clock is years ahead does not drag replay's clock forward when
/// the input goes on from where it was (found by an audit: it fired every absence, and an
/// event-time rule threw the later heartbeats away as late); the live agent counts it as
/// stamped ahead of its arrival, and so does replay now. A real gap (the input goes on from
/// the later time) still moves the clock.
#[test]
fn a_line_stamped_years_ahead_does_not_drag_replays_clock() {
    let rule = |time: &str| {
        format!(
            "[[rule]]\nname = \"hb\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nexpect = [\"h1\"]\n{time}events.hb = 'syslog and app == \"heartbeat\"'\npattern = \"absent(hb) for 60s\"\n"
        )
    };
    let beat = |t: &str| format!("<13>1 2026-05-01T{t}Z h1 heartbeat - - - alive\n");
    let mut text = String::new();
    for t in ["10:00:00", "10:00:30", "10:01:00", "10:01:30"] {
        text.push_str(&beat(t));
    }
    text.push_str("<13>1 2036-05-01T10:01:40Z sw7 kernel - - - clock not set\n");
    for t in ["10:02:00", "10:02:30", "10:03:00"] {
        text.push_str(&beat(t));
    }
    for time in ["", "time = \"event\"\n"] {
        let (dir, rules) = scratch_rules("replay-ahead", &rule(time));
        let input = dir.join("mix.log");
        std::fs::write(&input, &text).unwrap();
        let (out, err) = replay_with(&rules, &input);
        assert_eq!(out, "", "{time}: {err}");
        assert!(
            err.contains("1 event stamped ahead of its arrival"),
            "{err}"
        );
        assert!(err.contains(" 0 late"), "{err}");
        // The same with what comes right after it refused (`-- MARK --`, any number of
        // them) or dropped as a duplicate (the line relayed, many times): found by an audit,
        // the input's going back was looked for in the next item only.
        let bad = "<13>1 2036-05-01T10:01:40Z sw7 kernel - - - clock not set\n";
        for after in [
            "-- MARK --\n".to_string(),
            "-- MARK --\n".repeat(300),
            bad.repeat(300),
        ] {
            let with = text.replacen(bad, &format!("{bad}{after}"), 1);
            std::fs::write(&input, &with).unwrap();
            let (out, err) = replay_with(&rules, &input);
            assert_eq!(out, "", "{time} {after}: {err}");
            assert!(err.contains(" 0 late"), "{err}");
        }
        std::fs::write(&input, &text).unwrap();
        // A real gap, then one old message (buffered somewhere) a few lines on: still a gap
        // (found by a review: looking past the next event took the return for a wrong clock).
        let back = format!(
            "{text}<13>1 2026-05-01T12:00:00Z h1 heartbeat - - - alive\n<13>1 2026-05-01T12:00:10Z h1 heartbeat - - - alive\n<13>1 2026-05-01T10:03:50Z h2 app - - - late\n"
        );
        std::fs::write(&input, &back).unwrap();
        let (out, err) = replay_with(&rules, &input);
        assert!(out.contains("\"state\":\"firing\""), "{time}: {out}\n{err}");
        // (Only the 2036 line of `text` is stamped ahead.)
        assert!(
            err.contains("1 event stamped ahead of its arrival"),
            "{time}: {err}"
        );
        // A real gap: the input goes on from the later time; h1's silence fires.
        let gap = format!(
            "{text}<13>1 2026-05-01T12:00:00Z h1 heartbeat - - - alive\n<13>1 2026-05-01T12:00:30Z h1 heartbeat - - - alive\n"
        );
        std::fs::write(&input, &gap).unwrap();
        let (out, err) = replay_with(&rules, &input);
        assert!(out.contains("\"state\":\"firing\""), "{time}: {out}\n{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// RFC 3164 stamps in local time across the autumn change: the hour written twice is read
/// the second time as the later reading, following on from the lines before it (found by an
/// audit: read as the first, time stood still for an hour, a heartbeat fired and a beat was
/// dropped as a repeat). A heartbeat every 30 s, 00:00Z to 02:30Z on 25 October 2026, as
/// Berlin writes it (02:00 to 02:59 CEST, then CET again).
#[test]
fn local_stamps_across_the_autumn_change_follow_on() {
    let (dir, rules) = scratch_rules(
        "replay-dst",
        "[[rule]]\nname = \"hb\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nexpect = [\"h1\"]\nevents.hb = 'syslog and app == \"hb\"'\npattern = \"absent(hb) for 60s\"\n",
    );
    let mut text = String::new();
    for i in 0..300u32 {
        let utc = i * 30;
        // CEST (+2) until 01:00Z, then CET (+1).
        let local = utc + if utc < 3600 { 7200 } else { 3600 };
        let (h, m, sec) = (local / 3600, local / 60 % 60, local % 60);
        text.push_str(&format!(
            "<13>Oct 25 {h:02}:{m:02}:{sec:02} h1 hb: alive {i}\n"
        ));
    }
    let input = dir.join("berlin.log");
    std::fs::write(&input, text).unwrap();
    let out = cepheus()
        .args([
            "replay",
            "--year",
            "2026",
            "--tz",
            "Europe/Berlin",
            "--rules",
        ])
        .arg(&rules)
        .arg(&input)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "", "{stderr}");
    assert!(stderr.contains("replay: 300 events"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An input that can be read only once (a pipe, as `<(zcat old.log.gz)` gives; here
/// `/dev/stdin` naming a pipe) loses nothing to the look at its first bytes: every line of a
/// log, and a capture whole (an audit found the first 8 KiB gone, and a capture refused).
#[test]
fn an_input_read_once_loses_nothing_to_the_first_look() {
    use std::io::Write as _;
    let run = |args: &[&str], input: Vec<u8>| {
        let mut child = cepheus()
            .args(args)
            .arg("/dev/stdin")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let data = |p: &str| manifest().join("tests/data").join(p);
    let rules = manifest().join("../rules");
    let rules = rules.to_str().unwrap();
    let log = std::fs::read(data("syslog/loghub_OpenSSH_2k.log")).unwrap();
    let stderr = run(&["events", "--year", "2024"], log);
    assert!(
        stderr.contains("events: 2000 events, 0 malformed"),
        "{stderr}"
    );
    let pcap = std::fs::read(data("pcap/zeek_http_get.pcap")).unwrap();
    let piped = run(&["replay", "--rules", rules], pcap);
    let file = cepheus()
        .args(["replay", "--rules", rules])
        .arg(data("pcap/zeek_http_get.pcap"))
        .output()
        .unwrap();
    let file = String::from_utf8_lossy(&file.stderr);
    let events = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("replay: "))
            .and_then(|l| l.split(" events").next())
            .map(str::to_string)
    };
    assert!(events(&piped).is_some(), "{piped}");
    assert_eq!(events(&piped), events(&file), "{piped}\n{file}");
}

/// A Cisco stamp that names its zone is that instant, even where the configured zone's autumn
/// hour would read a stamp as its second pass (a review found `00:45:00 UTC` moved to 01:45).
#[test]
fn a_stamp_that_names_its_zone_is_not_moved_by_the_configured_zones_overlap() {
    let (dir, _) = scratch_rules("replay-named-zone", ANY_SYSLOG);
    let input = dir.join("cisco.log");
    std::fs::write(
        &input,
        "<13>Oct 27 03:05:00 host app: a\n<189>1: r1: Oct 27 00:45:00 UTC: %SYS-5-CONFIG_I: named\n",
    )
    .unwrap();
    let out = cepheus()
        .args(["events", "--year", "2024", "--tz", "Europe/Berlin"])
        .arg(&input)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let times: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split("\"time\":\"").nth(1))
        .map(|t| t.split('"').next().unwrap_or(""))
        .collect();
    assert_eq!(
        times,
        ["2024-10-27T02:05:00Z", "2024-10-27T00:45:00Z"],
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A test file that holds no test (empty, or a head with no `[[test]]`) is an error, as a
/// file that cannot be run: it would pass while testing nothing.
#[test]
fn a_test_file_without_tests_is_an_error() {
    let (dir, _) = scratch_rules("ruletest-none", ANY_SYSLOG);
    std::fs::copy(dir.join("x.toml"), dir.join("y.toml")).unwrap();
    std::fs::write(
        dir.join("y.test.toml"),
        "[[test]]\nname = \"fine\"\ninput = \"\"\n",
    )
    .unwrap();
    let test = dir.join("x.test.toml");
    for text in ["", "# to do\n", "year = 2024\ndedup_window = \"0s\"\n"] {
        std::fs::write(&test, text).unwrap();
        let (code, out) = rules_test(&dir);
        assert_eq!(code, Some(2), "{text:?}: {out}");
        let why = format!("no [[test]] in {}", test.display());
        assert!(out.contains(&format!("ERROR {why}")), "{text:?}: {out}");
        assert!(out.contains(&format!("error: {why}")), "{text:?}: {out}");
        assert!(out.contains("ok fine"), "{out}");
        assert!(
            out.contains("2 test file(s): 1 passed, 0 failed, 1 could not be run"),
            "{text:?}: {out}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `year` no time can be in (as `replay --year 3000` is refused) is an error for the file,
/// said at the value, not a refusal of every input line.
#[test]
fn a_test_file_year_out_of_range_is_an_error_at_its_key() {
    let (dir, _) = scratch_rules("ruletest-year", ANY_SYSLOG);
    let test = dir.join("x.test.toml");
    let input = "[[test]]\nname = \"t\"\ninput = \"<13>Dec 10 06:55:46 h a: x\"\n\
                 [[test.expect]]\nrule = \"x\"\n";
    for (year, ok) in [
        ("3000", false),
        ("1677", false),
        ("-5", false),
        ("1678", true),
        ("2261", true),
    ] {
        std::fs::write(&test, format!("# the year\nyear  = {year}\n{input}")).unwrap();
        let (code, out) = rules_test(&test);
        if ok {
            assert_eq!(code, Some(0), "{year}: {out}");
            continue;
        }
        assert_eq!(code, Some(2), "{year}: {out}");
        let at = format!(
            "{}:2:9: `year`: {year} is not a year from 1678 to 2261",
            test.display()
        );
        assert!(out.contains(&at), "{at} in {out}");
        assert!(!out.contains("timestamp out of range"), "{out}");
        assert!(
            out.contains("0 passed, 0 failed, 1 could not be run"),
            "{out}"
        );
    }
    // The other values of the file's head are said where they are too.
    for (head, why) in [
        ("tz = \"Mars/Olympus\"", "2:6: `tz`: unknown time zone"),
        ("dedup_window = \"soon\"", "2:16: dedup_window `soon`"),
    ] {
        std::fs::write(&test, format!("# the head\n{head}\n{input}")).unwrap();
        let (code, out) = rules_test(&test);
        assert_eq!(code, Some(2), "{out}");
        let at = format!("{}:{why}", test.display());
        assert!(out.contains(&at), "{at} in {out}");
    }
    // The same check as replay's `--year`.
    let out = cepheus()
        .args(["replay", "--year", "3000", "--rules"])
        .arg(dir.join("x.toml"))
        .arg(&test)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("3000 is not a year from 1678 to 2261"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failing_rule_test_reports_the_difference_and_exits_1() {
    let dir = std::env::temp_dir().join(format!("cepheus-ruletest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("hb.toml"),
        "[[rule]]\nname = \"hb\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nexpect = [\"a\"]\nevents.hb = 'syslog and app == \"heartbeat\"'\npattern = \"absent(hb) for 1m\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("hb.test.toml"),
        r#"
[[test]]
name = "wrong on purpose"
until = "+5m"
input = """
{"source":"syslog","time":"2024-01-01T00:00:00Z","host":"a","app":"heartbeat"}
"""
[[test.expect]]
rule = "hb"
group = { host = "b" }
"#,
    )
    .unwrap();
    let (code, stdout) = rules_test(&dir);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("missing:    hb firing {host=b}"),
        "{stdout}"
    );
    assert!(
        stdout.contains("unexpected: hb firing {host=a} at 2024-01-01T00:01:00Z"),
        "{stdout}"
    );
    // Group values are compared as the field's type reads them, and one that cannot be such
    // a value is said to be.
    std::fs::write(
        dir.join("peer.toml"),
        "[[rule]]\nname = \"p\"\nseverity = \"low\"\ngroup_by = [\"peer\"]\nevents.x = 'syslog and app == \"x\"'\npattern = \"x\"\n",
    )
    .unwrap();
    let peer_test = |group: &str| {
        std::fs::write(
            dir.join("peer.test.toml"),
            format!(
                r#"
[[test]]
name = "ip"
rules_under_test = ["p"]
input = """
{{"source":"syslog","time":"2024-01-01T00:00:00Z","host":"a","app":"x","peer":"10.0.0.2"}}
"""
[[test.expect]]
rule = "p"
group = {{ peer = "{group}" }}
"#
            ),
        )
        .unwrap();
        rules_test(&dir.join("peer.test.toml"))
    };
    let (code, stdout) = peer_test("::ffff:10.0.0.2");
    assert_eq!(code, Some(0), "{stdout}");
    let (code, stdout) = peer_test("10.0.0.002");
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("group `peer`: `10.0.0.002` is not a valid IP address"),
        "{stdout}"
    );
    std::fs::remove_file(dir.join("peer.toml")).unwrap();
    std::fs::remove_file(dir.join("peer.test.toml")).unwrap();
    // A typo in `rules_under_test` fails the test instead of filtering every alert away.
    std::fs::write(
        dir.join("hb.test.toml"),
        r#"
[[test]]
name = "a typo"
until = "+5m"
rules_under_test = ["hb-typo"]
input = """
{"source":"syslog","time":"2024-01-01T00:00:00Z","host":"a","app":"heartbeat"}
"""
"#,
    )
    .unwrap();
    let (code, stdout) = rules_test(&dir);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("rules_under_test: no rule named `hb-typo` in the rules under test (hb)"),
        "{stdout}"
    );
    // `rules check` on the folder ignores the test file.
    let out = cepheus()
        .args(["rules", "check"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn alerts_of(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn heartbeat_capture_gives_exactly_the_one_absence_of_its_truth_file() {
    let pcap = manifest().join("tests/data/synthetic/heartbeat_syslog_udp.pcap");
    let rules = manifest().join("tests/fixtures/heartbeat-pcap.toml");
    let alerts = alerts_of(&replay(&[
        "--rules",
        rules.to_str().unwrap(),
        pcap.to_str().unwrap(),
    ]));
    let truth: Value = serde_json::from_str(
        &std::fs::read_to_string(pcap.with_extension("pcap.truth.json")).unwrap(),
    )
    .unwrap();
    let missing = truth["missing_heartbeat"].as_array().unwrap();
    assert_eq!(alerts.len(), missing.len(), "{alerts:?}");
    for (a, m) in alerts.iter().zip(missing) {
        assert_eq!(a["state"], "firing");
        assert_eq!(a["group"]["host"], m["hostname"]);
        // The last beat plus the rule's 90 s, after the first missed beat was due.
        let last = epoch(m["last_seen"].as_str().unwrap());
        let fired = epoch(a["time"].as_str().unwrap());
        assert_eq!(fired, last + 90);
        assert!(fired >= epoch(m["first_missed_beat_due"].as_str().unwrap()));
    }
}

/// Rules read each side's transport payload (`orig_payload_bytes`, Zeek's `orig_bytes`) as
/// Zeek counts it: the relative sequence number of each side's FIN, less one (the SYN), from
/// tshark's view of the capture.
#[test]
fn flow_rules_read_the_payload_bytes_zeek_counts() {
    let pcap = manifest().join("tests/data/pcap/zeek_http_get.pcap");
    let tsv = std::fs::read_to_string(pcap.with_extension("pcap.packets.tsv")).unwrap();
    let (mut orig, mut resp) = (0u64, 0u64);
    for row in tsv.lines().skip(1) {
        let cols: Vec<&str> = row.split('\t').collect();
        if !cols[19].contains("[FIN") {
            continue;
        }
        let seq: u64 = cols[19]
            .split_whitespace()
            .find_map(|w| w.strip_prefix("Seq="))
            .unwrap()
            .parse()
            .unwrap();
        // The originator sent the first packet.
        if cols[6] == "141.142.228.5" {
            orig = seq - 1;
        } else {
            resp = seq - 1;
        }
    }
    assert!(orig > 0 && resp > orig);
    let rules = format!(
        r#"[[rule]]
name = "sizes"
severity = "low"
group_by = ["src"]
events.f = 'flow and kind == "flow_end" and orig_payload_bytes == {orig} and resp_payload_bytes == {resp} and orig_bytes > orig_payload_bytes'
pattern = "f"
"#
    );
    let (dir, file) = scratch_rules("payload-bytes", &rules);
    let alerts = alerts_of(&replay(&[
        "--rules",
        file.to_str().unwrap(),
        pcap.to_str().unwrap(),
    ]));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0]["group"]["src"], "141.142.228.5");
}

/// `cepheus flows --events` writes JSON lines that replay to the same alerts as the capture
/// itself (the syslog datagrams as parsed events with their `peer` and `arrival`).
#[test]
fn flows_events_output_replays_like_the_capture() {
    let pcap = manifest().join("tests/data/synthetic/heartbeat_syslog_udp.pcap");
    let rules = manifest().join("tests/fixtures/heartbeat-pcap.toml");
    let out = cepheus()
        .args(["flows", "--events"])
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(out.status.success());
    let jsonl = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("heartbeat-events.jsonl");
    std::fs::write(&jsonl, &out.stdout).unwrap();
    let from_pcap = replay(&["--rules", rules.to_str().unwrap(), pcap.to_str().unwrap()]);
    let from_events = replay(&["--rules", rules.to_str().unwrap(), jsonl.to_str().unwrap()]);
    assert!(!alerts_of(&from_pcap).is_empty());
    assert_eq!(alerts_of(&from_events), alerts_of(&from_pcap));
}

/// `cepheus events` writes the events of syslog files and captures as JSON lines that replay
/// to the same alerts as the inputs themselves, and counts what it refused.
#[test]
fn events_output_replays_like_its_inputs() {
    let rules = manifest().join("../rules");
    let inputs = [
        manifest().join("tests/data/syslog/loghub_OpenSSH_2k.log"),
        manifest().join("tests/data/syslog/loghub_Linux_2k.log"),
        manifest().join("tests/data/pcap/esnet_masscan_tcp_0_1000_20190821.pcap"),
    ];
    let mut events = cepheus();
    events.args(["events", "--year", "2024"]).args(&inputs);
    let out = events.output().unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("events: 7003 events, 0 malformed"),
        "{stderr}"
    );
    let jsonl = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("events-output.jsonl");
    std::fs::write(&jsonl, &out.stdout).unwrap();
    let mut args = vec!["--rules", rules.to_str().unwrap(), "--year", "2024"];
    args.extend(inputs.iter().map(|p| p.to_str().unwrap()));
    let from_inputs = replay(&args);
    let from_events = replay(&["--rules", rules.to_str().unwrap(), jsonl.to_str().unwrap()]);
    let alerts = alerts_of(&from_inputs);
    // ssh brute force (both files), the port scan (the capture).
    let rules_seen: std::collections::BTreeSet<_> = alerts
        .iter()
        .map(|a| a["rule"].as_str().unwrap().to_string())
        .collect();
    assert!(rules_seen.len() >= 3, "{rules_seen:?}");
    assert_eq!(alerts_of(&from_events), alerts);
    // Rules with errors: exit 1, nothing read; an input that cannot be read: exit 2.
    let broken = manifest().join("tests/broken/unknown_event.toml");
    let out = cepheus()
        .args(["events", "--rules"])
        .arg(&broken)
        .arg(&inputs[0])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let out = cepheus()
        .args(["events", "no/such/file.log"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // A line that is no event is named and counted, and the rest flows.
    let bad = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("events-bad.jsonl");
    std::fs::write(
        &bad,
        "{\"source\":\"syslog\",\"time\":\"2026-01-01T00:00:00Z\",\"app\":\"a\",\"app\":\"b\"}\n<13>Feb 13 20:07:26 h a: x\n",
    )
    .unwrap();
    let out = cepheus()
        .args(["events", "--year", "2026"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(":1: invalid JSON event: duplicate key `app`"),
        "{stderr}"
    );
    assert!(stderr.contains("events: 1 events, 1 malformed"), "{stderr}");
    // With --rules, the definitions an event satisfies in the order the file wrote them
    // (the compiled order is the meaning's: sorted).
    let rules = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("events-order.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nname = \"o\"\nseverity = \"low\"\nevents.zz = 'syslog and msg == \"x\"'\n\
         events.aa = 'syslog and app == \"a\"'\npattern = \"seq(zz, aa)\"\n",
    )
    .unwrap();
    let listed = cepheus()
        .args(["events", "--year", "2026", "--rules"])
        .arg(&rules)
        .arg(&bad)
        .output()
        .unwrap();
    let listed = String::from_utf8(listed.stdout).unwrap();
    let zz = listed.find("\"zz\"");
    assert!(zz.is_some() && zz < listed.find("\"aa\""), "{listed}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout,
        "{\"app\":\"a\",\"facility\":1,\"host\":\"h\",\"msg\":\"x\",\"severity\":5,\"source\":\"syslog\",\"time\":\"2026-02-13T20:07:26Z\"}\n"
    );
}

/// A budget that bit is said in replay's summary: a rule blind to a key must not pass for a
/// rule that saw nothing.
#[test]
fn refused_groups_are_said_in_the_summary() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let rules = dir.join("few-groups.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nname = \"few\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nmax_groups = 2\nevents.a = 'syslog and app == \"a\"'\npattern = \"a{2,} within 1m\"\n",
    )
    .unwrap();
    let log = dir.join("few-groups.log");
    std::fs::write(
        &log,
        "Dec 10 10:00:00 h1 a: x\nDec 10 10:00:01 h2 a: x\nDec 10 10:00:02 h3 a: x\nDec 10 10:00:03 h4 a: x\n",
    )
    .unwrap();
    let out = cepheus()
        .args(["replay", "--year", "2024", "--rules"])
        .arg(&rules)
        .arg(&log)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(", 2 new groups refused (max_groups),"),
        "{stderr}"
    );
}

/// Matches a trigger held back and events stamped ahead of their arrival are counted in the
/// summary, as the refusals are.
#[test]
fn suppressed_and_future_events_are_said_in_the_summary() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let rules = dir.join("suppressed.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nname = \"each\"\nseverity = \"low\"\ngroup_by = [\"host\"]\ntrigger = { every = \"1h\" }\nevents.a = 'syslog and app == \"a\"'\npattern = \"a\"\n",
    )
    .unwrap();
    let events = dir.join("suppressed.jsonl");
    let line = |t: &str, arrival: &str| {
        format!(
            "{{\"source\":\"syslog\",\"time\":\"2024-12-10T10:00:{t}Z\",\"arrival\":\"2024-12-10T10:00:{arrival}Z\",\"host\":\"h\",\"app\":\"a\",\"msg\":\"x\"}}\n"
        )
    };
    let text = [line("00", "00"), line("05", "01"), line("06", "06")].concat();
    std::fs::write(&events, text).unwrap();
    let out = cepheus()
        .args(["replay", "--rules"])
        .arg(&rules)
        .arg(&events)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(alerts_of(&String::from_utf8_lossy(&out.stdout)).len(), 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(", 2 suppressed by a trigger period"),
        "{stderr}"
    );
    assert!(
        stderr.contains(", 1 event stamped ahead of its arrival"),
        "{stderr}"
    );
}

#[test]
fn scan_rule_fires_on_masscan_and_not_on_ordinary_sessions() {
    let rules = manifest().join("../rules/scan.toml");
    let pcaps = manifest().join("tests/data/pcap");
    let masscan = pcaps.join("esnet_masscan_tcp_0_1000_20190821.pcap");
    let alerts = alerts_of(&replay(&[
        "--rules",
        rules.to_str().unwrap(),
        masscan.to_str().unwrap(),
    ]));
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0]["rule"], "port-scan");
    assert_eq!(alerts[0]["group"]["src"], "172.31.15.102");
    for name in [
        "zeek_http_get.pcap",
        "zeek_ssh_single-conn.pcap",
        "tcpdump_dns_tcp.pcap",
        "zeek_communityid_ipv6.pcap",
        "zeek_tcp_retransmit-timeout.pcapng",
        "zeek_pcapng-multi-interface.pcapng",
    ] {
        let p = pcaps.join(name);
        let out = replay(&["--rules", rules.to_str().unwrap(), p.to_str().unwrap()]);
        assert!(out.is_empty(), "{name}: {out}");
    }
}

/// Runs the binary with `stdin` piped in; returns stdout after asserting success.
fn with_stdin(args: &[&str], stdin: &[u8]) -> String {
    let out = run_with_stdin(args, stdin);
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs the binary with `stdin` piped in: its output, whatever the exit.
fn run_with_stdin(args: &[&str], stdin: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut child = cepheus()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let bytes = stdin.to_vec();
    let writer = std::thread::spawn(move || input.write_all(&bytes));
    let out = child.wait_with_output().unwrap();
    // (A reader that stopped early closes the pipe: what it said is the test's to judge.)
    let _ = writer.join().unwrap();
    out
}

/// A compressed log (a rotated `auth.log.2.gz`) is refused with the way round, not read as
/// lines that are all "not syslog" and give no alert.
#[test]
fn a_compressed_log_is_refused_with_the_way_round() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let gz = dir.join("auth.log.2.gz");
    // A gzip member header and a few bytes: enough to be told by its magic number.
    std::fs::write(&gz, [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 1, 2, 3]).unwrap();
    for cmd in ["replay", "events"] {
        let out = cepheus().arg(cmd).arg(&gz).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("auth.log.2.gz is gzip-compressed"),
            "{stderr}"
        );
        assert!(stderr.contains("zcat"), "{stderr}");
    }
}

/// A file named as a capture whose header is damaged is refused, not read as syslog text
/// that gives no alert and a success; an empty one is no events.
#[test]
fn a_capture_with_a_damaged_header_is_refused() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let bad = dir.join("damaged.pcap");
    std::fs::write(&bad, b"\0\0\0\0\x02\x00\x04\x00 some frames").unwrap();
    for cmd in ["replay", "events"] {
        let out = cepheus().arg(cmd).arg(&bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("damaged.pcap is named as a capture but does not start as one"),
            "{stderr}"
        );
    }
    let empty = dir.join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let out = cepheus().arg("events").arg(&empty).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
}

/// A capture piped in (`tcpdump -w - | cepheus replay -`) is read as a capture, as the same
/// file named on the command line, and syslog text piped in is still text.
#[test]
fn a_capture_on_stdin_reads_as_the_file() {
    let rules = manifest().join("../rules/scan.toml");
    let pcaps = manifest().join("tests/data/pcap");
    let masscan = pcaps.join("esnet_masscan_tcp_0_1000_20190821.pcap");
    let rules = rules.to_str().unwrap();
    let piped = with_stdin(
        &["replay", "--rules", rules, "-"],
        &std::fs::read(&masscan).unwrap(),
    );
    assert_eq!(alerts_of(&piped).len(), 1, "{piped}");
    assert_eq!(
        piped,
        replay(&["--rules", rules, masscan.to_str().unwrap()])
    );
    let ng = pcaps.join("zeek_pcapng-multi-interface.pcapng");
    let events = |input: &str, stdin: &[u8]| with_stdin(&["events", input], stdin);
    let from_file = events(ng.to_str().unwrap(), b"");
    assert!(from_file.lines().count() > 0);
    assert_eq!(events("-", &std::fs::read(&ng).unwrap()), from_file);
    let line = b"<34>Oct 11 22:14:15 mymachine su: 'su root' failed for lonvick on /dev/pts/8\n";
    let text = events("-", line);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains("\"app\":\"su\""), "{text}");
}

/// `-` named twice (`cepheus replay - - < log`) is read once, with a warning, as a file given
/// twice is: two readers of the one stream would tear its lines between them (malformed
/// events, lost alerts), and a piped capture's second reader would find no pcap header.
#[test]
fn stdin_named_twice_is_read_once() {
    let rules = manifest().join("../rules/ssh.toml");
    let rules = rules.to_str().unwrap();
    // Large enough (about 200 KB) for two readers to take turns at its chunks.
    let log = std::fs::read(manifest().join("tests/data/syslog/loghub_OpenSSH_2k.log")).unwrap();
    let args = |inputs: &[&'static str]| {
        let mut a = vec!["replay", "--year", "2024", "--rules", rules];
        a.extend_from_slice(inputs);
        a
    };
    let once = run_with_stdin(&args(&["-"]), &log);
    assert!(once.status.success());
    let once_err = String::from_utf8_lossy(&once.stderr);
    assert!(once_err.contains(" 0 malformed"), "{once_err}");
    assert!(!alerts_of(&String::from_utf8_lossy(&once.stdout)).is_empty());
    let twice = run_with_stdin(&args(&["-", "-"]), &log);
    let twice_err = String::from_utf8_lossy(&twice.stderr);
    assert!(twice.status.success(), "{twice_err}");
    // (Not `assert_eq!`: the alerts are some 40 KB.)
    assert!(twice.stdout == once.stdout, "other alerts: {twice_err}");
    assert!(twice_err.contains(" 0 malformed"), "{twice_err}");
    assert!(
        twice_err.contains("warning: -: standard input was given before: read once"),
        "{twice_err}"
    );
    // A capture piped in, named twice: its flows once (the second reader found no header).
    let scan = manifest().join("../rules/scan.toml");
    let masscan =
        std::fs::read(manifest().join("tests/data/pcap/esnet_masscan_tcp_0_1000_20190821.pcap"))
            .unwrap();
    let scan = ["replay", "--rules", scan.to_str().unwrap()];
    let once = with_stdin(&[&scan[..], &["-"]].concat(), &masscan);
    let twice = run_with_stdin(&[&scan[..], &["-", "-"]].concat(), &masscan);
    let twice_err = String::from_utf8_lossy(&twice.stderr);
    assert_eq!(twice.status.code(), Some(0), "{twice_err}");
    assert!(twice.stdout == once.as_bytes(), "other alerts: {twice_err}");
    assert!(
        twice_err.contains("standard input was given before"),
        "{twice_err}"
    );
}

#[test]
fn truncated_and_empty_captures_replay_to_the_end() {
    let rules = manifest().join("../rules");
    let pcaps = manifest().join("tests/data/pcap");
    for name in [
        "zeek_trunc_ip4-trunc.pcap",
        "zeek_trunc_ip6-trunc.pcap",
        "zeek_trunc_trunc-hdr.pcap",
        "zeek_tcp_truncated-header.pcap",
        "tcpdump_empty.pcapng",
    ] {
        let p = pcaps.join(name);
        let out = cepheus()
            .arg("replay")
            .arg("--rules")
            .arg(&rules)
            .arg(&p)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("replay: "),
            "{name}: no summary"
        );
    }
}

/// A capture cut off mid-write (a capture killed, a copy interrupted) replays what it holds
/// and says that the rest is missing, so partial results do not pass for complete ones.
#[test]
fn a_capture_cut_short_is_said_to_be() {
    let whole = manifest().join("tests/data/pcap/esnet_masscan_tcp_0_1000_20190821.pcap");
    let bytes = std::fs::read(&whole).unwrap();
    let cut = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cut.pcap");
    std::fs::write(&cut, &bytes[..bytes.len() / 2 + 7]).unwrap();
    let out = cepheus()
        .arg("replay")
        .arg("--rules")
        .arg(manifest().join("../rules/scan.toml"))
        .arg(&cut)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("the capture cannot be read past a cut or damaged record ("),
        "{err}"
    );
    // The whole file: no such warning.
    let out = cepheus()
        .arg("replay")
        .arg("--rules")
        .arg(manifest().join("../rules/scan.toml"))
        .arg(&whole)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("warning"), "{err}");
}

/// A capture of a link type cepheus does not decode gives no events, and says why.
#[test]
fn a_capture_of_an_unknown_link_type_is_said_to_be() {
    let mut pcap = Vec::new();
    // Classic pcap, little-endian, LINKTYPE_USER0 (147).
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 147] {
        pcap.extend_from_slice(&v.to_le_bytes());
    }
    for i in 0..3u32 {
        for v in [1_700_000_000 + i, 0, 60, 60] {
            pcap.extend_from_slice(&v.to_le_bytes());
        }
        pcap.extend_from_slice(&[0u8; 60]);
    }
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("user0.pcap");
    std::fs::write(&p, &pcap).unwrap();
    for cmd in ["replay", "events"] {
        let out = cepheus().arg(cmd).arg(&p).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{cmd}: {err}");
        assert!(
            err.contains(&format!(
                "warning: {}: 3 frames of link type 147, which cepheus does not decode",
                p.display()
            )),
            "{cmd}: {err}"
        );
    }
}

/// Splits a classic little-endian pcap after `keep` records: (first part, rest), each a
/// pcap with the same global header.
fn split_pcap(bytes: &[u8], keep: usize) -> (Vec<u8>, Vec<u8>) {
    let mut at = 24;
    for _ in 0..keep {
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + len;
    }
    let mut second = bytes[..24].to_vec();
    second.extend_from_slice(&bytes[at..]);
    (bytes[..at].to_vec(), second)
}

/// Rotated captures (`tcpdump -G`) replayed together are one stream of flows: a connection
/// that goes on from one file into the next is one flow, not a `capture_end` and a new
/// mid-stream flow (whose first sender, often the server, looked like a scanner).
#[test]
fn rotated_captures_make_one_stream_of_flows() {
    let whole = manifest().join("tests/data/pcap/zeek_http_get.pcap");
    let bytes = std::fs::read(&whole).unwrap();
    assert_eq!(&bytes[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rotated");
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = split_pcap(&bytes, 5);
    std::fs::write(dir.join("1.pcap"), a).unwrap();
    std::fs::write(dir.join("2.pcap"), b).unwrap();
    let rule = dir.join("flows.toml");
    std::fs::write(
        &rule,
        "[[rule]]\nname = \"f\"\nseverity = \"info\"\nmessage = \"{kind} {state}\"\nevents.e = 'flow and kind in [\"flow_start\", \"flow_end\"]'\npattern = \"e\"\n",
    )
    .unwrap();
    let run = |inputs: &[&Path]| -> Vec<String> {
        let mut c = cepheus();
        c.arg("replay").arg("--rules").arg(&rule);
        for i in inputs {
            c.arg(i);
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        alerts_of(&String::from_utf8_lossy(&out.stdout))
            .iter()
            .map(|a| a["message"].as_str().unwrap().to_string())
            .collect()
    };
    let one = run(&[&whole]);
    assert_eq!(one.len(), 2, "{one:?}");
    // In either order on the command line.
    assert_eq!(run(&[&dir.join("1.pcap"), &dir.join("2.pcap")]), one);
    assert_eq!(run(&[&dir.join("2.pcap"), &dir.join("1.pcap")]), one);
}

/// `cepheus flows` reads rotated captures as one stream too: the same records and events as
/// the whole capture, and one summary.
#[test]
fn flows_over_rotated_captures_is_one_stream() {
    let whole = manifest().join("tests/data/pcap/zeek_http_get.pcap");
    let bytes = std::fs::read(&whole).unwrap();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rotated-flows");
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = split_pcap(&bytes, 5);
    std::fs::write(dir.join("1.pcap"), a).unwrap();
    std::fs::write(dir.join("2.pcap"), b).unwrap();
    let flows = |args: &[&str], inputs: &[&Path]| -> (String, Vec<String>) {
        let mut c = cepheus();
        c.arg("flows").args(args);
        for i in inputs {
            c.arg(i);
        }
        let out = c.output().unwrap();
        assert!(out.status.success());
        let summaries = String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(str::to_string)
            .collect();
        (String::from_utf8_lossy(&out.stdout).into_owned(), summaries)
    };
    let parts = [dir.join("2.pcap"), dir.join("1.pcap")];
    let parts: Vec<&Path> = parts.iter().map(PathBuf::as_path).collect();
    for mode in [&[][..], &["--events"][..]] {
        let (one, _) = flows(mode, &[&whole]);
        let (split, summaries) = flows(mode, &parts);
        assert!(!one.is_empty());
        assert_eq!(split, one, "{mode:?}");
        assert_eq!(summaries.len(), 1, "{summaries:?}");
        let s: serde_json::Value = serde_json::from_str(&summaries[0]).unwrap();
        assert_eq!(s["files"].as_array().map(Vec::len), Some(2), "{s}");
    }
}

/// `--until` before the last event cannot stop the clock there (it never goes back): said.
#[test]
fn an_until_before_the_last_event_is_said_to_be() {
    let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("until.log");
    std::fs::write(&log, "Dec 10 10:00:00 web-1 heartbeat[1]: alive\n").unwrap();
    let rules = manifest().join("../rules");
    let run = |until: &str| {
        let out = cepheus()
            .args(["replay", "--year", "2024", "--until", until, "--rules"])
            .arg(&rules)
            .arg(&log)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(run("2024-12-10T09:00:00Z").contains("is before the last event"));
    assert!(!run("2024-12-10T11:00:00Z").contains("warning"));
}

/// Expectations are paired with alerts as a whole, not first fit in the order written: one
/// without `time` does not take the alert a more precise one needs; a missing one says
/// where it is written.
#[test]
fn expectations_pair_with_alerts_whatever_their_order() {
    let dir = std::env::temp_dir().join(format!("cepheus-ruletest-pair-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("hb.toml"),
        "[[rule]]\nname = \"hb\"\nseverity = \"high\"\ngroup_by = [\"host\"]\nexpect = [\"w\"]\nevents.hb = 'syslog and app == \"heartbeat\"'\npattern = \"absent(hb) for 60s\"\n",
    )
    .unwrap();
    // w is silent from 10:00:00: fires at 10:01, resolved at 10:02, fires again at 10:03.
    let input = "<14>1 2024-12-10T10:00:00Z w heartbeat - - - alive\n<14>1 2024-12-10T10:02:00Z w heartbeat - - - alive\n";
    let any = "[[test.expect]]\nrule = \"hb\"\ngroup = { host = \"w\" }\n";
    let at = "[[test.expect]]\nrule = \"hb\"\ngroup = { host = \"w\" }\ntime = \"2024-12-10T10:01:00Z\"\n";
    let resolved =
        "[[test.expect]]\nrule = \"hb\"\nstate = \"resolved\"\ngroup = { host = \"w\" }\n";
    for order in [[any, at], [at, any]] {
        let test = format!(
            "[[test]]\nname = \"t\"\ninput = \"\"\"\n{input}\"\"\"\nuntil = \"2024-12-10T10:03:30Z\"\n{}{}{resolved}",
            order[0], order[1]
        );
        std::fs::write(dir.join("hb.test.toml"), test).unwrap();
        let (code, out) = rules_test(&dir);
        assert_eq!(code, Some(0), "{out}");
    }
    // One expectation too many: said missing, with where it is written.
    let test = format!(
        "[[test]]\nname = \"t\"\ninput = \"\"\"\n{input}\"\"\"\nuntil = \"2024-12-10T10:03:30Z\"\n{any}{at}{resolved}{at}"
    );
    std::fs::write(dir.join("hb.test.toml"), test).unwrap();
    let (code, out) = rules_test(&dir);
    assert_eq!(code, Some(1), "{out}");
    let file = dir.join("hb.test.toml").display().to_string();
    assert!(
        out.contains("missing:    hb firing {host=w} at 2024-12-10T10:01:00Z")
            && out.contains(&format!("({file}:")),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Lists that name nothing cannot be run: `rules_under_test = []` would leave every alert
/// out (a test that nothing fires could never fail), `rules = []` would load whatever the
/// folder the command runs in holds.
#[test]
fn empty_rule_lists_in_a_test_file_are_refused() {
    let dir = std::env::temp_dir().join(format!("cepheus-ruletest-empty-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["heartbeat.toml", "hosts.txt"] {
        std::fs::copy(manifest().join("../rules").join(f), dir.join(f)).unwrap();
    }
    let test = r#"[[test]]
name = "nothing"
input = ""
rules_under_test = []
"#;
    std::fs::write(dir.join("heartbeat.test.toml"), test).unwrap();
    let (code, out) = rules_test(&dir);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("`rules_under_test = []` names no rule"),
        "{out}"
    );
    assert!(out.contains("heartbeat.test.toml:4:20"), "{out}");
    std::fs::write(
        dir.join("heartbeat.test.toml"),
        "rules = []\n[[test]]\nname = \"x\"\ninput = \"\"\n",
    )
    .unwrap();
    let (code, out) = rules_test(&dir);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("`rules = []` names no rule file"), "{out}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A test's `until` before its last event is said where it is written, in the test's words
/// (not as a `--until` nobody gave).
#[test]
fn a_test_until_before_its_last_event_is_said_where_written() {
    let dir = std::env::temp_dir().join(format!("cepheus-ruletest-until-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["heartbeat.toml", "hosts.txt"] {
        std::fs::copy(manifest().join("../rules").join(f), dir.join(f)).unwrap();
    }
    let test = r#"[[test]]
name = "early"
input = """
<14>1 2024-12-10T10:00:00Z web-1 heartbeat - - - alive
<14>1 2024-12-10T10:00:30Z web-1 heartbeat - - - alive
"""
until = "2024-12-10T10:00:10Z"
"#;
    std::fs::write(dir.join("heartbeat.test.toml"), test).unwrap();
    let (_, out) = rules_test(&dir);
    let at = dir.join("heartbeat.test.toml").display().to_string();
    assert!(
        out.contains(&format!(
            "warning: {at}:7:9: `until` (2024-12-10T10:00:10Z) is before the test's last event"
        )),
        "{out}"
    );
    assert!(!out.contains("--until"), "{out}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A refused JSON event is named with its line and the reason (the first few of them).
#[test]
fn refused_json_events_say_why() {
    let jsonl = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bad.jsonl");
    std::fs::write(
        &jsonl,
        "{\"source\":\"flow\",\"time\":\"2024-01-01T00:00:00Z\",\"sport\":70000}\n",
    )
    .unwrap();
    let out = cepheus()
        .arg("replay")
        .arg("--rules")
        .arg(manifest().join("../rules"))
        .arg(&jsonl)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.jsonl:1: field `sport`: expected a port"),
        "{err}"
    );
    assert!(err.contains("1 malformed"), "{err}");
}

#[test]
fn no_share_gives_the_same_alerts_with_more_predicate_work() {
    let log = manifest().join("tests/data/syslog/loghub_OpenSSH_2k.log");
    let rules = manifest().join("../rules");
    let run = |extra: &[&str]| {
        let out = cepheus()
            .arg("replay")
            .args([
                "--rules",
                rules.to_str().unwrap(),
                "--year",
                "2024",
                "--until",
                "+1h",
            ])
            .args(extra)
            .arg(&log)
            .output()
            .unwrap();
        assert!(out.status.success());
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        let evals: u64 = err
            .split(", ")
            .find_map(|p| p.trim_end().strip_suffix(" predicate evaluations)"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no predicate count in {err}"));
        (String::from_utf8(out.stdout).unwrap(), evals)
    };
    let (shared, shared_evals) = run(&[]);
    let (unshared, unshared_evals) = run(&["--no-share"]);
    assert!(!shared.is_empty());
    assert_eq!(shared, unshared);
    // The two ssh rules use the same `fail` condition: evaluated once when shared.
    assert!(
        shared_evals < unshared_evals,
        "{shared_evals} vs {unshared_evals}"
    );
}

#[test]
fn json_events_keep_their_arrival_for_event_time_rules() {
    // A heartbeat stamped 00:00:50 that arrived at 00:01:20 is late and retracts the absence
    // fired at 00:01:00; read with its stamp as arrival it would simply have prevented it.
    let (code, stdout) = rules_test(&manifest().join("tests/fixtures/event-time"));
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("1 passed, 0 failed"), "{stdout}");
}

#[test]
fn without_year_rfc3164_stamps_resolve_around_today() {
    // Year-less stamps are read as a syslog daemon would today (not as 1970).
    let log = manifest().join("tests/data/syslog/loghub_OpenSSH_2k.log");
    let rules = manifest().join("../rules/ssh.toml");
    let alerts = alerts_of(&replay(&[
        "--rules",
        rules.to_str().unwrap(),
        log.to_str().unwrap(),
    ]));
    assert!(!alerts.is_empty());
    let this_year = chrono::Utc::now()
        .format("%Y")
        .to_string()
        .parse::<i32>()
        .unwrap();
    for a in &alerts {
        let year: i32 = a["time"].as_str().unwrap()[..4].parse().unwrap();
        assert!(
            (this_year - 1..=this_year + 1).contains(&year),
            "{}",
            a["time"]
        );
    }
}

/// An event-time rule fed one event under two keys, with other events buffered beside it:
/// the reorder buffer releases the two in definition order whatever else it holds (a tie
/// there once left the order, so the group a `max_groups = 1` rule kept, to the buffer's
/// history, and shared and unshared runs disagreed).
#[test]
fn one_event_under_two_keys_is_released_in_definition_order() {
    let dir = manifest().join("tests/fixtures/two-keys");
    let rules = dir.join("rules.toml");
    let events = dir.join("events.jsonl");
    let args = |extra: &[&'static str]| {
        let mut a = vec!["--rules", rules.to_str().unwrap(), events.to_str().unwrap()];
        a.extend_from_slice(extra);
        replay(&a)
    };
    let shared = args(&[]);
    assert_eq!(shared, args(&["--no-share"]));
    let r3: Vec<Value> = shared
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|a| a["rule"] == "r3")
        .collect();
    assert_eq!(r3.len(), 1, "{shared}");
    assert_eq!(r3[0]["group"], serde_json::json!({"nm": "udp"}));
}

/// A JSON event that arrived before its own stamp (the sender's clock runs ahead) keeps its
/// arrival: processing-time rules see it then, event-time rules take it as of its arrival, and
/// it does not drag the clock forward (the next heartbeats are not late, nobody fires early).
#[test]
fn an_event_stamped_ahead_of_its_arrival_cannot_drag_time_forward() {
    let dir = manifest().join("tests/fixtures/clock-ahead");
    let rules = dir.join("rules.toml");
    let events = dir.join("events.jsonl");
    let out = cepheus()
        .args(["replay", "--rules", rules.to_str().unwrap()])
        .arg(&events)
        .args(["--until", "+2m"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(" 0 late"), "{stderr}");
    let alerts = alerts_of(&String::from_utf8_lossy(&out.stdout));
    let times = |rule: &str| -> Vec<(String, String)> {
        alerts
            .iter()
            .filter(|a| a["rule"] == rule)
            .map(|a| {
                (
                    a["group"]["host"].as_str().unwrap().to_string(),
                    a["time"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let at = |h: &str, t: &str| (h.to_string(), format!("2024-01-01T{t}Z"));
    assert_eq!(
        times("seen"),
        vec![
            at("a", "00:00:00"),
            at("b", "00:00:10"),
            at("a", "00:00:50"),
            at("a", "00:01:30")
        ]
    );
    // b last spoke at its arrival (00:00:10); a at 00:01:30, so it never missed 60 s before.
    assert_eq!(times("hb"), vec![at("b", "00:01:10"), at("a", "00:02:30")]);
}

/// A line repeated byte for byte within the dedup window (a message relayed twice) is dropped
/// and counted before any rule sees it, as in the live agent; `--dedup-window 0s` keeps it.
#[test]
fn exact_duplicates_are_dropped_before_the_rules() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("replay-dedup");
    std::fs::create_dir_all(&dir).unwrap();
    let rules = dir.join("two.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nname = \"two\"\nseverity = \"low\"\n\
         events.a = 'syslog and app == \"a\"'\npattern = \"a{2}\"\n",
    )
    .unwrap();
    let log = dir.join("relayed.log");
    std::fs::write(
        &log,
        "Dec 10 10:00:00 web-1 a[1]: same\nDec 10 10:00:00 web-1 a[1]: same\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let out = cepheus()
            .args(["replay", "--year", "2024", "--rules"])
            .arg(&rules)
            .arg(&log)
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success());
        (
            alerts_of(&String::from_utf8_lossy(&out.stdout)).len(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (alerts, stderr) = run(&[]);
    assert_eq!(alerts, 0, "{stderr}");
    assert!(
        stderr.contains("1 events, 0 malformed, 1 duplicate dropped"),
        "{stderr}"
    );
    let (alerts, stderr) = run(&["--dedup-window", "0s"]);
    assert_eq!(alerts, 1, "{stderr}");
    assert!(stderr.contains("2 events, 0 malformed, 0 late"), "{stderr}");
}

/// A reader that goes away (`cepheus replay ... | head -1`) ends the replay quietly: exit 0,
/// no error printed.
#[test]
fn a_closed_pipe_ends_replay_quietly() {
    use std::io::{BufRead, BufReader};
    let dir = std::env::temp_dir().join(format!("cepheus-pipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = dir.join("r.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nname = \"every\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nevents.a = 'syslog and app == \"x\"'\npattern = \"a\"\n",
    )
    .unwrap();
    let input = dir.join("in.log");
    let lines: String = (0..20_000)
        .map(|i| format!("<13>Dec  2 01:47:00 h{i} x: hello\n"))
        .collect();
    std::fs::write(&input, lines).unwrap();
    let mut child = cepheus()
        .args(["replay", "--year", "2026", "--rules"])
        .arg(&rules)
        .arg(&input)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("\"rule\":\"every\""), "{first}");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("error"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A rule that fires on every syslog event, named `x`.
const ANY_SYSLOG: &str =
    "[[rule]]\nname = \"x\"\nseverity = \"low\"\nevents.a = 'syslog'\npattern = \"a\"\n";

/// A test file's `files` stand in for the files its rules read (an `expect` file, a list
/// file), so the shipped tests pass whatever the folder's `hosts.txt` and allowlist say; a
/// name no rule reads is refused, said where it is written.
#[test]
fn a_rule_tests_files_stand_in_for_the_folders() {
    let (dir, _) = scratch_rules(
        "rules-test-files",
        "[[rule]]\nname = \"x\"\nseverity = \"low\"\n",
    );
    for f in [
        "heartbeat.toml",
        "heartbeat.test.toml",
        "scan.toml",
        "scan.test.toml",
    ] {
        std::fs::copy(manifest().join("../rules").join(f), dir.join(f)).unwrap();
    }
    std::fs::remove_file(dir.join("x.toml")).unwrap();
    // The operator's own lists: no host the tests name, and the scanners' network listed.
    std::fs::write(dir.join("hosts.txt"), "fleet-1\nfleet-2\n").unwrap();
    std::fs::write(dir.join("scanners.txt"), "10.0.0.0/8\n").unwrap();
    let (code, out) = rules_test(&dir);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("a source scanners.txt lists is not watched"),
        "{out}"
    );
    // Without its `files`, the heartbeat test reads the folder's hosts.txt, and fails.
    let text = std::fs::read_to_string(dir.join("heartbeat.test.toml")).unwrap();
    let pinned = text
        .lines()
        .find(|l| l.starts_with("files = "))
        .unwrap()
        .to_string();
    std::fs::write(dir.join("heartbeat.test.toml"), text.replace(&pinned, "")).unwrap();
    let (code, out) = rules_test(&dir.join("heartbeat.test.toml"));
    assert_eq!(code, Some(1), "{out}");
    // The rules named by another path to the same folder: `files` still stands in for the
    // file they read (matched by the file, not by its spelling).
    let name = dir.file_name().unwrap().to_str().unwrap().to_string();
    std::fs::write(
        dir.join("heartbeat.test.toml"),
        format!("rules = [\"../{name}/heartbeat.toml\"]\n{text}"),
    )
    .unwrap();
    let (code, out) = rules_test(&dir.join("heartbeat.test.toml"));
    assert_eq!(code, Some(0), "{out}");
    // A misspelt name would leave the folder's file in use: refused, at its place.
    std::fs::write(
        dir.join("heartbeat.test.toml"),
        text.replace("\"hosts.txt\" =", "\"host.txt\" ="),
    )
    .unwrap();
    let (code, out) = rules_test(&dir.join("heartbeat.test.toml"));
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains(&format!(
            "{}:4:9: `files` gives {}, which no rule under test reads",
            dir.join("heartbeat.test.toml").display(),
            dir.join("host.txt").display()
        )),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh folder for one test (`name`, this process) holding `x.toml` with `rules`; the
/// folder and the rule file.
fn scratch_rules(name: &str, rules: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("cepheus-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("x.toml");
    std::fs::write(&file, rules).unwrap();
    (dir, file)
}

/// `cepheus replay --year 2024 --rules RULES INPUT`, which must succeed: stdout and stderr.
fn replay_with(rules: &Path, input: &Path) -> (String, String) {
    let out = cepheus()
        .args(["replay", "--year", "2024", "--rules"])
        .arg(rules)
        .arg(input)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `cepheus replay --year 2024` of `input` (the text of one file, `in.log`) over `rules` in a
/// scratch folder of its own: stdout and stderr.
fn replay_case(name: &str, rules: &str, input: &str) -> (String, String) {
    let (dir, rules) = scratch_rules(name, rules);
    let log = dir.join("in.log");
    std::fs::write(&log, input).unwrap();
    let out = replay_with(&rules, &log);
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// Matches whose group field is missing (an optional capture that did not take part) are
/// said in the summary: a rule that sees nothing for that reason does not look idle.
#[test]
fn matches_without_a_group_field_are_counted_in_the_summary() {
    let (stdout, stderr) = replay_case(
        "keyless",
        r#"[[rule]]
name = "u"
severity = "low"
group_by = ["procid"]
events.a = 'syslog and msg =~ "^login"'
pattern = "a"
"#,
        "<13>Jan  1 00:00:00 h app[12]: login bob\n<13>Jan  1 00:00:01 h app: login\n<13>Jan  1 00:00:02 h app: login\n",
    );
    assert_eq!(alerts_of(&stdout).len(), 1);
    assert!(
        stderr.contains("0 late, 2 matches without their group_by field, 1 alerts"),
        "{stderr}"
    );
}

/// A line of a test's input that is not an event is named, with its test and line, so the
/// test's author can find it; in a replay, a line that is not syslog is named too.
#[test]
fn refused_input_lines_are_named() {
    let (dir, rules) = scratch_rules("refused", ANY_SYSLOG);
    let test = dir.join("x.test.toml");
    std::fs::write(
        &test,
        "[[test]]\nname = \"garbage\"\ninput = \"\"\"\n<13>Jan  1 00:00:00 h a: x\nthis is not syslog\n\"\"\"\n[[test.expect]]\nrule = \"x\"\nstate = \"firing\"\n",
    )
    .unwrap();
    let (code, out) = rules_test(&test);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("1 input line(s) are not syslog or JSON events"),
        "{out}"
    );
    // In the report, under the failed test (not only on stderr).
    let why = out.find("x.test.toml:5: not a syslog message");
    let summary = out.find("1 test file(s)");
    assert!(why.is_some() && why < summary, "{out}");
    let log = dir.join("g.log");
    std::fs::write(&log, "<13>Jan  1 00:00:00 h a: x\nhello\n").unwrap();
    let (_, stderr) = replay_with(&rules, &log);
    assert!(stderr.contains("g.log:2: not a syslog message"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An expectation no alert could meet says what is wrong with it.
#[test]
fn impossible_expectations_say_why() {
    let (dir, _) = scratch_rules(
        "badexpect",
        "[[rule]]\nname = \"x\"\nseverity = \"low\"\ngroup_by = [\"host\"]\nevents.a = 'syslog'\npattern = \"a\"\n",
    );
    let test = dir.join("x.test.toml");
    std::fs::write(
        &test,
        r#"[[test]]
name = "typos"
input = "<13>Jan  1 00:00:00 h a: x"
[[test.expect]]
rule = "x"
state = "fired"
group = { hots = "h" }
time = "yesterday"
reason = "because"
"#,
    )
    .unwrap();
    let (code, out) = rules_test(&test);
    assert_eq!(code, Some(1), "{out}");
    for want in [
        "expect.state: `fired` is not an alert state (firing, resolved, retracted)",
        "expect.time: `yesterday` is not an RFC 3339 time",
        "expect.reason: `because` is not a reason an alert gives",
        "expect.group: `hots` is not a group_by field of rule `x` (host)",
        "expect.group: rule `x` groups by host: name every field",
    ] {
        assert!(out.contains(want), "{want}\n{out}");
    }
    // A time written as a TOML datetime, unquoted, is a time too.
    std::fs::write(
        &test,
        "[[test]]\nname = \"dt\"\ninput = \"<13>Jan  1 00:00:00 h a: x\"\n[[test.expect]]\nrule = \"x\"\ngroup = { host = \"h\" }\ntime = 2024-01-01T00:00:00Z\n",
    )
    .unwrap();
    let (code, out) = rules_test(&test);
    assert_eq!(code, Some(0), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A test file given to `rules check` and a rule file given to `rules test` are named for
/// what they are (they read as unknown keys before).
#[test]
fn test_files_and_rule_files_are_not_mistaken_for_each_other() {
    let (dir, rules) = scratch_rules("mixup", ANY_SYSLOG);
    let test = dir.join("x.test.toml");
    std::fs::write(&test, "[[test]]\nname = \"t\"\ninput = \"\"\n").unwrap();
    let out = cepheus()
        .args(["rules", "check"])
        .arg(&test)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is a rule test file, not rules: run `cepheus rules test"),
        "{err}"
    );
    // A folder with tests and no rules says so.
    let only = dir.join("only-tests");
    std::fs::create_dir_all(&only).unwrap();
    std::fs::copy(&test, only.join("x.test.toml")).unwrap();
    let out = cepheus()
        .args(["rules", "check"])
        .arg(&only)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no rule files (*.toml) in") && err.contains("only 1 rule test file(s)"),
        "{err}"
    );
    // A rule file given to `rules test` stands for the tests beside it ...
    let (code, out) = rules_test(&rules);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("x.test.toml"), "{out}");
    // ... and without them, says where they go.
    std::fs::remove_file(&test).unwrap();
    let (code, out) = rules_test(&rules);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("the tests of x.toml go in x.test.toml beside it"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A zone with a negative offset is a value of `--tz`, not a flag; RFC 3164 stamps are read
/// in it. An input without any stamp replays the same on every run (a fixed instant).
#[test]
fn negative_tz_offsets_and_stamp_less_input() {
    let (dir, rules) = scratch_rules(
        "tz",
        r#"[[rule]]
name = "any"
severity = "info"
events.a = 'syslog'
pattern = "a"
"#,
    );
    let input = dir.join("in.log");
    std::fs::write(&input, "<13>Jun  9 10:00:00 h app: hello\n").unwrap();
    let args = |tz: &str| {
        vec![
            "--year".to_string(),
            "2024".into(),
            "--tz".into(),
            tz.into(),
            "--rules".into(),
            rules.display().to_string(),
            input.display().to_string(),
        ]
    };
    let a = args("-05:30");
    let alerts = alerts_of(&replay(&a.iter().map(String::as_str).collect::<Vec<_>>()));
    assert_eq!(alerts[0]["time"], "2024-06-09T15:30:00Z");
    // No stamp anywhere: 1 January of --year, or the epoch; never the wall clock.
    std::fs::write(&input, "<14>1 - h app - - - one\n<14>1 - h app - - - two\n").unwrap();
    let out = replay(&["--rules", rules.to_str().unwrap(), input.to_str().unwrap()]);
    let alerts = alerts_of(&out);
    assert_eq!(alerts.len(), 2);
    assert!(
        alerts.iter().all(|a| a["time"] == "1970-01-01T00:00:00Z"),
        "{out}"
    );
    assert_eq!(
        out,
        replay(&["--rules", rules.to_str().unwrap(), input.to_str().unwrap()])
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The test-file example of docs/rules.md passes as written, against the shipped ssh rules.
#[test]
fn the_documented_rules_test_example_passes() {
    let doc = std::fs::read_to_string(manifest().join("../docs/rules.md")).unwrap();
    let start = doc.find("rules = [\"ssh.toml\"]").unwrap();
    let end = start + doc[start..].find("```").unwrap();
    let dir = std::env::temp_dir().join(format!("cepheus-doc-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(manifest().join("../rules/ssh.toml"), dir.join("ssh.toml")).unwrap();
    std::fs::write(dir.join("ssh.test.toml"), &doc[start..end]).unwrap();
    let (code, out) = rules_test(&dir.join("ssh.test.toml"));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("1 passed"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without `--rules` and without a `rules/` folder, replay runs the built-in rules, as `run`
/// does (and says so); an explicit missing path is still an error.
#[test]
fn replay_falls_back_to_the_built_in_rules_as_run_does() {
    let dir = std::env::temp_dir().join(format!("cepheus-builtin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = manifest().join("tests/data/syslog/loghub_OpenSSH_2k.log");
    let out = cepheus()
        .current_dir(&dir)
        .args(["replay", "--year", "2024"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("built-in rules"));
    let alerts = alerts_of(&String::from_utf8_lossy(&out.stdout));
    assert!(
        alerts.iter().any(|a| a["rule"] == "ssh-bruteforce"),
        "{alerts:?}"
    );
    let out = cepheus()
        .current_dir(&dir)
        .args(["replay", "--rules", "nowhere"])
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `distinct` closure's alert shows the values it counted (the most recent event of each),
/// not its latest repeats: a scan's ports, not sixteen tries of one port.
#[test]
fn a_distinct_closure_alert_shows_its_distinct_values() {
    let rules = r#"[[rule]]
name = "scan"
severity = "medium"
group_by = ["src"]
events.a = 'flow'
pattern = "a{3,} distinct(dport) within 1m"
"#;
    let mut lines = String::new();
    let mut ev = |s: u32, port: u32| {
        lines.push_str(&format!(
            "{{\"source\":\"flow\",\"time\":\"2024-01-01T00:00:{s:02}Z\",\"kind\":\"flow_start\",\"src\":\"10.0.0.9\",\"dport\":{port}}}\n"
        ));
    };
    ev(0, 22);
    for s in 1..30 {
        ev(s, 80);
    }
    ev(30, 443);
    let (out, _) = replay_case("distinct-events", rules, &lines);
    let alerts = alerts_of(&out);
    assert_eq!(alerts.len(), 1, "{out}");
    let ports: Vec<i64> = alerts[0]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["dport"].as_i64().unwrap())
        .collect();
    assert_eq!(ports, [22, 80, 443]);
}

/// `rules check --format json` says an unreadable path on stdout too, in the diagnostics'
/// shape, and exits 2.
#[test]
fn json_rules_check_reports_an_unreadable_path_as_json() {
    let out = cepheus()
        .args([
            "rules",
            "check",
            "--format",
            "json",
            "/nonexistent/cepheus-rules",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let line: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["severity"], "error");
    assert!(
        line["message"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/cepheus-rules")
    );
    assert!(line["help"].is_string());
}

/// `{rule}` and `{severity}` in a message are the alert's own, in every state of an episode
/// (an absence fires with no event to read them from; its resolving heartbeat has a syslog
/// `severity` number of its own).
#[test]
fn rule_and_severity_in_messages_are_the_alerts_own() {
    let (out, _) = replay_case(
        "msg-rule",
        r#"[[rule]]
name = "hb"
severity = "critical"
message = "{rule} ({severity}): no heartbeat from {host}"
group_by = ["host"]
expect = ["web-1"]
events.hb = 'syslog and app == "heartbeat"'
pattern = "absent(hb) for 60s"
"#,
        "<14>1 2024-01-01T00:00:00Z other x - - - x\n<14>1 2024-01-01T00:02:00Z web-1 heartbeat - - - alive\n",
    );
    let messages: Vec<String> = alerts_of(&out)
        .iter()
        .map(|a| format!("{} {}", a["state"], a["message"]))
        .collect();
    assert_eq!(
        messages,
        [
            "\"firing\" \"hb (critical): no heartbeat from web-1\"",
            "\"resolved\" \"hb (critical): no heartbeat from web-1\""
        ]
    );
}

/// A rule test reads its input as replay reads a file: a syslog line repeated byte for byte
/// within the dedup window counts once (JSON events alike still count each), so the test
/// expects replay's alerts; `dedup_window = "0s"` keeps every line, as `--dedup-window 0s`
/// does, and a test that fails while lines were dropped says so.
#[test]
fn a_rule_test_drops_repeated_syslog_lines_as_replay_does() {
    let (dir, rules) = scratch_rules(
        "ruletest-dedup",
        "[[rule]]\nname = \"two\"\nseverity = \"low\"\ngroup_by = [\"host\"]\n\
         events.a = 'syslog and app == \"a\"'\npattern = \"a{2}\"\n",
    );
    // web-1: one line twice (one message); web-2: two messages (other stamps); web-3: two
    // JSON events alike (two events).
    let input = r#"Dec 10 10:00:00 web-1 a[1]: same
Dec 10 10:00:00 web-1 a[1]: same
Dec 10 10:00:00 web-2 a[1]: same
Dec 10 10:00:01 web-2 a[1]: same
{"source":"syslog","time":"2024-12-10T10:00:02Z","host":"web-3","app":"a","msg":"same"}
{"source":"syslog","time":"2024-12-10T10:00:02Z","host":"web-3","app":"a","msg":"same"}
"#;
    let test = dir.join("x.test.toml");
    let write_test = |header: &str, hosts: &[&str]| {
        let mut t = format!("{header}\n[[test]]\nname = \"repeats\"\ninput = '''\n{input}'''\n");
        for h in hosts {
            t += &format!("[[test.expect]]\nrule = \"two\"\ngroup = {{ host = \"{h}\" }}\n");
        }
        std::fs::write(&test, t).unwrap();
    };
    write_test("", &["web-2", "web-3"]);
    let (code, out) = rules_test(&test);
    assert_eq!(code, Some(0), "{out}");
    // Replay's alerts on the same input.
    let log = dir.join("input.log");
    std::fs::write(&log, input).unwrap();
    let (stdout, stderr) = replay_with(&rules, &log);
    let mut hosts: Vec<String> = alerts_of(&stdout)
        .iter()
        .map(|a| a["group"]["host"].as_str().unwrap_or_default().to_string())
        .collect();
    hosts.sort();
    assert_eq!(hosts, ["web-2", "web-3"], "{stderr}");
    // A test that expects the repeat to count fails, and says why it may have.
    write_test("", &["web-1", "web-2", "web-3"]);
    let (code, out) = rules_test(&test);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("missing:    two firing {host=web-1}"), "{out}");
    assert!(
        out.contains(
            "note: 1 input line(s) dropped as exact repeats of a syslog line within 2s, as replay drops them"
        ),
        "{out}"
    );
    // `dedup_window = "0s"`: every line counts.
    write_test("dedup_window = \"0s\"", &["web-1", "web-2", "web-3"]);
    let (code, out) = rules_test(&test);
    assert_eq!(code, Some(0), "{out}");
    write_test("dedup_window = \"soon\"", &[]);
    let (code, out) = rules_test(&test);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("dedup_window `soon`"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A message relayed twice may sit in two files: the duplicate filter spans the inputs, so
/// splitting the input in two gives the same alerts.
#[test]
fn duplicates_are_found_across_input_files() {
    let (dir, rules) = scratch_rules("dedup-files", ANY_SYSLOG);
    let line = "<13>1 2024-01-01T00:00:00Z relay app - - - relayed twice\n";
    let (a, b, both) = (dir.join("a.log"), dir.join("b.log"), dir.join("both.log"));
    std::fs::write(&a, line).unwrap();
    std::fs::write(&b, line.replace('\n', "\r\n")).unwrap();
    std::fs::write(&both, format!("{line}{line}")).unwrap();
    let run = |inputs: &[&Path]| -> usize {
        let mut args = vec!["--rules", rules.to_str().unwrap()];
        args.extend(inputs.iter().map(|p| p.to_str().unwrap()));
        alerts_of(&replay(&args)).len()
    };
    assert_eq!(run(&[&both]), 1);
    assert_eq!(run(&[&a, &b]), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file given twice (a log relayed into two files) gives the events of one copy, in the
/// file's order: lines of the same second are not reordered by the read-ahead of the merge,
/// and each copy is dropped wherever it falls.
#[test]
fn a_file_given_twice_gives_one_copy_in_its_order() {
    let (dir, rules) = scratch_rules(
        "dedup-twice",
        "[[rule]]\nname = \"g-then-u\"\nseverity = \"low\"\n\
         events.g = 'syslog and app == \"groupadd\"'\nevents.u = 'syslog and app == \"useradd\"'\n\
         pattern = \"seq(g, u) within 1m\"\n",
    );
    let log = "Feb 22 11:47:04 h a: A\nFeb 22 11:47:05 h groupadd[1]: G\n\
               Feb 22 11:47:05 h useradd[2]: U\nFeb 22 11:47:06 h t: T\n";
    let (k1, k2) = (dir.join("k1.log"), dir.join("k2.log"));
    std::fs::write(&k1, log).unwrap();
    std::fs::write(&k2, log).unwrap();
    let out = cepheus()
        .args(["events", "--year", "2024"])
        .arg(&k1)
        .arg(&k2)
        .output()
        .unwrap();
    assert!(out.status.success());
    let msgs: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["msg"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(msgs, ["A", "G", "U", "T"]);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("4 events, 0 malformed, 4 duplicates dropped"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let alerts = alerts_of(&replay(&[
        "--year",
        "2024",
        "--rules",
        rules.to_str().unwrap(),
        k1.to_str().unwrap(),
        k2.to_str().unwrap(),
    ]));
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same text file named twice (also under another name) is read once, with a warning,
/// as a capture file is: its JSON events, which are never dropped as duplicates, would count
/// twice, and with `--dedup-window 0s` its syslog lines too.
#[test]
fn the_same_text_file_named_twice_is_read_once() {
    let (dir, _) = scratch_rules("text-twice", ANY_SYSLOG);
    let log = dir.join("mixed.log");
    std::fs::write(
        &log,
        "Feb 22 11:47:04 h a: A\n\
         {\"source\":\"syslog\",\"time\":\"2024-02-22T11:47:05Z\",\"host\":\"h\",\"app\":\"j\",\"msg\":\"J\"}\n",
    )
    .unwrap();
    let other_name = dir.join(".").join("mixed.log");
    let out = cepheus()
        .args(["events", "--year", "2024", "--dedup-window", "0s"])
        .arg(&log)
        .arg(&other_name)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let msgs: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["msg"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(msgs, ["A", "J"], "{stderr}");
    assert!(
        stderr.contains(&format!(
            "warning: {}: the same file was given before: read once",
            other_name.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("2 events, 0 malformed"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The summary counts per rule, shared or not: two rules that mean the same (one state when
/// shared) each count the late event, the refused group and the suppressed match.
#[test]
fn the_summary_counts_per_rule_shared_or_not() {
    let rule = |name: &str| {
        format!(
            "[[rule]]\nname = \"{name}\"\nseverity = \"low\"\ngroup_by = [\"host\"]\n\
             time = \"event\"\nmax_delay = \"0s\"\nmax_groups = 1\ntrigger = {{ every = \"1h\" }}\n\
             events.hb = 'syslog and app == \"hb\"'\npattern = \"hb\"\n\n"
        )
    };
    let (dir, rules) = scratch_rules("summary-per-rule", &(rule("x") + &rule("y")));
    let input = dir.join("in.log");
    std::fs::write(
        &input,
        "<14>1 2024-03-01T10:00:10Z h1 hb 1 - - a\n\
         <14>1 2024-03-01T10:00:05Z h1 hb 1 - - late\n\
         <14>1 2024-03-01T10:00:20Z h1 hb 1 - - suppressed\n\
         <14>1 2024-03-01T10:00:30Z h2 hb 1 - - refused\n",
    )
    .unwrap();
    let summary = |share: bool| {
        let mut c = cepheus();
        c.args(["replay", "--year", "2024"]);
        if !share {
            c.arg("--no-share");
        }
        let out = c.arg("--rules").arg(&rules).arg(&input).output().unwrap();
        assert!(out.status.success());
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        let line = err
            .lines()
            .find(|l| l.starts_with("replay: "))
            .unwrap()
            .to_string();
        // Without the timing and the predicate evaluations (the work differs, not the counts).
        line.split(" alerts in ").next().unwrap().to_string()
    };
    let shared = summary(true);
    assert_eq!(shared, summary(false));
    for want in [
        "2 late",
        "2 new groups refused (max_groups)",
        "2 suppressed by a trigger period",
    ] {
        assert!(shared.contains(want), "{want} in {shared}");
    }
    assert!(shared.ends_with(", 2"), "2 alerts: {shared}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The wrong file (no line of it an event) is said on stderr by `events` and `replay`; a file
/// with some events is not.
#[test]
fn a_file_with_no_event_in_it_is_said() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let csv = dir.join("not-a-log.csv");
    std::fs::write(&csv, "id,name\n1,alice\n2,bob\n").unwrap();
    let good = manifest().join("tests/data/syslog/loghub_OpenSSH_2k.log");
    for cmd in ["events", "replay"] {
        let out = cepheus().arg(cmd).arg(&csv).output().unwrap();
        assert!(out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("nothing read became an event (3 lines or captured messages were refused"),
            "{cmd}: {err}"
        );
        let out = cepheus()
            .args([cmd, "--year", "2024"])
            .arg(&csv)
            .arg(&good)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("none of the"), "{cmd}: {err}");
    }
}

/// At the end of a replay, an event-time rule's clock stops at the input's last line, whatever
/// its source (docs/rules.md, "Time"): lines no definition matches, a minute after the last
/// heartbeat, fire the silences that minute holds, as `--until +0s` does (before, the clock
/// stopped `max_delay` short of the last line and the silences were lost).
#[test]
fn event_time_replay_ends_at_the_last_line_whatever_its_source() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("replay_event_end");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let rules = dir.join("hb.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nname = \"hb\"\nseverity = \"critical\"\ngroup_by = [\"host\"]\nexpect = [\"h1\"]\n\
         time = \"event\"\nmax_delay = \"5s\"\nevents.hb = 'syslog and msg == \"hb\"'\n\
         pattern = \"absent(hb) for 60s\"\n",
    )
    .unwrap();
    let input = dir.join("in.jsonl");
    let line = |t: &str, host: &str, msg: &str| {
        format!(
            "{{\"source\": \"syslog\", \"time\": \"2024-01-01T00:{t}Z\", \"host\": \"{host}\", \"app\": \"t\", \"msg\": \"{msg}\"}}\n"
        )
    };
    std::fs::write(
        &input,
        [
            line("00:00", "h2", "hb"),
            line("00:30", "h1", "x"),
            line("01:00", "h1", "x"),
        ]
        .concat(),
    )
    .unwrap();
    let (r, i) = (rules.to_string_lossy(), input.to_string_lossy());
    let plain = replay(&["--rules", &r, &i]);
    let until = replay(&["--rules", &r, &i, "--until", "+0s"]);
    assert_eq!(plain, until);
    let fired: Vec<Value> = plain
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let hosts: Vec<&str> = fired
        .iter()
        .filter(|a| a["state"] == "firing" && a["time"] == "2024-01-01T00:01:00Z")
        .map(|a| a["group"]["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["h1", "h2"], "{plain}");
}

/// With `--year`, rotated files named one after the other are one log: the second file's
/// stamps follow on from the first file's, over New Year, in either order they are named,
/// so the alerts are those of the two files written as one.
#[test]
fn year_carries_over_new_year_across_rotated_files() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("new-year-rotated");
    std::fs::create_dir_all(&dir).unwrap();
    let mut old = String::new();
    for (i, s) in [50, 52, 54, 56, 58].iter().enumerate() {
        old.push_str(&format!(
            "Dec 31 23:59:{s} gw sshd[{}]: Failed password for root from 203.0.113.9 port {} ssh2\n",
            100 + i,
            50000 + i
        ));
    }
    let new = "Jan  1 00:00:30 gw sshd[200]: Accepted password for root from 203.0.113.9 port 50100 ssh2\n";
    let (rotated, current, whole) = (
        dir.join("auth.log.1"),
        dir.join("auth.log"),
        dir.join("whole.log"),
    );
    std::fs::write(&rotated, &old).unwrap();
    std::fs::write(&current, new).unwrap();
    std::fs::write(&whole, format!("{old}{new}")).unwrap();
    let rules = manifest().join("../rules/ssh.toml");
    let fired = |files: &[&Path]| -> Vec<String> {
        let mut args = vec!["--year", "2024", "--rules", rules.to_str().unwrap()];
        args.extend(files.iter().map(|p| p.to_str().unwrap()));
        alerts_of(&replay(&args))
            .iter()
            .filter(|a| a["rule"] == "ssh-bruteforce-then-success" && a["state"] == "firing")
            .map(|a| a["time"].as_str().unwrap().to_owned())
            .collect()
    };
    let expected = fired(&[&whole]);
    assert_eq!(expected, ["2025-01-01T00:00:30Z"]);
    assert_eq!(fired(&[&rotated, &current]), expected);
    // Named newest first (as `auth.log*` expands), `--year` is the year of the first file
    // named: the same alert a year earlier, the two files still one log.
    assert_eq!(fired(&[&current, &rotated]), ["2024-01-01T00:00:30Z"]);
}

/// DESIGN.md: "Monitoring begins ... in replay at the first event's time." The first event is
/// a backlog line stamped 00:00:00 that arrived at 00:02:00: the expected host that never
/// speaks is missing 60 s after that stamp, not 60 s after the line arrived.
#[test]
fn an_event_time_replay_begins_at_the_first_events_stamp_however_late_it_arrived() {
    let (dir, rules) = scratch_rules(
        "replay-begins-first",
        "[[rule]]\nname = \"hb\"\nseverity = \"high\"\ngroup_by = [\"host\"]\ntime = \"event\"\n\
         max_delay = \"5s\"\nevents.hb = 'syslog and app == \"heartbeat\"'\n\
         pattern = \"absent(hb) for 60s\"\nexpect = [\"quiet\"]\n",
    );
    let events = dir.join("events.jsonl");
    std::fs::write(
        &events,
        concat!(
            r#"{"source":"syslog","time":"2024-01-01T00:00:00Z","arrival":"2024-01-01T00:02:00Z","host":"web","app":"heartbeat"}"#,
            "\n",
            r#"{"source":"syslog","time":"2024-01-01T00:02:00Z","host":"web","app":"heartbeat"}"#,
            "\n",
        ),
    )
    .unwrap();
    let (stdout, stderr) = replay_with(&rules, &events);
    let firing: Vec<(String, String)> = alerts_of(&stdout)
        .iter()
        .filter(|a| a["state"] == "firing")
        .map(|a| {
            (
                a["group"]["host"].as_str().unwrap().to_string(),
                a["time"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let at = |h: &str, t: &str| (h.to_string(), format!("2024-01-01T{t}Z"));
    // web itself was silent from its first stamp to 00:02:00 too.
    assert_eq!(
        firing,
        vec![at("quiet", "00:01:00"), at("web", "00:01:00")],
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Five failed logins from one address folded by the sender's syslogd into one line and its
/// `last message repeated 4 times` (sysklogd, FreeBSD forwarding without a hostname) are five
/// failures, as rsyslog's `message repeated 4 times: [...]` is: the brute force alerts.
#[test]
fn a_syslogd_repeat_notice_counts_its_copies() {
    let rule = r#"[[rule]]
name = "ssh-bruteforce-then-success"
severity = "high"
group_by = ["src"]
events.fail = 'syslog and app == "sshd" and msg =~ "Failed password for (?:invalid user )?(?P<user>\S+) from (?P<src>[0-9a-f.:]+)"'
events.ok   = 'syslog and app == "sshd" and msg =~ "Accepted \w+ for (?P<user>\S+) from (?P<src>[0-9a-f.:]+)"'
pattern  = "seq(fail{5,}, ok) within 5m"
"#;
    let lines = |repeated: &str| {
        format!(
            "<38>Mar  1 10:00:00 sshd[41]: Failed password for root from 203.0.113.9 port 5011 ssh2\n\
             <38>Mar  1 10:00:09 {repeated}\n\
             <38>Mar  1 10:00:20 sshd[42]: Accepted password for root from 203.0.113.9 port 5012 ssh2\n"
        )
    };
    let (out, _) = replay_case(
        "syslogd-repeats",
        rule,
        &lines("last message repeated 4 times"),
    );
    let alerts = alerts_of(&out);
    assert_eq!(alerts.len(), 1, "{out}");
    assert_eq!(alerts[0]["group"]["src"], "203.0.113.9");
    // Three copies are four failures: no alert.
    let (out, _) = replay_case(
        "syslogd-repeats-short",
        rule,
        &lines("last message repeated 3 times"),
    );
    assert_eq!(alerts_of(&out).len(), 0, "{out}");
}
