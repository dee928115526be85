//! The client side of the agent's API, for the commands that act on a running agent
//! (`cepheus groups forget`, `cepheus alerts`): its address and token come from the same
//! configuration file `cepheus run` reads.

use std::path::PathBuf;
use std::time::Duration;

use crate::run::config::Config;

/// A running agent's API, as a configuration names it.
pub struct Client {
    base: String,
    listen: String,
    token: Option<String>,
    /// Whether a configuration file was given (for the hint on a refused token).
    configured: bool,
}

/// What a request can come to.
pub enum Answer {
    /// 2xx.
    Ok(ureq::Response),
    /// The agent answered with this status (after the token check), and this response.
    Status(u16, ureq::Response),
}

impl Client {
    /// The API of the agent configured by `config` (built-in defaults without one).
    pub fn new(config: Option<&PathBuf>) -> anyhow::Result<Client> {
        let cfg = match config {
            Some(p) => Config::load(p).map_err(|e| anyhow::anyhow!("{e}"))?,
            None => Config::default(),
        };
        Ok(Client {
            base: format!("http://{}", cfg.api.listen),
            listen: cfg.api.listen.to_string(),
            token: cfg.api.token()?,
            configured: config.is_some(),
        })
    }

    fn prepare(&self, req: ureq::Request) -> ureq::Request {
        let req = req.timeout(Duration::from_secs(10));
        match &self.token {
            Some(t) => req.set("Authorization", &format!("Bearer {t}")),
            None => req,
        }
    }

    /// `GET path` (with its query).
    pub fn get(&self, path: &str) -> anyhow::Result<Answer> {
        let req = self.prepare(ureq::get(&format!("{}{path}", self.base)));
        self.answer(req.call())
    }

    /// `POST path` with a JSON body.
    pub fn post_json(&self, path: &str, body: serde_json::Value) -> anyhow::Result<Answer> {
        let req = self.prepare(ureq::post(&format!("{}{path}", self.base)));
        self.answer(req.send_json(body))
    }

    /// Statuses the command handles come back as [`Answer::Status`] (404); a refused token,
    /// other statuses and an unreachable agent are errors that say what to do.
    fn answer(&self, r: Result<ureq::Response, ureq::Error>) -> anyhow::Result<Answer> {
        match r {
            Ok(resp) => Ok(Answer::Ok(resp)),
            Err(ureq::Error::Status(404, resp)) => Ok(Answer::Status(404, resp)),
            Err(ureq::Error::Status(code, resp)) => {
                let text = resp.into_string().unwrap_or_default();
                let hint = match (code, self.configured) {
                    (401, false) => {
                        " (pass --config with the agent's configuration: its api.token_file is read)"
                    }
                    (401, true) => {
                        " (the token in this configuration's api.token_file is not the agent's)"
                    }
                    _ => "",
                };
                anyhow::bail!(
                    "the agent at {} answered {code}: {}{hint}",
                    self.listen,
                    text.trim()
                )
            }
            Err(e) => Err(anyhow::anyhow!(
                "cannot reach the agent's API at {} (is `cepheus run` running with this configuration?): {e}",
                self.listen
            )),
        }
    }
}
