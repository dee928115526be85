//! The dashboard's state and what changes it: refreshes from the [`Source`], keys.

use std::time::Instant;

use crate::Source;

/// Which list the dashboard shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// The alerts firing now.
    Firing,
    /// The latest alert changes, newest first.
    Recent,
}

/// How many changes the Recent view asks for.
pub const RECENT: usize = 200;

/// Longest the firing list is kept without being read again while nothing else changed (an
/// acknowledgement by someone else changes no count).
const FULL_EVERY: std::time::Duration = std::time::Duration::from_secs(3);

/// A firing list this long is read again at most every [`FULL_EVERY`], however often it
/// changes (a million firing take the agent seconds to rank and list; the latest changes
/// still show every second).
const BIG_LISTING: u64 = 5_000;

/// What the agent's counters said, reduced to what the header shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Seconds the agent has run.
    pub uptime_secs: u64,
    /// Syslog messages and flow events parsed so far.
    pub events: u64,
    /// Events per second since the previous refresh.
    pub rate: Option<f64>,
    /// Rules running.
    pub rules: usize,
    /// Groups held, over all shards.
    pub groups: u64,
    /// Alert changes made since the agent started.
    pub alerts: u64,
    /// Alerts firing now, as the store counts them (`None`: the agent keeps no store). The
    /// listing holds the newest 20,000 at most: this says how many there are in all.
    pub firing: Option<u64>,
    /// The rules on disk were refused at the last reload.
    pub reload_refused: bool,
}

impl Summary {
    /// Reads the `/stats` document (missing fields read as zero).
    pub fn from_stats(v: &serde_json::Value) -> Summary {
        let u = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
        Summary {
            uptime_secs: u(&v["uptime_secs"]),
            events: u(&v["ingest"]["parsed"]),
            rate: None,
            rules: v["rules"].as_array().map_or(0, Vec::len),
            groups: v["shards"]
                .as_array()
                .map_or(0, |s| s.iter().map(|x| u(&x["groups"])).sum()),
            // (Changes a restarted engine made again, which the store had, are no new ones.)
            alerts: u(&v["sink"]["alerts"]).saturating_sub(u(&v["sink"]["alerts_repeated"])),
            firing: v["store"]["firing"].as_u64(),
            reload_refused: !v["reload_error"].is_null(),
        }
    }
}

/// The dashboard's state.
#[derive(Debug)]
pub struct App {
    /// Where the agent is.
    pub name: String,
    /// The list shown.
    pub view: View,
    /// The alerts firing now.
    pub firing: Vec<serde_json::Value>,
    /// The latest changes, newest first.
    pub recent: Vec<serde_json::Value>,
    /// The selected row of the list shown.
    pub selected: usize,
    /// The agent's counters.
    pub summary: Summary,
    /// The last refresh's failure, or what the last action did.
    pub status: Option<String>,
    /// `status` says what an acknowledgement did: it stays until the next key, whatever the
    /// refreshes meanwhile (the header says when the agent does not answer).
    ack_said: bool,
    /// Whether the help is shown.
    pub help: bool,
    /// Whether the selected alert's details (its fields and events) are shown.
    pub details: bool,
    /// Lines of the details scrolled past (↑↓ scroll them while they are open).
    pub detail_scroll: u16,
    /// The most lines the details can be scrolled past, as last drawn (their wrapped length
    /// less the box's height).
    pub detail_room: std::cell::Cell<u16>,
    /// The list's rows on screen, as last drawn (what Page Up and Page Down move by).
    pub list_room: std::cell::Cell<u16>,
    /// The details' lines on screen, as last drawn (what Page Up and Page Down scroll by).
    pub detail_page: std::cell::Cell<u16>,
    /// Only the alerts whose rule, severity, group or message holds this text (any case) are
    /// listed.
    pub filter: String,
    /// The filter is being typed (keys go to it).
    pub typing: bool,
    /// The loop should end.
    pub quit: bool,
    /// Who acknowledges (the user running the dashboard).
    pub user: String,
    /// Seconds since the agent last answered, while it does not (what is shown is as it was
    /// then).
    pub unreachable_secs: Option<u64>,
    /// When the counters were last read, and the events then (for the rate).
    last: Option<(Instant, u64)>,
    /// The alert that was selected when a refresh found it gone from the list (resolved, or
    /// pushed out of the latest changes): until a key moves the selection, `a` refuses, so it
    /// never acknowledges the alert that took its row.
    gone: Option<String>,
    /// The newest change of the last full read (its id, state and time), the count of
    /// firing alerts then, and when: while both stand, the firing list is not read again
    /// (20,000 of them, a second, cost a tenth of a core), except every [`FULL_EVERY`]
    /// (an acknowledgement by someone else changes no count).
    full: Option<(String, Option<u64>, Instant)>,
    /// When the agent stopped answering.
    down_since: Option<Instant>,
}

