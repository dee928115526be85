//! The client side of the agent's API, for the commands that act on a running agent
//! (`cepheus groups forget`, `cepheus alerts`). Where the agent is comes from the same
//! configuration file `cepheus run` reads: `--config FILE`, else the packaged
//! `/etc/cepheus/cepheus.toml` when it can be read, else the built-in defaults. The client
//! speaks to the agent's Unix socket (`api.socket`) when it can open it (no token needed:
//! the socket's mode let it in), else to `api.listen` with the token of `api.token_file`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::run::config::Config;

/// Where the packaged configuration lives.
pub const PACKAGED_CONFIG: &str = "/etc/cepheus/cepheus.toml";

/// A running agent's API, as a configuration names it.
pub struct Client {
    base: String,
    listen: String,
    token: Option<String>,
    /// The Unix socket to use instead of `listen`.
    socket: Option<PathBuf>,
    /// Which configuration was read (for the hint on a refused token).
    config: Option<PathBuf>,
    /// Why no token is sent, when none is (for the hint on a refused one).
    no_token: Option<String>,
    /// The agent's store (`store.path`), for commands that can read it while it is down.
    store: PathBuf,
}

/// The agent's API could not be reached at all (nothing listens, or the socket refused us),
/// as opposed to an answer the command did not want.
#[derive(Debug)]
pub struct Unreachable(pub String);

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unreachable {}

/// What the agent answered, when it answered something the command handles.
pub enum Answer {
    /// 2xx, with the body.
    Ok(String),
    /// 404, with the body.
    NotFound(String),
}

/// The largest answer read (20,000 alerts of 16 events fit).
const MAX_BODY: usize = 256 << 20;

/// Who runs this command, for an acknowledgement's `by`: under `sudo` (or `doas`) as root,
/// the user who ran it (`$SUDO_USER`, `$DOAS_USER`: the docs tell operators to run
/// `sudo cepheus alerts`, and every ack would say `root`); else `$USER`, else `$LOGNAME`,
/// else the name `/etc/passwd` gives the effective user id (a shell under tmux, cron or sudo
/// may set neither variable), else `uid N`.
pub fn current_user() -> String {
    let root = rustix::process::geteuid().is_root();
    if let Some(u) = user_from_env(root, |v| std::env::var(v).ok()) {
        return u;
    }
    let uid = rustix::process::geteuid().as_raw();
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|p| user_of_uid(&p, uid))
        .unwrap_or_else(|| format!("uid {uid}"))
}

/// The user the environment names (`var` reads a variable): see [`current_user`].
fn user_from_env(root: bool, var: impl Fn(&str) -> Option<String>) -> Option<String> {
    let vars: &[&str] = if root {
        &["SUDO_USER", "DOAS_USER", "USER", "LOGNAME"]
    } else {
        &["USER", "LOGNAME"]
    };
    vars.iter()
        .find_map(|v| var(v).filter(|u| !u.trim().is_empty()))
}

/// The name of user `uid` in a passwd file's text.
fn user_of_uid(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let id: u32 = f.nth(1)?.parse().ok()?;
        (id == uid && !name.is_empty()).then(|| name.to_string())
    })
}

fn read_body(r: impl Read) -> Result<String, String> {
    let mut text = String::new();
    r.take(MAX_BODY as u64)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    Ok(text)
}

/// How long a request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

