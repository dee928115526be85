//! From a rule's pattern to an execution plan the per-group state machines run.
//!
//! A pattern is expanded into alternatives of linear steps (the disjunctive normal form of
//! `or` and `and`): `and(a, b)` is `seq(a, b)` or `seq(b, a)`, `or(seq(a, b), c)` is two
//! alternatives. Each alternative is a list of steps (an event set, possibly repeated), with
//! optional absences at the start, between steps (guards) and at the end. An absence alone is
//! its own plan. Matches of different alternatives consume each other's events, so the
//! alternatives behave as one pattern.

use crate::event::FieldKey;
use crate::rules::ir::{Pattern, Rule};
use crate::time::Duration;

/// A set of event definitions of one rule, as bits (at most 64 definitions a rule).
pub type EvSet = u64;

/// The most alternatives one pattern may expand to.
pub const MAX_ALTERNATIVES: usize = 256;

/// Most steps in one alternative of a pattern: far beyond any rule written by hand, and a
/// bound on what one partial match can be asked to track.
pub const MAX_STEPS: usize = 1024;

/// How a rule is run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// `absent(x) for D` alone: per group, fire when D passes with no x; `absent(x{n,}) for
    /// D`: with fewer than n.
    Absence {
        /// The events whose absence is watched.
        set: EvSet,
        /// How long.
        for_: Duration,
        /// How many of them in D keep it from firing (1 for `absent(x)`).
        min: u32,
    },
    /// Linear alternatives.
    Linear {
        /// The alternatives (at least one).
        alts: Vec<Alt>,
    },
}

impl Plan {
    /// The `n` of `absent(x{n,}) for D` (a count's absence), 1 for any other plan: how many
    /// awaited events a group keeps the times of.
    pub fn absence_min(&self) -> u32 {
        match self {
            Plan::Absence { min, .. } => *min,
            Plan::Linear { .. } => 1,
        }
    }

    /// The event definitions whose events may open a group the rule does not hold yet: an
    /// event of another definition (the `b` of `seq(a, b)`) finds nothing to act on in a new
    /// group, so it makes none. Every definition, for an absence (a group is discovered by its
    /// events) or a leading absence (its events' times are kept per group).
    pub fn opens(&self) -> EvSet {
        match self {
            Plan::Linear { alts } if alts.iter().all(|a| a.start_absent.is_none()) => {
                alts.iter().fold(0, |m, a| m | a.steps[0].set)
            }
            _ => EvSet::MAX,
        }
    }

    /// Whether the plan is linear without absences, guards or `distinct` (sequences,
    /// closures, `and`, `or`): a group of it holds only partial matches, so one whose partial
    /// matches have all passed the window is no different from none.
    pub fn simple(&self) -> bool {
        match self {
            Plan::Absence { .. } => false,
            Plan::Linear { alts } => alts.iter().all(|a| {
                a.start_absent.is_none()
                    && a.end_absent.is_none()
                    && a.steps.iter().all(|s| {
                        s.guard.is_none() && s.repeat.as_ref().is_none_or(|r| r.distinct.is_none())
                    })
            }),
        }
    }

    /// Whether a partial match of the plan may still slide its first step's window once past
    /// it: one alternative (several tell one partial match by its first event) of a closure
    /// then two plain steps, with no absence before it (whose time counts from the match's
    /// start). Not with more steps, nor a closure after the first: a partial match kept alive
    /// so would take, as the oldest, a middle event a younger one needed, and might still die
    /// before its end (a review found `seq(a{2,}, b{2,}, c)` and `seq(a{2,}, b, b, c)` losing
    /// matches so); with two plain steps after it, the only event it takes past the middle
    /// completes it.
    pub fn slides(&self) -> bool {
        let Plan::Linear { alts } = self else {
            return false;
        };
        let [a] = &alts[..] else {
            return false;
        };
        a.steps.len() == 3
            && a.start_absent.is_none()
            && a.steps[0].repeat.is_some()
            && a.steps[1..].iter().all(|s| s.repeat.is_none())
    }

    /// Whether the plan is one alternative of one plain step, perhaps with an absence after
    /// it (`or(a, b)`, `seq(a, absent(b) for D)`): each event of the step is a match at once,
    /// so a group of it never holds a partial match.
    pub fn single(&self) -> bool {
        match self {
            Plan::Absence { .. } => false,
            Plan::Linear { alts } => match alts.as_slice() {
                [alt] => {
                    alt.start_absent.is_none()
                        && matches!(alt.steps.as_slice(), [s] if s.repeat.is_none() && s.guard.is_none())
                }
                _ => false,
            },
        }
    }

