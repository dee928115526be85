//! The terminal loop: keys, a refresh every second and when the source says alerts changed
//! (at most every [`SOON`]), until `q`.

use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

use crate::Source;
use crate::app::{App, Key};

/// How often the data is read again.
const REFRESH: Duration = Duration::from_secs(1);

/// How soon after the last read a change the source reports is read (an alert storm reads
/// at most this often).
const SOON: Duration = Duration::from_millis(250);

/// Runs the dashboard on the terminal until the user quits; the terminal is restored
/// whatever happens (ratatui's `init`/`restore`, which also restore it on a panic).
pub fn run(mut src: Box<dyn Source>, user: String) -> std::io::Result<()> {
    use std::io::IsTerminal as _;
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(std::io::Error::other(
            "the dashboard draws on a terminal, and this one has none (standard input or output is not a terminal); in scripts, `cepheus alerts` lists the same alerts",
        ));
    }
    let mut app = App::new(src.name(), user);
    app.refresh(src.as_mut(), Instant::now());
    let mut terminal = ratatui::try_init()?;
    let result = (|| -> std::io::Result<()> {
        let mut next = Instant::now() + REFRESH;
        let mut last = Instant::now();
        while !app.quit {
            terminal.draw(|f| crate::ui::draw(f, &app))?;
            // Short waits, so that a change the source reports is shown soon.
            let wait = next
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            if event::poll(wait)?
                && let Event::Key(k) = event::read()?
                && k.kind == KeyEventKind::Press
            {
                let key = if app.typing {
                    match k.code {
                        KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                            Some(Key::Quit)
                        }
                        KeyCode::Char(c) => Some(Key::Char(c)),
                        KeyCode::Backspace => Some(Key::Backspace),
                        KeyCode::Enter => Some(Key::Details),
                        KeyCode::Esc => Some(Key::Back),
                        _ => None,
                    }
                } else {
                    match k.code {
                        KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                            Some(Key::Quit)
                        }
                        KeyCode::Char('q') => Some(Key::Quit),
                        KeyCode::Esc => Some(Key::Back),
                        KeyCode::Enter => Some(Key::Details),
                        KeyCode::Up | KeyCode::Char('k') => Some(Key::Up),
                        KeyCode::Down | KeyCode::Char('j') => Some(Key::Down),
                        KeyCode::PageUp => Some(Key::PageUp),
                        KeyCode::PageDown => Some(Key::PageDown),
                        KeyCode::Home | KeyCode::Char('g') => Some(Key::Top),
                        KeyCode::End | KeyCode::Char('G') => Some(Key::Bottom),
                        KeyCode::Tab => Some(Key::Switch),
                        KeyCode::Char('f') => Some(Key::Firing),
                        KeyCode::Char('r') => Some(Key::Recent),
                        KeyCode::Char('a') => Some(Key::Ack),
                        KeyCode::Char('s') => Some(Key::Silence),
                        KeyCode::Char('?') => Some(Key::Help),
                        KeyCode::Char('/') => Some(Key::Filter),
                        _ => None,
                    }
                };
                if let Some(key) = key {
                    app.key(key, src.as_mut());
                }
            }
            let now = Instant::now();
            if now >= next || (now >= last + SOON && src.changed()) {
                app.refresh(src.as_mut(), now);
                last = now;
                next = Instant::now() + REFRESH;
            }
        }
        Ok(())
    })();
    ratatui::restore();
    result
}
