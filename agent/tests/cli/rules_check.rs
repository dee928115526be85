//! `cepheus rules check`: the shipped rules are valid, and every broken file in
//! `tests/broken/` gets the expected diagnostics (snapshots of the JSON and of the rendering).

use std::path::{Path, PathBuf};
use std::process::Command;

fn cepheus(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cepheus"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
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
fn shipped_rules_are_valid() {
    let (code, stdout, stderr) = cepheus(&["rules", "check", "../rules"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains(" rules: 0 errors, 0 warnings"), "{stderr}");
    let (code, stdout, _) = cepheus(&["rules", "check", "--format", "json", "../rules"]);
    assert_eq!((code, stdout.as_str()), (0, ""));
}

/// A reader of the diagnostics that went away (`rules check x 2>&1 | head -c 100`) does not
/// turn the exit code into a panic's 101: the check's own code stands, for humans (stderr)
/// and for JSON (stdout).
#[test]
fn closed_output_keeps_the_exit_code() {
    for (args, into_stdout) in [
        (
            &["rules", "check", "tests/broken/unknown_key.toml"][..],
            false,
        ),
        (
            &[
                "rules",
                "check",
                "--format",
                "json",
                "tests/broken/unknown_key.toml",
            ][..],
            true,
        ),
        (&["rules", "test", "../rules"][..], true),
    ] {
        // A pipe whose reading end is closed before the command starts: every write fails.
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cepheus"));
        cmd.args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("NO_COLOR", "1");
        if into_stdout {
            cmd.stdout(writer).stderr(std::process::Stdio::null());
        } else {
            cmd.stderr(writer).stdout(std::process::Stdio::null());
        }
        let status = cmd.status().expect("run cepheus");
        let want = if args[1] == "test" { 0 } else { 1 };
        assert_eq!(status.code(), Some(want), "{args:?}");
    }
}

#[test]
fn missing_path_is_a_usage_error() {
    let (code, _, stderr) = cepheus(&["rules", "check", "tests/broken/no-such-file.toml"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("no-such-file.toml"), "{stderr}");
    // Beside a file that is there, the file's findings are said too, and the missing path
    // is named in the JSON line.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rules_check_missing");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[[rule]]\nname = \"a\"\nsevrity = \"high\"\nevents.a = \"syslog\"\npattern = \"a\"\n",
    )
    .unwrap();
    let bad = bad.to_string_lossy();
    let (code, _, stderr) = cepheus(&["rules", "check", &bad, "/nonexistent.toml"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("sevrity"), "{stderr}");
    assert!(
        stderr.contains("/nonexistent.toml: no such file"),
        "{stderr}"
    );
    let (code, stdout, _) = cepheus(&[
        "rules",
        "check",
        "--format",
        "json",
        &bad,
        "/nonexistent.toml",
    ]);
    assert_eq!(code, 2);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["message"].as_str().unwrap().contains("sevrity")),
        "{stdout}"
    );
    assert!(
        lines.iter().any(|l| l["file"] == "/nonexistent.toml"),
        "{stdout}"
    );
}

/// A folder with a link back up (a loop) and a second link to one rule file: each rule file
/// is read once, so nothing is a duplicate of itself.
#[cfg(unix)]
#[test]
fn linked_folders_and_files_are_read_once() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rules_check_links");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(
        dir.join("a.toml"),
        "[[rule]]\nname = \"a\"\nseverity = \"low\"\nevents.x = 'app == \"x\"'\npattern = \"x\"\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("..", dir.join("sub/back")).unwrap();
    std::os::unix::fs::symlink("../a.toml", dir.join("sub/alias.toml")).unwrap();
    let path = dir.to_string_lossy().into_owned();
    let (code, _, stderr) = cepheus(&["rules", "check", &path]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("1 file, 1 rule: 0 errors, 0 warnings"),
        "{stderr}"
    );
    // The same file named twice on the command line, by two paths.
    let alias = dir.join("sub/alias.toml").to_string_lossy().into_owned();
    let direct = dir.join("a.toml").to_string_lossy().into_owned();
    let (code, _, stderr) = cepheus(&["rules", "check", &direct, &alias]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("1 file, 1 rule:"), "{stderr}");
}