/// A key, as the dashboard understands keys (the terminal loop maps crossterm's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// `q`.
    Quit,
    /// Up, `k`.
    Up,
    /// Down, `j`.
    Down,
    /// Page Up: a screenful up.
    PageUp,
    /// Page Down: a screenful down.
    PageDown,
    /// Home, `g`.
    Top,
    /// End, `G`.
    Bottom,
    /// Tab: the other list.
    Switch,
    /// `f`: the firing alerts.
    Firing,
    /// `r`: the latest changes.
    Recent,
    /// `a`: acknowledge the selected firing alert.
    Ack,
    /// Silence the selected alert's rule and group for [`crate::SILENCE_FOR`].
    Silence,
    /// `?`: help on or off.
    Help,
    /// Enter: the selected alert's details on or off.
    Details,
    /// Esc: closes what is open over the list (help, details), else clears the filter, else
    /// quits.
    Back,
    /// `/`: type a filter.
    Filter,
    /// A character typed into the filter.
    Char(char),
    /// Backspace in the filter.
    Backspace,
}

impl App {
    /// An empty dashboard of the agent `name`, acknowledging as `user`.
    pub fn new(name: String, user: String) -> App {
        App {
            name,
            view: View::Firing,
            firing: Vec::new(),
            recent: Vec::new(),
            selected: 0,
            summary: Summary::default(),
            status: None,
            ack_said: false,
            help: false,
            details: false,
            detail_scroll: 0,
            detail_room: std::cell::Cell::new(0),
            list_room: std::cell::Cell::new(0),
            detail_page: std::cell::Cell::new(0),
            filter: String::new(),
            typing: false,
            quit: false,
            user,
            unreachable_secs: None,
            last: None,
            full: None,
            gone: None,
            down_since: None,
        }
    }

    /// The whole list of the view shown, before the filter.
    pub fn all_rows(&self) -> &[serde_json::Value] {
        match self.view {
            View::Firing => &self.firing,
            View::Recent => &self.recent,
        }
    }

    /// Alerts firing now: the store's count, or the listing's length without a store.
    pub fn firing_total(&self) -> usize {
        self.summary
            .firing
            .map_or(self.firing.len(), |n| (n as usize).max(self.firing.len()))
    }

    /// The list shown: the view's, through the filter.
    pub fn rows(&self) -> Vec<&serde_json::Value> {
        let needle = self.filter.trim().to_lowercase();
        self.all_rows()
            .iter()
            .filter(|a| needle.is_empty() || matches_filter(a, &needle))
            .collect()
    }

    /// Reads everything again from `src` (at `now`, for the event rate); a failure is kept
    /// in `status` and the last data stays shown.
    pub fn refresh(&mut self, src: &mut dyn Source, now: Instant) {
        // The selection follows its alert, wherever the new lists put it (a resolved alert
        // above it, a new critical one on top): `a` must never acknowledge another one. In
        // the latest changes it follows its change (an alert's `firing` and `resolved` are
        // rows of their own: followed by id alone, it jumped to the newer one).
        let view = self.view;
        let ident = move |a: &serde_json::Value| -> String {
            match view {
                View::Firing => a["id"].as_str().unwrap_or_default().to_string(),
                View::Recent => format!("{}/{}/{}", a["id"], a["state"], a["time"]),
            }
        };
        let kept = self.selected_alert().and_then(|a| {
            let id = a["id"].as_str()?.to_string();
            Some((id, ident(a)))
        });
        let read = (|| -> Result<(), String> {
            let stats = src.stats()?;
            let mut summary = Summary::from_stats(&stats);
            if let Some((t, events)) = self.last {
                let secs = now.saturating_duration_since(t).as_secs_f64();
                if secs > 0.0 {
                    summary.rate = Some(summary.events.saturating_sub(events) as f64 / secs);
                }
            }
            self.last = Some((now, summary.events));
            let firing_count = summary.firing;
            self.summary = summary;
            let mut recent = src.recent(RECENT)?;
            // The newest change, as it identifies the store's last write.
            let newest = recent
                .last()
                .map(|a| format!("{}/{}/{}", a["id"], a["state"], a["time"]))
                .unwrap_or_default();
            recent.reverse();
            recent.iter_mut().for_each(crate::ui::printable);
            self.recent = recent;
            let same = self.full.as_ref().is_some_and(|(n, f, at)| {
                let fresh = now.saturating_duration_since(*at) < FULL_EVERY;
                let big = firing_count.is_some_and(|c| c >= BIG_LISTING);
                fresh && (big || (*n == newest && *f == firing_count))
            });
            if same {
                return Ok(());
            }
            // (Shown on a terminal: what remote senders chose is made printable.)
            self.firing = src.firing()?;
            self.firing.iter_mut().for_each(crate::ui::printable);
            // The most severe first, and the newest first among them: what needs a look
            // now is on the first screen, however many older alerts fire.
            self.firing.sort_by(|a, b| {
                severity_rank(a)
                    .cmp(&severity_rank(b))
                    .then_with(|| b["time"].as_str().cmp(&a["time"].as_str()))
            });
            self.full = Some((newest, firing_count, now));
            Ok(())
        })();
        match read {
            Ok(()) => {
                self.down_since = None;
                self.unreachable_secs = None;
                if !self.ack_said
                    && self
                        .status
                        .as_deref()
                        .is_some_and(|s| s.starts_with("cannot"))
                {
                    self.status = None;
                }
            }
            Err(e) => {
                let since = *self.down_since.get_or_insert(now);
                self.unreachable_secs = Some(now.saturating_duration_since(since).as_secs());
                if !self.ack_said {
                    self.status = Some(format!("cannot read the agent: {e}"));
                }
            }
        }
        if let Some((id, which)) = kept {
            match self.rows().iter().position(|a| ident(a) == which) {
                Some(i) => self.selected = i,
                None => {
                    // Its details close (they would show another alert), and it is said.
                    self.details = false;
                    self.detail_scroll = 0;
                    self.status = Some(match self.view {
                        View::Firing => format!(
                            "alert {id} is not firing any more (resolved): move to select another"
                        ),
                        View::Recent => {
                            format!("alert {id} left the latest changes: move to select another")
                        }
                    });
                    self.gone = Some(id);
                }
            }
        }
        self.selected = self.selected.min(self.rows().len().saturating_sub(1));
    }