impl Client {
    /// The API of the agent configured by `config` (see the module docs without one).
    pub fn new(config: Option<&PathBuf>) -> anyhow::Result<Client> {
        let mut no_token = None;
        let (cfg, path, strict) = match config {
            Some(p) => (
                Config::load(p).map_err(|e| anyhow::anyhow!("{e}"))?,
                Some(p.clone()),
                true,
            ),
            None => match std::fs::File::open(PACKAGED_CONFIG) {
                Ok(_) => (
                    Config::load(Path::new(PACKAGED_CONFIG)).map_err(|e| anyhow::anyhow!("{e}"))?,
                    Some(PathBuf::from(PACKAGED_CONFIG)),
                    false,
                ),
                Err(e) => {
                    // The packaged one, there but not for this user: the built-in defaults
                    // hold no token, and a refusal must say why.
                    if e.kind() == std::io::ErrorKind::PermissionDenied {
                        no_token = Some(format!(
                            "{PACKAGED_CONFIG} cannot be read by this user, so its api.token_file is not either: run as root (sudo) or as a member of group cepheus, or pass --config"
                        ));
                    }
                    (Config::default(), None, false)
                }
            },
        };
        let socket = cfg
            .api
            .socket
            .clone()
            .filter(|s| std::os::unix::net::UnixStream::connect(s).is_ok());
        // The token matters only over TCP; a file found by itself that cannot be read is
        // left out (the agent then says 401, with a hint).
        let token = match (&socket, strict) {
            (Some(_), _) => None,
            (None, true) => cfg.api.token()?,
            (None, false) => cfg.api.token().unwrap_or_else(|e| {
                no_token = Some(format!(
                    "{e}: run as root (sudo) or as a member of group cepheus, or pass --config"
                ));
                None
            }),
        };
        if token.is_none()
            && no_token.is_none()
            && let Some(p) = &path
            && cfg.api.token_file.is_none()
        {
            no_token = Some(format!(
                "{} names no api.token_file, and the agent wants a token",
                p.display()
            ));
        }
        Ok(Client {
            base: format!("http://{}", cfg.api.listen),
            listen: cfg.api.listen.to_string(),
            token,
            socket,
            config: path,
            no_token,
            store: cfg.store.path().to_path_buf(),
        })
    }

    /// The agent's store folder, as its configuration names it.
    pub fn store(&self) -> &Path {
        &self.store
    }

    /// Where requests go, for messages.
    pub fn target(&self) -> String {
        match &self.socket {
            Some(s) => s.display().to_string(),
            None => self.listen.clone(),
        }
    }

    /// `GET path` (with its query).
    pub fn get(&self, path: &str) -> anyhow::Result<Answer> {
        self.request("GET", path, None)
    }

    /// `GET path` as a stream that stays open (`/alerts/stream`): the body's bytes as they
    /// come (chunk framing included over the socket: readers look for whole lines). A read
    /// waits at most a minute (the agent says something every 5 s).
    pub fn stream(&self, path: &str) -> Result<Box<dyn Read + Send>, String> {
        const IDLE: Duration = Duration::from_secs(60);
        match &self.socket {
            Some(sock) => {
                let mut s = socket_request(
                    sock,
                    IDLE,
                    &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n"),
                )?;
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    s.read_exact(&mut byte).map_err(|e| e.to_string())?;
                    head.push(byte[0]);
                    if head.len() > 16 << 10 {
                        return Err("an answer whose headers do not end".into());
                    }
                }
                if !head.starts_with(b"HTTP/1.1 200") {
                    let line = String::from_utf8_lossy(&head);
                    return Err(format!(
                        "the agent answered {}",
                        line.lines().next().unwrap_or("")
                    ));
                }
                Ok(Box::new(s))
            }
            None => {
                let agent = ureq::AgentBuilder::new()
                    .timeout_connect(TIMEOUT)
                    .timeout_read(IDLE)
                    .build();
                let mut req = agent.get(&format!("{}{path}", self.base));
                if let Some(t) = &self.token {
                    req = req.set("Authorization", &format!("Bearer {t}"));
                }
                let resp = req.call().map_err(|e| e.to_string())?;
                Ok(Box::new(resp.into_reader()))
            }
        }
    }

    /// `POST path` with a JSON body.
    pub fn post_json(&self, path: &str, body: serde_json::Value) -> anyhow::Result<Answer> {
        self.request("POST", path, Some(body.to_string()))
    }

    fn request(&self, method: &str, path: &str, body: Option<String>) -> anyhow::Result<Answer> {
        let sent = match &self.socket {
            Some(s) => over_socket(s, method, path, body.as_deref()),
            None => self.over_tcp(method, path, body.as_deref()),
        };
        let (status, text) = sent.map_err(|e| {
            anyhow::Error::new(Unreachable(format!(
                "cannot reach the agent's API at {} (is `cepheus run` running with this configuration?): {e}",
                self.target()
            )))
        })?;
        match status {
            200..=299 => Ok(Answer::Ok(text)),
            404 => Ok(Answer::NotFound(text)),
            code => {
                let hint = match (code, &self.no_token, &self.config) {
                    (401, Some(why), _) => format!(" ({why})"),
                    (401, None, None) => {
                        " (pass --config with the agent's configuration: its api.token_file is read)"
                            .to_string()
                    }
                    (401, None, Some(_)) => {
                        " (the token in this configuration's api.token_file is not the agent's)"
                            .to_string()
                    }
                    _ => String::new(),
                };
                anyhow::bail!(
                    "the agent at {} answered {code}: {}{hint}",
                    self.target(),
                    text.trim()
                )
            }
        }
    }

    fn over_tcp(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<(u16, String), String> {
        let url = format!("{}{path}", self.base);
        let mut req = ureq::request(method, &url).timeout(TIMEOUT);
        if let Some(t) = &self.token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        let r = match body {
            Some(b) => req.set("Content-Type", "application/json").send_string(b),
            None => req.call(),
        };
        match r {
            Ok(resp) => {
                let status = resp.status();
                Ok((status, read_body(resp.into_reader())?))
            }
            Err(ureq::Error::Status(code, resp)) => {
                Ok((code, read_body(resp.into_reader()).unwrap_or_default()))
            }
            Err(e) => Err(e.to_string()),
        }
    }
}