/// An editor's lock file (Emacs writes `.#name.toml`, a link to nothing) and other hidden
/// entries in a rule folder are not rule files: the folder still checks (and so reloads). A
/// rule file that links to nothing (its target moved) is an error, said with the link: its
/// rules would go unwatched without a word.
#[cfg(unix)]
#[test]
fn hidden_entries_are_skipped_and_a_dangling_rule_file_is_an_error() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rules_check_hidden");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    std::fs::write(
        dir.join("a.toml"),
        "[[rule]]\nname = \"a\"\nseverity = \"low\"\nevents.a = \"syslog\"\npattern = \"a\"\n",
    )
    .unwrap();
    std::fs::write(dir.join(".git/broken.toml"), "not toml [").unwrap();
    std::os::unix::fs::symlink("root@vm.1234:1700000000", dir.join(".#a.toml")).unwrap();
    // A link to nothing that is not named as a rule file is no concern of the rules.
    std::os::unix::fs::symlink("/nonexistent/notes", dir.join("notes")).unwrap();
    let (code, _, stderr) = cepheus(&["rules", "check", &dir.to_string_lossy()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("1 file, 1 rule:"), "{stderr}");
    std::os::unix::fs::symlink("/nonexistent/b.toml", dir.join("b.toml")).unwrap();
    let (code, _, stderr) = cepheus(&["rules", "check", &dir.to_string_lossy()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("b.toml (a link to /nonexistent/b.toml, which does not exist)"),
        "{stderr}"
    );
}

fn cases() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broken");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() || p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    v
}

#[test]
fn broken_rule_files() {
    let cases = cases();
    assert!(cases.len() >= 30, "{} cases", cases.len());
    for case in cases {
        let name = case.file_stem().unwrap().to_string_lossy().into_owned();
        let rel = format!(
            "tests/broken/{}",
            case.file_name().unwrap().to_string_lossy()
        );
        let (code, json, _) = cepheus(&["rules", "check", "--format", "json", &rel]);
        let (code2, human_out, human) = cepheus(&["rules", "check", &rel]);
        assert_eq!(code, code2);
        assert_eq!(human_out, "");
        assert!(code == 0 || code == 1, "{name}: exit {code}");
        // every line of JSON is one object with the documented keys
        for line in json.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            for k in ["file", "line", "column", "severity", "message", "help"] {
                assert!(v.get(k).is_some(), "{name}: {k} missing in {line}");
            }
        }
        assert!(!json.is_empty(), "{name}: no diagnostic");
        // Every finding points at its culprit with a caret, and says how to fix it.
        assert!(
            human
                .lines()
                .any(|l| l.trim_start().starts_with('·') && l.contains('^')),
            "{name}: no caret\n{human}"
        );
        // The rendering's `[file:line:column]` headers say what the JSON says (columns in
        // characters, also after `é` or `日本`).
        let mut from_json: Vec<String> = json
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                format!(
                    "{}:{}:{}",
                    v["file"].as_str().unwrap(),
                    v["line"],
                    v["column"]
                )
            })
            .collect();
        let mut from_human: Vec<String> = human
            .lines()
            .filter_map(|l| l.split_once("─[").and_then(|(_, r)| r.strip_suffix(']')))
            .map(str::to_string)
            .collect();
        from_json.sort();
        from_human.sort();
        for at in &from_json {
            assert!(from_human.contains(at), "{name}: {at} not in\n{human}");
        }
        let snap = format!("exit: {code}\n--- json\n{json}--- human\n{human}");
        insta::assert_snapshot!(name, snap);
    }
}

