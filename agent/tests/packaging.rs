//! The systemd packaging (systemd/): the unit verifies and is hardened, the packaged
//! configuration is valid, and install.sh lays the files out with the right modes.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

fn systemd_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../systemd"))
}

/// The unit with `ExecStart` naming the built binary (verify checks that it exists).
fn unit_for_test(dir: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(systemd_dir().join("cepheus.service")).unwrap();
    assert!(text.contains("ExecStart=/usr/bin/cepheus run --config /etc/cepheus/cepheus.toml"));
    // Each host's own token, made before the first start; a log folder it may write.
    assert!(text.contains("ExecStartPre=+/usr/lib/cepheus/make-token /etc/cepheus/api.token"));
    assert!(text.contains("LogsDirectory=cepheus"));
    // A reload checks the configuration and rules before the signal: a bad edit fails it.
    let reload: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("ExecReload="))
        .collect();
    assert_eq!(
        reload,
        [
            "/usr/bin/cepheus config check /etc/cepheus/cepheus.toml",
            "/bin/kill -HUP $MAINPID"
        ]
    );
    let unit = dir.join("cepheus.service");
    let token_script = systemd_dir().join("make-token.sh");
    std::fs::write(
        &unit,
        text.replace("/usr/bin/cepheus", env!("CARGO_BIN_EXE_cepheus"))
            .replace(
                "/usr/lib/cepheus/make-token",
                &token_script.to_string_lossy(),
            ),
    )
    .unwrap();
    unit
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("packaging-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_unit_verifies_cleanly_and_is_hardened() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED: systemd-analyze is not installed (apt-get install systemd)");
        return;
    }
    let dir = scratch("unit");
    let unit = unit_for_test(&dir);
    // verify says unknown keys and typos on stderr with exit status 0: any output fails.
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
    // Exposure 0-10 (threshold on a 0-100 scale): at most 2.5, "OK".
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--threshold=25"])
        .arg(&unit)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn the_packaged_configuration_is_valid_and_says_what_design_fixes() {
    let path = systemd_dir().join("cepheus.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let cfg = cepheus_agent::run::config::Config::parse(&path, &text).unwrap();
    // All interfaces, IPv4 and IPv6.
    let all: [std::net::SocketAddr; 2] =
        ["0.0.0.0:514".parse().unwrap(), "[::]:514".parse().unwrap()];
    assert_eq!(cfg.syslog.udp, all);
    assert_eq!(cfg.syslog.tcp, all);
    assert!(cfg.api.listen.ip().is_loopback());
    assert_eq!(
        cfg.api.socket.as_deref(),
        Some(Path::new("/run/cepheus/api.sock"))
    );
    assert_eq!(
        cfg.api.token_file.as_deref(),
        Some(Path::new("/etc/cepheus/api.token"))
    );
    assert_eq!(cfg.store.path(), Path::new("/var/lib/cepheus/store"));
    assert_eq!(cfg.rules.paths, [Path::new("/etc/cepheus/rules")]);
}

#[test]
fn install_sh_stages_the_files_with_their_modes_and_keeps_what_is_there() {
    let root = scratch("install");
    let run = || {
        let out = Command::new("sh")
            .arg(systemd_dir().join("install.sh"))
            .arg(env!("CARGO_BIN_EXE_cepheus"))
            .env("DESTDIR", &root)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run();
    let mode = |p: &str| {
        std::fs::metadata(root.join(p))
            .unwrap_or_else(|e| panic!("{p}: {e}"))
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("usr/bin/cepheus"), 0o755);
    assert_eq!(mode("usr/lib/systemd/system/cepheus.service"), 0o644);
    assert_eq!(mode("usr/lib/sysusers.d/cepheus.conf"), 0o644);
    assert_eq!(mode("usr/lib/tmpfiles.d/cepheus.conf"), 0o644);
    assert_eq!(mode("usr/lib/cepheus/make-token"), 0o755);
    assert_eq!(mode("etc/cepheus"), 0o750);
    assert_eq!(mode("etc/cepheus/cepheus.toml"), 0o640);
    // A package ships no token: each host makes its own at first start (the unit's
    // ExecStartPre runs make-token), kept from then on.
    assert!(!root.join("etc/cepheus/api.token").exists());
    let group = String::from_utf8(Command::new("id").arg("-gn").output().unwrap().stdout).unwrap();
    let make = || {
        let st = Command::new(root.join("usr/lib/cepheus/make-token"))
            .arg(root.join("etc/cepheus/api.token"))
            .arg(group.trim())
            .status()
            .unwrap();
        assert!(st.success());
    };
    make();
    assert_eq!(mode("etc/cepheus/api.token"), 0o640);
    let token = std::fs::read_to_string(root.join("etc/cepheus/api.token")).unwrap();
    let token = token.trim().to_string();
    assert_eq!(token.len(), 64);
    assert!(token.chars().all(|c| c.is_ascii_hexdigit()), "{token}");
    make();
    let kept = std::fs::read_to_string(root.join("etc/cepheus/api.token")).unwrap();
    assert_eq!(kept.trim(), token, "kept");
    // The shipped rules, valid, expecting none of the example hosts (they would page as
    // silent a minute after a fresh install).
    let rules = root.join("etc/cepheus/rules");
    assert!(rules.join("heartbeat.toml").exists());
    // Not the rules' tests (they belong to the source tree; each pins the lists it reads).
    let tests: Vec<_> = std::fs::read_dir(&rules)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".test.toml"))
        .collect();
    assert!(tests.is_empty(), "{tests:?}");
    let hosts = std::fs::read_to_string(rules.join("hosts.txt")).unwrap();
    assert!(
        hosts
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')),
        "{hosts}"
    );
    let st = Command::new(env!("CARGO_BIN_EXE_cepheus"))
        .args(["rules", "check"])
        .arg(&rules)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    // A second run keeps the token, the configuration and the rules as they are.
    std::fs::write(root.join("etc/cepheus/cepheus.toml"), "# mine\n").unwrap();
    run();
    let again = std::fs::read_to_string(root.join("etc/cepheus/api.token")).unwrap();
    assert_eq!(again.trim(), token);
    assert_eq!(
        std::fs::read_to_string(root.join("etc/cepheus/cepheus.toml")).unwrap(),
        "# mine\n"
    );
}