/// One HTTP/1.1 request over a Unix socket (ureq speaks TCP only; the agent's answers to
/// these requests are small, whole bodies with a `Content-Length`, and the connection is
/// closed after each).
fn over_socket(
    path: &Path,
    method: &str,
    target: &str,
    body: Option<&str>,
) -> Result<(u16, String), String> {
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    if let Some(b) = body {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        ));
    } else {
        req.push_str("\r\n");
    }
    let s = socket_request(path, TIMEOUT, &req)?;
    let mut raw = Vec::new();
    s.take(MAX_BODY as u64)
        .read_to_end(&mut raw)
        .map_err(|e| e.to_string())?;
    parse_response(&raw)
}

/// Connects to the agent's Unix socket and sends `request` (reads then wait at most `read`).
fn socket_request(
    path: &Path,
    read: Duration,
    request: &str,
) -> Result<std::os::unix::net::UnixStream, String> {
    let mut s = std::os::unix::net::UnixStream::connect(path).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(read)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    Ok(s)
}

/// Status and body of a whole HTTP/1.1 response (`Content-Length` or read to the end).
fn parse_response(raw: &[u8]) -> Result<(u16, String), String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("a response without its end of headers")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|e| e.to_string())?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or("a response without a status")?;
    let mut body = &raw[end + 4..];
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            let k = k.trim();
            if k.eq_ignore_ascii_case("content-length")
                && let Ok(n) = v.trim().parse::<usize>()
            {
                body = body.get(..n).ok_or("a response cut short")?;
            } else if k.eq_ignore_ascii_case("transfer-encoding") {
                return Err("a chunked response (not expected from the agent)".into());
            }
        }
    }
    Ok((status, String::from_utf8_lossy(body).into_owned()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Under sudo as root, an ack is the sudoer's, not root's; a user's own `$SUDO_USER`
    /// (not root) changes nothing.
    #[test]
    fn an_ack_under_sudo_is_the_sudoers() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |v: &str| {
                vars.iter()
                    .find(|(k, _)| *k == v)
                    .map(|(_, x)| x.to_string())
            }
        };
        let sudo = env(&[("USER", "root"), ("SUDO_USER", "alice")]);
        assert_eq!(user_from_env(true, sudo).as_deref(), Some("alice"));
        assert_eq!(user_from_env(false, sudo).as_deref(), Some("root"));
        let plain = env(&[("USER", "bob"), ("SUDO_USER", "")]);
        assert_eq!(user_from_env(true, plain).as_deref(), Some("bob"));
        assert_eq!(user_from_env(true, env(&[])), None);
    }

    #[test]
    fn a_user_is_found_by_uid_in_a_passwd_file() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n# comment\nbad line\nalice:x:1000:1000::/home/alice:/bin/sh\n";
        assert_eq!(user_of_uid(passwd, 1000).as_deref(), Some("alice"));
        assert_eq!(user_of_uid(passwd, 0).as_deref(), Some("root"));
        assert_eq!(user_of_uid(passwd, 7), None);
    }

    #[test]
    fn responses_are_read_by_their_length() {
        let raw = b"HTTP/1.1 404 Not Found\r\ncontent-length: 5\r\ncontent-type: text/plain\r\n\r\nhello, and more";
        assert_eq!(parse_response(raw).unwrap(), (404, "hello".to_string()));
        let raw = b"HTTP/1.1 200 OK\r\n\r\n[]\n";
        assert_eq!(parse_response(raw).unwrap(), (200, "[]\n".to_string()));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nshort").is_err());
        assert!(parse_response(b"garbage").is_err());
    }
}