/// Hostile rule files: a FIFO (opening it would wait for a writer forever) and a link to
/// /dev/zero (never ends) are refused at once; a file that is not UTF-8 is an error at its
/// first bad byte, and the other files are still checked.
#[test]
fn fifos_devices_and_non_utf8_files_are_refused_with_a_reason() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rules_check_hostile");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("fifo")).unwrap();
    std::fs::create_dir_all(dir.join("mix")).unwrap();
    let fifo = dir.join("fifo/f.toml");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        let (code, _, stderr) = cepheus(&["rules", "check", &dir.join("fifo").to_string_lossy()]);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("not a regular file"), "{stderr}");
    }
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero.toml")).unwrap();
    let (code, _, stderr) = cepheus(&["rules", "check", &dir.join("zero.toml").to_string_lossy()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");

    std::fs::write(
        dir.join("mix/a.toml"),
        b"[[rule]]\nname = \"a\xffb\"\nseverity = \"high\"\nevents.a = \"syslog\"\npattern = \"a\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("mix/b.toml"),
        "[[rule]]\nname = \"b\"\nseverity = \"hig\"\nevents.a = \"syslog\"\npattern = \"a\"\n",
    )
    .unwrap();
    let mix = dir.join("mix").to_string_lossy().into_owned();
    let (code, _, stderr) = cepheus(&["rules", "check", &mix]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("a.toml:2:10"), "{stderr}");
    assert!(stderr.contains("byte 0xff"), "{stderr}");
    assert!(stderr.contains("unknown severity `hig`"), "{stderr}");
    assert!(
        stderr.find("a.toml:2:10") < stderr.find("b.toml:3:12"),
        "{stderr}"
    );
}

/// The summary counts rules as TOML reads them, not by matching `[[rule]]` lines (a BOM,
/// `[[ rule ]]`, a comment after the header or an inline array made it say 0 or 1).
#[test]
fn the_summary_counts_rules_as_toml_reads_them() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rules_check_count");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let body = "severity = \"high\"\nevents.a = \"syslog\"\npattern = \"a\"\n";
    std::fs::write(
        dir.join("a.toml"),
        format!("\u{feff}[[rule]]\nname = \"a\"\n{body}[[ rule ]]\nname = \"b\"\n{body}[[rule]] # c\nname = \"c\"\n{body}"),
    )
    .unwrap();
    std::fs::write(
        dir.join("b.toml"),
        "rule = [{name = \"d\", severity = \"high\", events.a = \"syslog\", pattern = \"a\"}]\n",
    )
    .unwrap();
    let (code, _, stderr) = cepheus(&["rules", "check", &dir.to_string_lossy()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("2 files, 4 rules: 0 errors"), "{stderr}");
}

/// A finding far along a very long line (a 70 KB string, then an unknown field) is written
/// as one plain line with its file, line and column: the snippet renderer cannot pad past
/// 65,535 columns, and a panic there stopped every command and the agent's start.
#[test]
fn a_finding_far_along_a_long_line_is_written_plainly() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rules_check_wide");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let long = "x".repeat(70_000);
    std::fs::write(
        dir.join("wide.toml"),
        format!(
            "[[rule]]\nname = \"w\"\nseverity = \"high\"\nevents.a = 'msg == \"{long}\" and apps == \"b\"'\npattern = \"a\"\n"
        ),
    )
    .unwrap();
    let (code, _, stderr) = cepheus(&["rules", "check", &dir.to_string_lossy()]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("wide.toml:4:70027: error: unknown field `apps`"),
        "{}",
        &stderr[..stderr.len().min(500)]
    );
    assert!(
        stderr.contains("help: did you mean `app`?"),
        "{stderr:.500}"
    );
    // The part of the line around it is shown, the caret under the culprit (found by an
    // audit: a long IOC regex lost its snippet, and a shorter long line put the caret
    // thousands of columns to the right).
    let x34 = "x".repeat(34);
    let shown = format!(
        " 4 | …{x34}\" and apps == \"b\"'\n   | {}^\n",
        " ".repeat(41)
    );
    assert!(stderr.contains(&shown), "{shown}\n{stderr:.800}");
    for len in [300, 8_000] {
        std::fs::write(
            dir.join("wide.toml"),
            format!(
                "[[rule]]\nname = \"w\"\nseverity = \"high\"\nevents.a = 'msg == \"{}\" and apps == \"b\"'\npattern = \"a\"\n",
                "y".repeat(len)
            ),
        )
        .unwrap();
        let (_, _, stderr) = cepheus(&["rules", "check", &dir.to_string_lossy()]);
        let widest = stderr.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        assert!(widest < 200, "{len}: a line of {widest}: {stderr:.600}");
        assert!(stderr.contains("and apps"), "{stderr:.600}");
    }
}