    /// Applies a key; `src` takes an acknowledgement.
    pub fn key(&mut self, key: Key, src: &mut dyn Source) {
        self.ack_said = false;
        if self.typing {
            match key {
                Key::Char(c) => self.filter.push(c),
                Key::Backspace => {
                    self.filter.pop();
                }
                // Enter keeps the filter; Esc drops it.
                Key::Details => self.typing = false,
                Key::Back => {
                    self.typing = false;
                    self.filter.clear();
                }
                _ => {}
            }
            self.selected = self.selected.min(self.rows().len().saturating_sub(1));
            return;
        }
        // What the last action said is read by now: the key hints come back (a failure to
        // read the agent stays, until a refresh succeeds).
        if !self
            .status
            .as_deref()
            .is_some_and(|s| s.starts_with("cannot read"))
        {
            self.status = None;
        }
        // A key that chooses what is selected ends the wait after a vanished alert.
        if matches!(
            key,
            Key::Up
                | Key::Down
                | Key::PageUp
                | Key::PageDown
                | Key::Top
                | Key::Bottom
                | Key::Switch
                | Key::Firing
                | Key::Recent
                | Key::Filter
                | Key::Details
        ) {
            self.gone = None;
        }
        let last = self.rows().len().saturating_sub(1);
        if self.details {
            // The details are open over the list: the movement keys scroll them.
            let room = self.detail_room.get();
            let scroll = match key {
                Key::Up => Some(self.detail_scroll.saturating_sub(1)),
                Key::Down => Some(self.detail_scroll.saturating_add(1).min(room)),
                Key::PageUp => Some(self.detail_scroll.saturating_sub(page(&self.detail_page))),
                Key::PageDown => Some(
                    self.detail_scroll
                        .saturating_add(page(&self.detail_page))
                        .min(room),
                ),
                Key::Top => Some(0),
                Key::Bottom => Some(room),
                _ => None,
            };
            if let Some(s) = scroll {
                self.detail_scroll = s;
                return;
            }
        }
        match key {
            Key::Quit => self.quit = true,
            Key::Up => self.selected = self.selected.saturating_sub(1),
            Key::Down => self.selected = (self.selected + 1).min(last),
            Key::PageUp => {
                self.selected = self.selected.saturating_sub(page(&self.list_room) as usize)
            }
            Key::PageDown => {
                self.selected = (self.selected + page(&self.list_room) as usize).min(last)
            }
            Key::Top => self.selected = 0,
            Key::Bottom => self.selected = last,
            Key::Switch => self.show(match self.view {
                View::Firing => View::Recent,
                View::Recent => View::Firing,
            }),
            Key::Firing => self.show(View::Firing),
            Key::Recent => self.show(View::Recent),
            Key::Help => self.help = !self.help,
            Key::Details => {
                self.details = !self.details && !self.rows().is_empty();
                self.detail_scroll = 0;
            }
            Key::Back if self.help || self.details => {
                self.help = false;
                self.details = false;
            }
            Key::Back if !self.filter.is_empty() => {
                self.filter.clear();
                self.selected = 0;
            }
            Key::Back => self.quit = true,
            Key::Filter => {
                self.typing = true;
                self.details = false;
                self.selected = 0;
            }
            Key::Char(_) | Key::Backspace => {}
            Key::Ack => self.ack(src),
            Key::Silence => self.silence(src),
        }
    }

    fn show(&mut self, view: View) {
        if self.view != view {
            self.view = view;
            self.selected = 0;
        }
    }

    /// The selected alert, if the list shown has one.
    pub fn selected_alert(&self) -> Option<&serde_json::Value> {
        self.rows().get(self.selected).copied()
    }

    fn silence(&mut self, src: &mut dyn Source) {
        self.ack_said = true;
        let Some(a) = self.selected_alert() else {
            self.status = Some("no alert is selected".into());
            return;
        };
        let rule = a["rule"].as_str().unwrap_or_default().to_string();
        let group = a["group"].clone();
        let shown = crate::ui::group(a);
        self.status = Some(match src.silence(&rule, &group, &self.user) {
            Ok(id) => format!(
                "silenced {rule} {shown} for {} (silence {id}: its new alerts go to no webhook or syslog; `cepheus silence expire {id}` ends it)",
                crate::SILENCE_FOR
            ),
            Err(e) => format!("cannot silence {rule} {shown}: {e}"),
        });
    }