    /// Every event definition the plan reacts to.
    pub fn used(&self) -> EvSet {
        match self {
            Plan::Absence { set, .. } => *set,
            Plan::Linear { alts } => alts
                .iter()
                .map(|a| {
                    a.steps
                        .iter()
                        .fold(0, |acc, s| acc | s.set | s.guard.map_or(0, |g| g.0))
                        | a.start_absent.map_or(0, |s| s.0)
                        | a.end_absent.as_ref().map_or(0, |e| e.set)
                })
                .fold(0, |a, b| a | b),
        }
    }
}

/// One linear alternative.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alt {
    /// `absent(x) for D` before the first step: no x in the D before the first step.
    pub start_absent: Option<(EvSet, Duration)>,
    /// The steps (at least one).
    pub steps: Vec<Step>,
    /// `absent(x) for D` after the last step: fire when D passes with no x.
    pub end_absent: Option<EndAbsent>,
}

/// An absence after the last step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndAbsent {
    /// The events whose absence is watched.
    pub set: EvSet,
    /// How long after the last step (`for D`), or `None`: until the window closes.
    pub for_: Option<Duration>,
}

/// One step of an alternative.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// Events that match this step.
    pub set: EvSet,
    /// Closure bounds, when repeated.
    pub repeat: Option<Repeat>,
    /// An absence before this step: no event of the set between the previous step and this
    /// one (with a duration: during the first D after the previous step, and this step only
    /// after D).
    pub guard: Option<(EvSet, Option<Duration>)>,
}

/// Closure bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repeat {
    /// Least count.
    pub min: u32,
    /// Greatest count.
    pub max: Option<u32>,
    /// Count distinct values of this field only.
    pub distinct: Option<FieldKey>,
}

/// Why a pattern cannot be planned (the checker should have caught it; kept as a safety net).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    /// Too many event definitions.
    #[error("rule `{0}` has more than 64 event definitions")]
    TooManyEvents(String),
    /// Expansion too large.
    #[error(
        "rule `{0}`: the pattern expands to more than {MAX_ALTERNATIVES} alternatives; split it into several rules"
    )]
    TooManyAlternatives(String),
    /// A construct the engine does not run.
    #[error("rule `{rule}`: {what}")]
    Unsupported {
        /// The rule.
        rule: String,
        /// What.
        what: String,
    },
}

#[derive(Clone, Debug)]
enum Item {
    Step(Step),
    /// An absence, and the edge of the nested `seq` it was written at, if any: it means
    /// what it says only while it stays at that edge ([`Anchor`]).
    Guard(EvSet, Option<Duration>, Anchor),
}

/// Where an absence was written in a `seq` nested in another pattern: at its start ("no `c`
/// in the D before the next step") or its end ("no `c` in the D after the last step"), which
/// a middle place would turn into another meaning ("no `c` in the D after the step before").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Anchor {
    Free,
    Start,
    End,
}

fn simple_set(p: &Pattern) -> Option<EvSet> {
    match p {
        Pattern::Event(e) => Some(1u64 << *e),
        Pattern::Or(ps) => ps
            .iter()
            .map(simple_set)
            .try_fold(0, |acc, s| s.map(|s| acc | s)),
        _ => None,
    }
}

impl Plan {
    /// Whether every alert the rule raises is an episode that the engine keeps open until
    /// it resolves (an absence, or a match ending in a closure or an absence), rather than a
    /// match that fires once and never resolves.
    pub fn alerts_resolve(&self) -> bool {
        match self {
            Plan::Absence { .. } => true,
            Plan::Linear { alts } => alts.iter().all(|a| {
                a.end_absent.is_some() || a.steps.last().is_some_and(|s| s.repeat.is_some())
            }),
        }
    }
}

/// `absent(...)` of the events of `set` as a rule would write it: `absent(a)` for one event,
/// `absent(or(a, b))` for several (the merge a hint proposes).
fn absent_of(rule: &Rule, set: EvSet) -> String {
    if set.count_ones() == 1 {
        format!("absent({})", event_names(rule, set))
    } else {
        format!("absent(or({}))", event_names(rule, set))
    }
}