    fn ack(&mut self, src: &mut dyn Source) {
        // (Whatever it says, it says it until the next key.)
        self.ack_said = true;
        // In either list: the row under the cursor is not the alert that was chosen (found by
        // a review: in the latest changes, `a` took the row that slid under it).
        if let Some(id) = &self.gone {
            self.status = Some(format!(
                "alert {id} is not firing any more: move to the alert to acknowledge first"
            ));
            return;
        }
        let Some(a) = self.selected_alert() else {
            self.status = Some("no alert is selected".into());
            return;
        };
        let id = a["id"].as_str().unwrap_or_default().to_string();
        // Another list (the latest changes): its firing row is acknowledged as the alert
        // (found by an audit: it said a firing alert was not firing); a resolve or a
        // retraction is no alert to acknowledge. The firing list's own record says whether
        // it is acknowledged already.
        let firing_now = self
            .firing
            .iter()
            .find(|f| f["id"].as_str() == Some(id.as_str()));
        if self.view != View::Firing && a["state"].as_str() != Some("firing") {
            self.status = Some(format!(
                "this row is a {} change: only a firing alert can be acknowledged (f: the firing alerts)",
                a["state"].as_str().unwrap_or("past")
            ));
            return;
        }
        let a = firing_now.unwrap_or(a);
        if a["ack"].is_object() {
            self.status = Some(format!("{id} is acknowledged already"));
            return;
        }
        self.status = Some(match src.ack(&id, &self.user) {
            Ok(before) => {
                // Shown at once; the next refresh brings the agent's own record.
                if let Some(o) = self
                    .firing
                    .iter_mut()
                    .find(|a| a["id"].as_str() == Some(id.as_str()))
                    .and_then(|a| a.as_object_mut())
                {
                    o.insert(
                        "ack".into(),
                        serde_json::json!({ "by": self.user, "time": "now" }),
                    );
                }
                match before {
                    // Someone acknowledged it meanwhile (the list had not shown it yet).
                    Some(b) => format!("acknowledged {id} (it was acknowledged by {b})"),
                    None => format!("acknowledged {id}"),
                }
            }
            Err(e) => format!("cannot acknowledge {id}: {e}"),
        });
    }
}

/// What Page Up or Page Down moves by, given the rows on screen: a screenful less one, which
/// stays in view for context (at least one).
fn page(rows: &std::cell::Cell<u16>) -> u16 {
    rows.get().saturating_sub(1).max(1)
}

/// Whether alert `a`'s rule, severity (as the list shows it), group (`k=v`), message, reason,
/// state, time (as the list shows it: `10:03` finds the changes of that minute) or
/// acknowledger holds `needle` (lower case): the filter finds what the screen shows.
fn matches_filter(a: &serde_json::Value, needle: &str) -> bool {
    let has = |t: &str| t.to_lowercase().contains(needle);
    ["rule", "severity", "message", "reason", "state"]
        .iter()
        .any(|k| a[*k].as_str().is_some_and(has))
        || a["time"]
            .as_str()
            .is_some_and(|t| has(&t.replace('T', " ")))
        || a["ack"]["by"].as_str().is_some_and(has)
        || has(&crate::ui::group(a))
}