/// The names of the rule's event definitions in `set`, comma-separated, in definition order.
fn event_names(rule: &Rule, set: EvSet) -> String {
    rule.events
        .iter()
        .enumerate()
        .filter(|(i, _)| *i < 64 && set & (1u64 << i) != 0)
        .map(|(_, e)| e.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Plans a rule's pattern.
pub fn plan(rule: &Rule) -> Result<Plan, PlanError> {
    if rule.events.len() > 64 {
        return Err(PlanError::TooManyEvents(rule.name.clone()));
    }
    let unsupported = |what: &str| PlanError::Unsupported {
        rule: rule.name.clone(),
        what: what.to_string(),
    };
    let adjacent = |f: Option<Duration>, g: Option<Duration>, set: EvSet| {
        let d = |f: Option<Duration>| f.map_or("no `for`".into(), |d| format!("for {d}"));
        unsupported(&format!(
            "two adjacent absent() with different durations ({} and {}); merge them into one: {} for the D you mean",
            d(f),
            d(g),
            absent_of(rule, set)
        ))
    };
    let window = rule.within.map(|w| w.max);
    if let Pattern::Absent { inner, for_ } = &rule.pattern {
        // (`absent(x{n,})`: fewer than n.)
        let (inner, min) = match &**inner {
            Pattern::Repeat {
                inner,
                min,
                max: None,
                distinct: None,
            } => (&**inner, (*min).max(1)),
            other => (other, 1),
        };
        let set = simple_set(inner)
            .ok_or_else(|| unsupported("absent() takes an event or an or() of events"))?;
        let for_ = for_
            .or(window)
            .ok_or_else(|| unsupported("absent() needs `for D` or a `within`"))?;
        if min > crate::rules::ir::MAX_ABSENT_COUNT {
            return Err(unsupported(&format!(
                "absent() of a count above {} (each group keeps the times of that many events)",
                crate::rules::ir::MAX_ABSENT_COUNT
            )));
        }
        if min > 1 && rule.allowed_lateness > Duration::ZERO {
            return Err(unsupported(
                "absent() of a count with `allowed_lateness` (a late event cannot yet retract a count's alert): drop `allowed_lateness`, or raise `max_delay` to wait for late events",
            ));
        }
        return Ok(Plan::Absence { set, for_, min });
    }
    let raw = expand(&rule.pattern, &rule.name)?;
    let mut alts = Vec::with_capacity(raw.len());
    for items in raw {
        let mut start_absent = None;
        let mut end_absent = None;
        let mut steps: Vec<Step> = Vec::new();
        let mut pending_guard: Option<(EvSet, Option<Duration>)> = None;
        let n = items.len();
        for (i, item) in items.into_iter().enumerate() {
            match item {
                Item::Guard(set, for_, _) => {
                    if steps.is_empty() && i + 1 < n {
                        if let Some((first, _)) = start_absent {
                            return Err(unsupported(&format!(
                                "two absent() at the start of a seq; merge them into one: {} for the D you mean",
                                absent_of(rule, first | set)
                            )));
                        }
                        let d = for_.or(window).ok_or_else(|| {
                            unsupported(
                                "absent() at the start of a seq needs `for D` or a `within`",
                            )
                        })?;
                        start_absent = Some((set, d));
                    } else if i + 1 == n {
                        if steps.is_empty() {
                            return Err(unsupported(
                                "a pattern made only of absences is not supported; use one absent() per rule",
                            ));
                        }
                        if for_.is_none() && window.is_none() {
                            return Err(unsupported(
                                "absent() at the end of a seq needs `for D` or a `within`",
                            ));
                        }
                        // Two absences side by side at the end, of one duration, are one:
                        // no event of either set in the D after the last step.
                        let set = match pending_guard.take() {
                            None => set,
                            Some((s, f)) if f == for_ => s | set,
                            Some((s, f)) => {
                                return Err(adjacent(f, for_, s | set));
                            }
                        };
                        end_absent = Some(EndAbsent { set, for_ });
                    } else if let Some((s, f)) = pending_guard {
                        if f != for_ {
                            return Err(adjacent(f, for_, s | set));
                        }
                        pending_guard = Some((s | set, f));
                    } else {
                        pending_guard = Some((set, for_));
                    }
                }
                Item::Step(mut s) => {
                    s.guard = pending_guard.take();
                    steps.push(s);
                }
            }
        }
        if steps.is_empty() {
            return Err(unsupported(
                "a pattern made only of absences is not supported; use one absent() per rule",
            ));
        }
        alts.push(Alt {
            start_absent,
            steps,
            end_absent,
        });
    }
    Ok(Plan::Linear { alts })
}

fn expand(p: &Pattern, rule: &str) -> Result<Vec<Vec<Item>>, PlanError> {
    let too_many = || PlanError::TooManyAlternatives(rule.to_string());
    let unsupported = |what: &str| PlanError::Unsupported {
        rule: rule.to_string(),
        what: what.to_string(),
    };
    if let Some(set) = simple_set(p) {
        return Ok(vec![vec![Item::Step(Step {
            set,
            repeat: None,
            guard: None,
        })]]);
    }
    Ok(match p {
        Pattern::Event(e) => vec![vec![Item::Step(Step {
            set: 1u64 << *e,
            repeat: None,
            guard: None,
        })]],
        Pattern::Or(ps) => {
            let mut out = Vec::new();
            for c in ps {
                out.extend(expand(c, rule)?);
                if out.len() > MAX_ALTERNATIVES {
                    return Err(too_many());
                }
            }
            out
        }
        Pattern::Seq(ps) => {
            let mut acc: Vec<Vec<Item>> = vec![Vec::new()];
            for c in ps {
                let alts = expand(c, rule)?;
                if acc.len() * alts.len() > MAX_ALTERNATIVES {
                    return Err(too_many());
                }
                let longest = acc.iter().map(Vec::len).max().unwrap_or(0)
                    + alts.iter().map(Vec::len).max().unwrap_or(0);
                if longest > MAX_STEPS {
                    return Err(unsupported(&format!(
                        "a sequence of more than {MAX_STEPS} steps; split it into several rules"
                    )));
                }
                if let [only] = alts.as_slice() {
                    // One way on: each alternative grows in place (no copy per step, which
                    // made a long sequence cost the square of its length to compile).
                    for a in &mut acc {
                        a.extend(only.iter().cloned());
                    }
                    continue;
                }
                let mut next = Vec::with_capacity(acc.len() * alts.len());
                for a in &acc {
                    for b in &alts {
                        let mut v = a.clone();
                        v.extend(b.iter().cloned());
                        next.push(v);
                    }
                }
                acc = next;
            }
            for alt in &mut acc {
                let len = alt.len();
                // Where the first and last steps are: an edge absence may have other absences
                // beside it (side by side, they are merged or refused below), not steps.
                let is_step = |it: &Item| matches!(it, Item::Step(_));
                let first_step = alt.iter().position(is_step).unwrap_or(len);
                let last_step = alt.iter().rposition(is_step);
                for (i, item) in alt.iter_mut().enumerate() {
                    let Item::Guard(_, _, anchor) = item else {
                        continue;
                    };
                    let moved = match *anchor {
                        Anchor::Start => i > first_step,
                        Anchor::End => last_step.is_some_and(|s| i < s),
                        Anchor::Free => false,
                    };
                    if moved {
                        let (edge, place, meant) = if *anchor == Anchor::Start {
                            (
                                "start",
                                "follow another step",
                                "in the D before the step after it",
                            )
                        } else {
                            (
                                "end",
                                "be followed by another step",
                                "D after the step before it, alerting then",
                            )
                        };
                        return Err(unsupported(&format!(
                            "absent() at the {edge} of a seq() nested in and() or in another seq() would {place} here, and between two steps an absence means no event in the D after the step before it (not {meant}); write the steps as one seq() with the absence where you mean it, or split the rule"
                        )));
                    }
                    // This seq's own edges (before its first step, after its last), for a
                    // pattern it is nested in.
                    if let Some(last_step) = last_step {
                        *anchor = if i < first_step {
                            Anchor::Start
                        } else if i > last_step {
                            Anchor::End
                        } else {
                            Anchor::Free
                        };
                    }
                }
            }
            acc
        }
        Pattern::And(ps) => {
            // `and` is associative: `and(and(a, b), c)` is `and(a, b, c)`, every order of the
            // three (as a sequence of its parts it would miss `a c b`).
            let mut flat = Vec::new();
            let mut todo: Vec<&Pattern> = ps.iter().rev().collect();
            while let Some(p) = todo.pop() {
                match p {
                    Pattern::And(inner) => todo.extend(inner.iter().rev()),
                    other => flat.push(other.clone()),
                }
            }
            let ps = &flat;
            if ps.len() > 5 {
                return Err(unsupported("and() of more than 5 parts; split the rule"));
            }
            let mut out = Vec::new();
            let mut idx: Vec<usize> = (0..ps.len()).collect();
            permutations(&mut idx, 0, &mut |perm| -> Result<(), PlanError> {
                let seq = Pattern::Seq(perm.iter().map(|i| ps[*i].clone()).collect());
                out.extend(expand(&seq, rule)?);
                if out.len() > MAX_ALTERNATIVES {
                    return Err(too_many());
                }
                Ok(())
            })?;
            out
        }
        Pattern::Repeat {
            inner,
            min,
            max,
            distinct,
        } => {
            let set = simple_set(inner)
                .ok_or_else(|| unsupported("a closure repeats an event or an or() of events"))?;
            vec![vec![Item::Step(Step {
                set,
                repeat: Some(Repeat {
                    min: (*min).max(1),
                    max: *max,
                    distinct: distinct.clone(),
                }),
                guard: None,
            })]]
        }
        Pattern::Absent { inner, for_ } => {
            let set = simple_set(inner)
                .ok_or_else(|| unsupported("absent() takes an event or an or() of events"))?;
            vec![vec![Item::Guard(set, *for_, Anchor::Free)]]
        }
    })
}

fn permutations(
    idx: &mut Vec<usize>,
    k: usize,
    f: &mut dyn FnMut(&[usize]) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    if k == idx.len() {
        return f(idx);
    }
    for i in k..idx.len() {
        idx.swap(k, i);
        permutations(idx, k + 1, f)?;
        idx.swap(k, i);
    }
    Ok(())
}