/// An alert's severity as a sort key, the most severe first (unknown ones last).
fn severity_rank(a: &serde_json::Value) -> u8 {
    match a["severity"].as_str() {
        Some("critical") => 0,
        Some("high") => 1,
        Some("medium") => 2,
        Some("low") => 3,
        Some("info") => 4,
        _ => 5,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A source with fixed answers, recording acknowledgements.
    #[derive(Default)]
    pub struct Fixed {
        pub firing: Vec<serde_json::Value>,
        pub recent: Vec<serde_json::Value>,
        pub stats: serde_json::Value,
        pub acked: Vec<(String, String)>,
        pub silenced: Vec<(String, serde_json::Value, String)>,
        pub fail: bool,
        pub firing_reads: usize,
        pub ack_fail: bool,
    }

    impl Source for Fixed {
        fn firing(&mut self) -> Result<Vec<serde_json::Value>, String> {
            self.firing_reads += 1;
            Ok(self.firing.clone())
        }
        fn recent(&mut self, n: usize) -> Result<Vec<serde_json::Value>, String> {
            Ok(self.recent.iter().rev().take(n).rev().cloned().collect())
        }
        fn stats(&mut self) -> Result<serde_json::Value, String> {
            if self.fail {
                return Err("connection refused".into());
            }
            Ok(self.stats.clone())
        }
        fn ack(&mut self, id: &str, by: &str) -> Result<Option<String>, String> {
            if self.ack_fail {
                return Err("connection refused".into());
            }
            self.acked.push((id.into(), by.into()));
            Ok(None)
        }
        fn silence(
            &mut self,
            rule: &str,
            group: &serde_json::Value,
            by: &str,
        ) -> Result<String, String> {
            if self.ack_fail {
                return Err("connection refused".into());
            }
            self.silenced.push((rule.into(), group.clone(), by.into()));
            Ok("0000000000000007".into())
        }
        fn name(&self) -> String {
            "test".into()
        }
    }

    fn alert(id: &str, state: &str) -> serde_json::Value {
        serde_json::json!({"id": id, "state": state, "rule": "hb", "severity": "critical",
            "group": {"host": id}, "time": "2026-12-03T05:00:00Z", "message": "m"})
    }

    /// `s` silences the selected alert's rule and group, and says so with the silence's id.
    #[test]
    fn s_silences_the_selected_alerts_rule_and_group() {
        let mut src = Fixed {
            firing: vec![alert("a", "firing"), alert("b", "firing")],
            stats: serde_json::json!({"store": {"firing": 2}}),
            ..Fixed::default()
        };
        let mut app = App::new("test".into(), "alice".into());
        app.refresh(&mut src, std::time::Instant::now());
        app.key(Key::Down, &mut src);
        app.key(Key::Silence, &mut src);
        assert_eq!(
            src.silenced,
            [(
                "hb".to_string(),
                serde_json::json!({"host": "b"}),
                "alice".to_string()
            )]
        );
        let said = app.status.clone().unwrap_or_default();
        assert!(
            said.starts_with("silenced hb host=b for 1h (silence 0000000000000007"),
            "{said}"
        );
        src.ack_fail = true;
        app.key(Key::Silence, &mut src);
        let said = app.status.clone().unwrap_or_default();
        assert!(
            said.contains("cannot silence hb host=b: connection refused"),
            "{said}"
        );
    }

    /// The firing list (up to 20,000 alerts) is read again only when the store recorded a
    /// change or the count of firing alerts moved, and at least every FULL_EVERY (another
    /// operator's acknowledgement changes neither).
    #[test]
    fn the_firing_list_is_read_again_only_when_something_changed() {
        let mut src = Fixed {
            firing: vec![alert("a", "firing")],
            recent: vec![alert("a", "firing")],
            stats: serde_json::json!({"store": {"firing": 1}}),
            ..Fixed::default()
        };
        let mut app = App::new("test".into(), "alice".into());
        let t0 = Instant::now();
        let secs = std::time::Duration::from_secs;
        app.refresh(&mut src, t0);
        app.refresh(&mut src, t0 + secs(1));
        app.refresh(&mut src, t0 + secs(2));
        assert_eq!(src.firing_reads, 1);
        src.firing.push(alert("b", "firing"));
        src.recent.push(alert("b", "firing"));
        src.stats = serde_json::json!({"store": {"firing": 2}});
        app.refresh(&mut src, t0 + secs(3));
        assert_eq!(src.firing_reads, 2);
        assert_eq!(app.firing.len(), 2);
        app.refresh(&mut src, t0 + secs(4));
        assert_eq!(src.firing_reads, 2);
        app.refresh(&mut src, t0 + secs(3) + FULL_EVERY);
        assert_eq!(src.firing_reads, 3);
    }

    /// In the latest changes an alert's `firing` and `resolved` are two rows: the selection
    /// stays on the change chosen (it jumped to the newest row of that alert at the next
    /// refresh, so older rows could not be reached, and Enter opened another change).
    #[test]
    fn the_selection_in_the_latest_changes_stays_on_its_change() {
        let at = |id: &str, state: &str, t: &str| {
            let mut a = alert(id, state);
            a["time"] = t.into();
            a
        };
        let mut src = Fixed {
            recent: vec![
                at("a", "firing", "2026-12-03T05:00:00Z"),
                at("b", "firing", "2026-12-03T05:00:01Z"),
                at("a", "resolved", "2026-12-03T05:00:02Z"),
            ],
            ..Fixed::default()
        };
        let mut app = App::new("test".into(), "alice".into());
        let t0 = Instant::now();
        app.refresh(&mut src, t0);
        app.key(Key::Switch, &mut src);
        // Newest first: a resolved, b firing, a firing. The oldest, a's firing:
        app.key(Key::Bottom, &mut src);
        assert_eq!(app.selected, 2);
        app.refresh(&mut src, t0 + std::time::Duration::from_secs(1));
        assert_eq!(app.selected, 2);
        let sel = app.selected_alert().unwrap();
        assert_eq!(
            (sel["id"].as_str(), sel["state"].as_str()),
            (Some("a"), Some("firing"))
        );
        // A newer change on top moves the row down: the selection follows it.
        src.recent.push(at("c", "firing", "2026-12-03T05:00:03Z"));
        app.refresh(&mut src, t0 + std::time::Duration::from_secs(2));
        assert_eq!(app.selected, 3);
        assert_eq!(app.selected_alert().unwrap()["state"], "firing");
    }

    /// In the latest changes too, a selected row that left the list is not swapped for the
    /// one that slid under the cursor: `a` refuses until a key moves the selection.
    #[test]
    fn a_row_gone_from_the_latest_changes_is_never_acknowledged_for_another() {
        let rows = |n: usize| -> Vec<serde_json::Value> {
            (0..n).map(|i| alert(&format!("r{i}"), "firing")).collect()
        };
        let mut src = Fixed {
            firing: rows(RECENT + 1),
            recent: rows(RECENT),
            ..Fixed::default()
        };
        let mut app = App::new("test".into(), "alice".into());
        let t0 = Instant::now();
        app.refresh(&mut src, t0);
        app.key(Key::Switch, &mut src);
        app.key(Key::Bottom, &mut src);
        assert_eq!(app.selected_alert().unwrap()["id"], "r0");
        src.recent.push(alert(&format!("r{RECENT}"), "firing"));
        app.refresh(&mut src, t0 + std::time::Duration::from_secs(1));
        app.key(Key::Ack, &mut src);
        assert!(src.acked.is_empty(), "{:?}", src.acked);
        assert!(
            app.status
                .as_deref()
                .is_some_and(|s| s.contains("move to the alert")),
            "{:?}",
            app.status
        );
    }

    /// The filter finds what the rows show: a reason (`outage`), a state (`resolved`), a
    /// minute (`05:00`), who acknowledged (found by an operator's audit: all gave nothing).
    #[test]
    fn the_filter_reads_reason_state_time_and_acknowledger() {
        let mut a = alert("a", "firing");
        a["reason"] = "outage".into();
        a["ack"] = serde_json::json!({"by": "oncall-ann", "at": "2026-12-03T05:01:00Z"});
        let b = alert("b", "resolved");
        for (needle, want) in [
            ("outage", true),
            ("resolved", false),
            ("firing", true),
            ("05:00", true),
            ("2026-12-03 05:00", true),
            ("oncall-ann", true),
            ("06:00", false),
        ] {
            assert_eq!(matches_filter(&a, needle), want, "{needle}");
        }
        assert!(matches_filter(&b, "resolved"));
        assert!(!matches_filter(&b, "outage"));
    }

    /// The filter reads the severity the list shows: `/low` keeps the low alerts only.
    #[test]
    fn the_filter_matches_the_severity() {
        let mut low = alert("b", "firing");
        low["severity"] = "low".into();
        let mut src = Fixed {
            firing: vec![alert("a", "firing"), low],
            ..Fixed::default()
        };
        let mut app = App::new("test".into(), "alice".into());
        app.refresh(&mut src, Instant::now());
        app.key(Key::Filter, &mut src);
        for c in "low".chars() {
            app.key(Key::Char(c), &mut src);
        }
        let ids: Vec<&str> = app.rows().iter().filter_map(|a| a["id"].as_str()).collect();
        assert_eq!(ids, ["b"]);
    }

    /// What an acknowledgement did stays on the status line until the next key, though the
    /// refreshes meanwhile fail (the agent stopped: the header says so), then goes.
    #[test]
    fn a_failed_acknowledgement_stays_said_until_the_next_key() {
        let mut src = Fixed {
            firing: vec![alert("a", "firing")],
            ..Fixed::default()
        };
        let mut app = App::new("test".into(), "alice".into());
        let t0 = Instant::now();
        app.refresh(&mut src, t0);
        (src.fail, src.ack_fail) = (true, true);
        app.key(Key::Ack, &mut src);
        let said = "cannot acknowledge a: connection refused";
        assert_eq!(app.status.as_deref(), Some(said));
        app.refresh(&mut src, t0 + std::time::Duration::from_secs(1));
        app.refresh(&mut src, t0 + std::time::Duration::from_secs(2));
        assert_eq!(app.status.as_deref(), Some(said));
        // The agent back (it refused the acknowledgement, say): still said.
        src.fail = false;
        app.refresh(&mut src, t0 + std::time::Duration::from_secs(3));
        assert_eq!(app.status.as_deref(), Some(said));
        src.fail = true;
        app.key(Key::Down, &mut src);
        app.refresh(&mut src, t0 + std::time::Duration::from_secs(3));
        assert_eq!(
            app.status.as_deref(),
            Some("cannot read the agent: connection refused")
        );
    }

    /// Page Down and Page Up move the selection by a screenful less one (the list's rows as
    /// last drawn), and stop at the ends.
    #[test]
    fn page_keys_move_by_a_screenful() {
        let mut src = Fixed {
            firing: (0..30).map(|i| alert(&format!("a{i}"), "firing")).collect(),
            ..Fixed::default()
        };
        let mut app = App::new("test".into(), "alice".into());
        app.refresh(&mut src, Instant::now());
        app.list_room.set(10);
        app.key(Key::PageDown, &mut src);
        assert_eq!(app.selected, 9);
        app.key(Key::PageDown, &mut src);
        app.key(Key::PageDown, &mut src);
        app.key(Key::PageDown, &mut src);
        assert_eq!(app.selected, 29);
        app.key(Key::PageUp, &mut src);
        assert_eq!(app.selected, 20);
        app.list_room.set(0);
        app.key(Key::PageUp, &mut src);
        assert_eq!(app.selected, 19);
    }

    /// The firing list shows the most severe first, the newest first among them, and the
    /// selection follows its alert when the list changes under it (a new critical alert on
    /// top, an older one resolved): an acknowledgement goes to the alert the operator chose.
    #[test]
    fn the_most_severe_and_newest_come_first_and_the_selection_follows_its_alert() {
        let at = |id: &str, sev: &str, time: &str| {
            let mut a = alert(id, "firing");
            a["severity"] = sev.into();
            a["time"] = time.into();
            a
        };
        let mut src = Fixed {
            firing: vec![
                at("old-low", "low", "2026-12-03T01:00:00Z"),
                at("old-high", "high", "2026-12-03T01:00:00Z"),
                at("new-high", "high", "2026-12-03T02:00:00Z"),
                at("info", "info", "2026-12-03T03:00:00Z"),
            ],
            ..Fixed::default()
        };
        let mut app = App::new("test".into(), "alice".into());
        app.refresh(&mut src, Instant::now());
        let ids = |app: &App| -> Vec<String> {
            app.rows()
                .iter()
                .map(|a| a["id"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(ids(&app), ["new-high", "old-high", "old-low", "info"]);
        app.key(Key::Down, &mut src);
        app.key(Key::Down, &mut src);
        assert_eq!(app.selected_alert().unwrap()["id"], "old-low");
        // A critical alert comes on top and a high one resolves: still old-low.
        // (Changes the store records: the resolve and the new alert.)
        src.firing.retain(|a| a["id"] != "new-high");
        src.recent.push(alert("new-high", "resolved"));
        src.firing
            .push(at("crit", "critical", "2026-12-03T04:00:00Z"));
        src.recent
            .push(at("crit", "critical", "2026-12-03T04:00:00Z"));
        app.refresh(&mut src, Instant::now());
        assert_eq!(ids(&app), ["crit", "old-high", "old-low", "info"]);
        assert_eq!(app.selected_alert().unwrap()["id"], "old-low");
        app.key(Key::Ack, &mut src);
        assert_eq!(src.acked, [("old-low".to_string(), "alice".to_string())]);
    }

    #[test]
    fn the_store_count_says_how_many_fire_beyond_the_listing() {
        let mut src = Fixed {
            firing: vec![alert("a", "firing"), alert("b", "firing")],
            stats: serde_json::json!({"store": {"firing": 49742}}),
            ..Fixed::default()
        };
        let mut app = App::new("test".into(), "alice".into());
        app.refresh(&mut src, Instant::now());
        assert_eq!((app.firing_total(), app.firing.len()), (49742, 2));
        // Without a store (or a count older than the listing): the listing's own length.
        src.stats = serde_json::json!({"store": {"firing": 1}});
        app.refresh(&mut src, Instant::now());
        assert_eq!(app.firing_total(), 2);
        src.stats = serde_json::json!({});
        app.refresh(&mut src, Instant::now());
        assert_eq!((app.summary.firing, app.firing_total()), (None, 2));
    }

    /// What remote senders chose (control characters, bidirectional overrides) reaches the
    /// terminal as visible escapes, in both lists.
    #[test]
    fn texts_from_senders_are_made_printable() {
        let mut bad = alert("a", "firing");
        bad["message"] = "x\u{1b}[2J\u{202e}y\nFORGED".into();
        bad["ack"] = serde_json::json!({"by": "eve\r"});
        let mut src = Fixed {
            firing: vec![bad.clone()],
            recent: vec![bad],
            ..Fixed::default()
        };
        let mut app = App::new("test".into(), "alice".into());
        app.refresh(&mut src, Instant::now());
        for a in [&app.firing[0], &app.recent[0]] {
            assert_eq!(a["message"], "x\\u{1b}[2J\\u{202e}y\\u{a}FORGED");
            assert_eq!(a["ack"]["by"], "eve\\u{d}");
            assert_eq!(a["rule"], "hb");
        }
        // Zero-width and other format characters too (found by an audit: `web\u{200b}1` was
        // shown as `web1` and upset the columns); emoji and accents stay.
        let mut v = serde_json::json!({"host": "web\u{200b}1 w\u{200d}eb1 web\u{2060}1 \u{feff}x \u{e0041}", "ok": "é 日本 🔥"});
        crate::ui::printable(&mut v);
        assert_eq!(
            v["host"],
            "web\\u{200b}1 w\\u{200d}eb1 web\\u{2060}1 \\u{feff}x \\u{e0041}"
        );
        assert_eq!(v["ok"], "é 日本 🔥");
    }

    /// Changes a restarted engine made again (the store had them) are not counted as new.
    #[test]
    fn repeated_alert_changes_are_not_counted_since_start() {
        let stats = serde_json::json!({"sink": {"alerts": 5, "alerts_repeated": 2}});
        assert_eq!(Summary::from_stats(&stats).alerts, 3);
        assert_eq!(Summary::from_stats(&serde_json::json!({})).alerts, 0);
    }

    #[test]
    fn keys_move_the_selection_switch_lists_and_acknowledge() {
        let mut src = Fixed {
            firing: vec![alert("a", "firing"), alert("b", "firing")],
            recent: vec![
                alert("a", "firing"),
                alert("c", "resolved"),
                alert("b", "firing"),
            ],
            stats: serde_json::json!({"uptime_secs": 5, "ingest": {"parsed": 100}}),
            ..Fixed::default()
        };
        let mut app = App::new("test".into(), "alice".into());
        let t0 = Instant::now();
        app.refresh(&mut src, t0);
        assert_eq!(app.summary.events, 100);
        assert_eq!(app.summary.rate, None);
        app.key(Key::Down, &mut src);
        app.key(Key::Down, &mut src);
        assert_eq!(app.selected, 1);
        app.key(Key::Ack, &mut src);
        assert_eq!(src.acked, [("b".to_string(), "alice".to_string())]);
        assert_eq!(app.firing[1]["ack"]["by"], "alice");
        assert_eq!(app.status.as_deref(), Some("acknowledged b"));
        // Said until the next key; then the key hints come back.
        app.key(Key::Up, &mut src);
        app.key(Key::Down, &mut src);
        assert_eq!(app.status, None);
        app.key(Key::Ack, &mut src);
        assert_eq!(src.acked.len(), 1, "acknowledged already");
        // The latest changes, newest first: a firing row acknowledges its alert (b is
        // already), a resolve is no alert to acknowledge.
        app.key(Key::Switch, &mut src);
        assert_eq!((app.view, app.selected), (View::Recent, 0));
        assert_eq!(app.rows()[0]["id"], "b");
        app.key(Key::Ack, &mut src);
        assert_eq!(src.acked.len(), 1);
        assert_eq!(app.status.as_deref(), Some("b is acknowledged already"));
        app.key(Key::Down, &mut src);
        app.key(Key::Ack, &mut src);
        assert_eq!(src.acked.len(), 1);
        assert!(
            app.status
                .as_deref()
                .is_some_and(|s| s.starts_with("this row is a resolved change")),
            "{:?}",
            app.status
        );
        app.key(Key::Down, &mut src);
        app.key(Key::Ack, &mut src);
        assert_eq!(src.acked[1], ("a".to_string(), "alice".to_string()));
        assert_eq!(app.firing[0]["ack"]["by"], "alice");
        app.key(Key::Up, &mut src);
        app.key(Key::Up, &mut src);
        // The rate, from the next refresh.
        src.stats = serde_json::json!({"ingest": {"parsed": 300}});
        app.refresh(&mut src, t0 + std::time::Duration::from_secs(2));
        assert_eq!(app.summary.rate, Some(100.0));
        // A failed refresh keeps the data and says why.
        src.fail = true;
        app.refresh(&mut src, t0 + std::time::Duration::from_secs(3));
        assert!(
            app.status
                .as_deref()
                .unwrap()
                .contains("connection refused")
        );
        assert_eq!(app.firing.len(), 2);
        assert_eq!(app.unreachable_secs, Some(0));
        app.refresh(&mut src, t0 + std::time::Duration::from_secs(15));
        assert_eq!(
            app.unreachable_secs,
            Some(12),
            "counted from the first refresh that failed"
        );
        // Details of the selected alert; Esc closes them before it quits.
        app.key(Key::Details, &mut src);
        assert!(app.details);
        assert_eq!(app.selected_alert().unwrap()["id"], "b");
        app.key(Key::Back, &mut src);
        assert!(!app.details && !app.quit);
        app.key(Key::Back, &mut src);
        assert!(app.quit);
        // A filter: only the alerts whose rule, severity, group or message holds it; the selection and
        // an acknowledgement follow the filtered list.
        let mut app = App::new("test".into(), "alice".into());
        src.firing = vec![
            alert("web1", "firing"),
            alert("db1", "firing"),
            alert("web2", "firing"),
        ];
        src.acked.clear();
        src.fail = false;
        app.refresh(&mut src, t0);
        assert_eq!(app.unreachable_secs, None);
        app.key(Key::Filter, &mut src);
        for c in "WEB".chars() {
            app.key(Key::Char(c), &mut src);
        }
        app.key(Key::Details, &mut src);
        assert!(!app.typing && !app.details);
        let ids: Vec<_> = app.rows().iter().map(|a| a["id"].clone()).collect();
        assert_eq!(ids, ["web1", "web2"]);
        app.key(Key::Down, &mut src);
        app.key(Key::Ack, &mut src);
        assert_eq!(src.acked, [("web2".to_string(), "alice".to_string())]);
        assert!(app.firing[2]["ack"].is_object() && !app.firing[1]["ack"].is_object());
        // Esc clears the filter before it quits.
        app.key(Key::Back, &mut src);
        assert_eq!((app.rows().len(), app.quit), (3, false));
        // Esc while typing drops what was typed.
        app.key(Key::Filter, &mut src);
        app.key(Key::Char('x'), &mut src);
        assert!(app.rows().is_empty());
        app.key(Key::Back, &mut src);
        assert_eq!((app.rows().len(), app.typing), (3, false));
        // Nothing to detail in an empty list.
        let mut empty = App::new("test".into(), "alice".into());
        empty.key(Key::Details, &mut src);
        assert!(!empty.details);
    }

    /// Found by an audit: the alert whose details were open resolved, the details went on
    /// showing the alert that took its row, and `a` acknowledged that one.
    #[test]
    fn a_selected_alert_that_resolves_is_never_swapped_for_another() {
        let mut src = Fixed {
            firing: vec![alert("alpha", "firing"), alert("beta", "firing")],
            stats: serde_json::json!({"uptime_secs": 5}),
            ..Fixed::default()
        };
        let mut app = App::new("test".into(), "alice".into());
        let t0 = Instant::now();
        app.refresh(&mut src, t0);
        app.key(Key::Bottom, &mut src);
        let chosen = app.selected_alert().unwrap()["id"].clone();
        app.key(Key::Details, &mut src);
        assert!(app.details);
        // It resolves: gone from the firing list (a change the store records).
        src.firing.retain(|a| a["id"] != chosen);
        let mut resolved = alert("x", "resolved");
        resolved["id"] = chosen.clone();
        src.recent.push(resolved);
        app.refresh(&mut src, t0);
        assert!(!app.details, "the details closed");
        let said = app.status.clone().unwrap_or_default();
        assert!(
            said.contains(chosen.as_str().unwrap()) && said.contains("not firing"),
            "{said}"
        );
        app.key(Key::Ack, &mut src);
        assert!(src.acked.is_empty(), "{:?}", src.acked);
        assert!(
            app.status
                .as_deref()
                .unwrap_or_default()
                .contains("move to the alert")
        );
        // Once a key chooses the selection, `a` acknowledges what is shown.
        app.key(Key::Top, &mut src);
        app.key(Key::Ack, &mut src);
        let other = app.selected_alert().unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        assert_ne!(Some(other.as_str()), chosen.as_str());
        assert_eq!(src.acked, [(other, "alice".to_string())]);
    }
}
