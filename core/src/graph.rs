//! The shared operator graph: a whole rule set compiled into one graph in which identical and
//! similar work is done once (the paper's reconstructed event query tree, sections 3.2–3.5).
//!
//! [`build`] turns a [`RuleSet`] into a [`Graph`] of nodes:
//!
//! - **predicate** nodes, one per distinct normalised condition ([`Cond::predicate_key`]), each
//!   listing every (rule, event name) that uses it: a predicate is evaluated once per event
//!   however many rules name it;
//! - **event** nodes: a predicate plus the group mapping (which field supplies each `group_by`
//!   name); stateless, so shared whenever predicate and mapping agree;
//! - **operator** nodes for each rule's pattern tree (`seq`, `or`, `and`, closures,
//!   absences) and one **root** per distinct rule body (pattern, window, grouping, time and
//!   alerting settings; not the name, severity, message or description);
//! - **virtual** nodes (the paper's similar operations OA, SS, OS) that replace several
//!   operators over the same events by one node holding an occurrence bit per event (the
//!   EOIT's OB) and, per combined operation, the addresses of its parents (the EOIT's PA).
//!
//! Sharing (when `share` is true) follows one rule: **state can only be shared between nodes
//! that see the same events, partitioned the same way, on the same clock**. So an operator's
//! identity is its canonical form (kind, parameters, children's canonical forms) *plus its
//! scope*: the rule's `group_by`, `within`, time mode and (event time) `max_delay` and
//! `allowed_lateness`. Two operators with equal canonical forms but different scopes are not
//! merged, and each records why ("not shared with #12: different window (5m vs 10m)").
//!
//! Cost model (per node, documented in `docs/rules.md`):
//!
//! - *SO* (redundant: the same node in several places) always pays: one evaluation and one
//!   state instead of several, with one output per parent address. This covers shared closure
//!   counters (identical `a{n,m}` over the same events and grouping) and shared absence timers
//!   (identical `absent(a) for D` in the same place: alone, at the start of a `seq`, or after
//!   the same steps, since an absence times from its place).
//! - *OA/SS/OS* (similar operations) are combined into a virtual node only when every child of
//!   every combined operator is an event node: then the EOIT is one occurrence bit per event
//!   and per group, each shared event is delivered once instead of once per operator, and no
//!   state is added. Operators fed by other operators are not combined: their input does not
//!   come from the hash table, so there is no delivery to save (their shared children are
//!   already SO). Operators in different scopes are never combined.
//!
//! The graph also carries the paper's hash table ([`Graph::index`]): for each predicate, the
//! operator nodes that consume it, so an event that satisfies a predicate is delivered only to
//! those nodes. Ids are topological: every child has a smaller id than its parents
//! (predicates, then events, then operators, then roots).
//!
//! This module is pure (no I/O); `cepheus rules graph` prints [`Graph::to_text`] and
//! [`Graph::to_dot`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use crate::rules::ir::{Pattern, Rule, RuleSet, TimeMode, Trigger, Window};
use crate::time::Duration;

/// Index of a node in [`Graph::nodes`].
pub type NodeId = usize;

/// How a node came to do the work of several.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ShareKind {
    /// Redundant: the same node (predicate, event, operator, root) in several places.
    SO,
    /// Similar: an `or` and an `and` over the same events.
    OA,
    /// Similar: two `seq` with the same first event.
    SS,
    /// Similar: an `or` that contains a `seq`'s first event.
    OS,
}

impl ShareKind {
    /// The paper's two-letter name.
    pub const fn name(self) -> &'static str {
        match self {
            ShareKind::SO => "SO",
            ShareKind::OA => "OA",
            ShareKind::SS => "SS",
            ShareKind::OS => "OS",
        }
    }
}

/// One reason a node is shared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sharing {
    /// Which kind of sharing.
    pub kind: ShareKind,
    /// Why, for people.
    pub reason: String,
}

/// A combinable operator: the operations a virtual node can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// `seq(..)`
    Seq,
    /// `or(..)`
    Or,
    /// `and(..)`
    And,
}

impl Op {
    /// The pattern keyword.
    pub const fn name(self) -> &'static str {
        match self {
            Op::Seq => "seq",
            Op::Or => "or",
            Op::And => "and",
        }
    }
}

/// A use of a predicate: rule index (into [`Graph::rules`]), definition index, event name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Use {
    /// Index of the rule.
    pub rule: usize,
    /// Index of the definition in the rule's `events` (what [`Pattern::Event`] holds).
    pub def: usize,
    /// The name in `events.<name>`.
    pub event: String,
}

/// A parent address (the EOIT's PA): the parent node and which of its children this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Address {
    /// The parent node.
    pub node: NodeId,
    /// The position among the parent's children.
    pub slot: usize,
}

/// One operation combined into a virtual node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VirtualOp {
    /// The operation.
    pub op: Op,
    /// Its canonical form (what its own node's would have been).
    pub canonical: String,
    /// Its children (event nodes), in pattern order (`seq`) or canonical order (`or`, `and`).
    pub children: Vec<NodeId>,
    /// Where its output goes.
    pub parents: Vec<Address>,
}

/// What a node does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// A condition on one event (its canonical text is [`Node::canonical`]).
    Predicate {
        /// Every (rule, event name) that uses it.
        uses: Vec<Use>,
    },
    /// A predicate (the only child) with the group mapping: (group name, field) pairs.
    Event {
        /// For each `group_by` name, the field that supplies it.
        group: Vec<(String, String)>,
    },
    /// `seq(..)`
    Seq,
    /// `or(..)`
    Or,
    /// `and(..)`
    And,
    /// `a{min,max}`, optionally `distinct(field)`: a closure counter.
    Repeat {
        /// Least count.
        min: u32,
        /// Greatest count.
        max: Option<u32>,
        /// Count distinct values of this field only.
        distinct: Option<String>,
    },
    /// `absent(a) [for D]`: an absence timer.
    Absent {
        /// How long, when given.
        for_: Option<Duration>,
    },
    /// A rule body: the pattern (only child) and the settings that change its meaning.
    Root {
        /// `within`.
        within: Option<Window>,
        /// `group_by` names.
        group_by: Vec<String>,
        /// Processing or event time.
        time: TimeMode,
        /// Event time: how far the watermark trails.
        max_delay: Duration,
    },
    /// Similar operations combined (OA, SS, OS): children are the occurrence bits (the EOIT).
    Virtual {
        /// The combined operations and their parent addresses.
        ops: Vec<VirtualOp>,
    },
}

impl NodeKind {
    /// A short name for dumps.
    pub fn name(&self) -> &'static str {
        match self {
            NodeKind::Predicate { .. } => "predicate",
            NodeKind::Event { .. } => "event",
            NodeKind::Seq => "seq",
            NodeKind::Or => "or",
            NodeKind::And => "and",
            NodeKind::Repeat { .. } => "repeat",
            NodeKind::Absent { .. } => "absent",
            NodeKind::Root { .. } => "root",
            NodeKind::Virtual { .. } => "virtual",
        }
    }

    fn category(&self) -> u8 {
        match self {
            NodeKind::Predicate { .. } => 0,
            NodeKind::Event { .. } => 1,
            NodeKind::Root { .. } => 3,
            _ => 2,
        }
    }

    fn op(&self) -> Option<Op> {
        match self {
            NodeKind::Seq => Some(Op::Seq),
            NodeKind::Or => Some(Op::Or),
            NodeKind::And => Some(Op::And),
            _ => None,
        }
    }
}

/// One node of the graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Its index in [`Graph::nodes`].
    pub id: NodeId,
    /// What it does.
    pub kind: NodeKind,
    /// Kind, parameters and the children's canonical forms (roots: also their settings).
    pub canonical: String,
    /// The settings its state depends on (`group_by`, window, time); empty for stateless
    /// predicates and events.
    pub scope: String,
    /// Its inputs, in order (a child may appear twice: `seq(a, a)`).
    pub children: Vec<NodeId>,
    /// The nodes its output goes to (several when shared), ascending.
    pub parents: Vec<NodeId>,
    /// The rules it serves (indexes into [`Graph::rules`]), ascending.
    pub rules: Vec<usize>,
    /// How it is shared (empty: it serves one place).
    pub sharing: Vec<Sharing>,
    /// Why it was not shared with a node that looks alike.
    pub not_shared: Vec<String>,
}

impl Node {
    /// Adds a "not shared" note, once.
    fn note_not_shared(&mut self, note: String) {
        if !self.not_shared.contains(&note) {
            self.not_shared.push(note);
        }
    }

    /// The identity of its state: the canonical form plus the scope (unique in a shared graph).
    pub fn key(&self) -> String {
        if self.scope.is_empty() {
            self.canonical.clone()
        } else {
            format!("{} @ {}", self.canonical, self.scope)
        }
    }

    /// Whether it does the work of several places.
    pub fn is_shared(&self) -> bool {
        !self.sharing.is_empty()
    }
}

/// A rule of the set and its root node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphRule {
    /// The rule's name.
    pub name: String,
    /// Its root node (`None` only if the pattern names an undefined event, which a checked
    /// rule set never does).
    pub root: Option<NodeId>,
    /// The event node of each of its definitions, by definition index (`None` for one the
    /// pattern does not name).
    pub events: Vec<Option<NodeId>>,
    /// The definitions its pattern does not name: not in the graph, never evaluated.
    pub unused: Vec<String>,
}

/// Counts for benchmarks and docs: this graph against the same rules without sharing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Nodes in this graph.
    pub nodes: usize,
    /// Nodes the same rules make without sharing.
    pub nodes_unshared: usize,
    /// Predicates evaluated per event at most (every predicate tested; the filter index
    /// lowers this further): predicate nodes of this graph.
    pub predicates: usize,
    /// The same without sharing: one per (rule, event definition).
    pub predicates_unshared: usize,
    /// Deliveries from predicates to operator nodes if every predicate held (sum over
    /// predicates of their consumers in [`Graph::index`]).
    pub deliveries: usize,
    /// The same without sharing.
    pub deliveries_unshared: usize,
    /// Nodes shared by each kind (a virtual node may count under several kinds).
    pub by_kind: BTreeMap<ShareKind, usize>,
}

/// The whole rule set as one graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Graph {
    /// Whether sharing was on.
    pub share: bool,
    /// The rules, in rule-set order.
    pub rules: Vec<GraphRule>,
    /// The nodes, by id (children before parents).
    pub nodes: Vec<Node>,
    /// The hash table: for each predicate node, the operator nodes that consume it.
    pub index: BTreeMap<NodeId, Vec<NodeId>>,
    /// Counts.
    pub stats: Stats,
}

/// Compiles a rule set into one graph; with `share`, identical and similar work is merged.
pub fn build(rules: &RuleSet, share: bool) -> Graph {
    let mut b = Builder::default();
    for (ri, rule) in rules.rules.iter().enumerate() {
        b.add_rule(ri, rule);
    }
    b.finish(share)
}

/// One node of the unshared tree (a "use").
#[derive(Clone, Debug)]
struct Inst {
    kind: NodeKind,
    canonical: String,
    /// The canonical form with events written without their group mapping: equal shapes in
    /// different classes are "alike but apart" (reported as not shared).
    shape: String,
    scope: String,
    children: Vec<usize>,
    rule: usize,
    /// Where an absence stands ([`Builder::place_absences`]); empty for other nodes.
    place: &'static str,
}

/// Instances merged by key (all identical when sharing).
#[derive(Clone, Debug)]
struct Class {
    kind: NodeKind,
    canonical: String,
    shape: String,
    scope: String,
    children: Vec<usize>,
    rule: usize,
    rules: BTreeSet<usize>,
    uses: usize,
    place: &'static str,
}

#[derive(Default)]
struct Builder {
    insts: Vec<Inst>,
    rules: Vec<GraphRule>,
    /// Per rule: (scope settings, root-only settings).
    settings: Vec<(Settings, Settings)>,
    /// Per rule: its root instance.
    roots: Vec<Option<usize>>,
}

type Settings = Vec<(&'static str, String)>;

fn mapping(group: &[(String, String)]) -> String {
    group
        .iter()
        .map(|(n, f)| format!("{n}={f}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn counts(min: u32, max: Option<u32>) -> String {
    match max {
        Some(m) if m == min => format!("{{{min}}}"),
        Some(m) => format!("{{{min},{m}}}"),
        None => format!("{{{min},}}"),
    }
}

fn window_text(w: Option<Window>) -> String {
    match w {
        None => "-".into(),
        Some(w) if w.min.0 == 0 => w.max.to_string(),
        Some(w) => format!("{}..{}", w.min, w.max),
    }
}

/// FNV-1a, for a short stable fingerprint of long text (`expect` lists, an absence's
/// neighbouring steps).
fn fingerprint(s: &str) -> u64 {
    let mut h = crate::fnv::Fnv::new();
    h.feed(s.as_bytes());
    h.finish()
}

/// The settings an operator's state depends on (its scope), and those only the root has.
fn settings(rule: &Rule) -> (Settings, Settings) {
    let mut scope: Settings = vec![
        ("group_by", format!("[{}]", rule.group_by.join(", "))),
        ("within", window_text(rule.within)),
        (
            "time",
            match rule.time {
                TimeMode::Processing => "processing".into(),
                TimeMode::Event => "event".into(),
            },
        ),
    ];
    if rule.time == TimeMode::Event {
        scope.push(("max_delay", rule.max_delay.to_string()));
        scope.push(("allowed_lateness", rule.allowed_lateness.to_string()));
    }
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    // The keys as `expect` writes them (sorted: the list is a set); a long list shows its
    // first keys and a fingerprint of all.
    let key = |k: &Vec<crate::event::Value>| {
        k.iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let expect = match rule.expect.len() {
        0 => "-".to_string(),
        n if n <= 4 => format!(
            "[{}]",
            rule.expect.iter().map(key).collect::<Vec<_>>().join(" ")
        ),
        n => format!(
            "{n} keys [{} ...] #{:016x}",
            rule.expect[..3]
                .iter()
                .map(key)
                .collect::<Vec<_>>()
                .join(" "),
            fingerprint(&format!("{:?}", rule.expect))
        ),
    };
    let mut root: Settings = vec![
        (
            "trigger",
            match rule.trigger {
                Trigger::Event => "event".into(),
                Trigger::Every(None) => "every window".into(),
                Trigger::Every(Some(d)) => format!("every {d}"),
            },
        ),
        ("forget_after", rule.forget_after.to_string()),
        ("max_groups", opt(rule.max_groups)),
        ("max_partial_matches", opt(rule.max_partial_matches)),
        ("expect", expect),
    ];
    // Where the order of the definitions means something, it is the rule's own (the engine
    // keeps such rules apart).
    if crate::rules::ir::definition_order_matters(&rule.events) {
        let order: Vec<String> = rule
            .events
            .iter()
            .map(|d| {
                let fields: Vec<_> = d.group_fields.iter().map(|f| f.name()).collect();
                format!("{} by [{}]", d.cond.canonical(), fields.join(", "))
            })
            .collect();
        root.push(("definition order", order.join("; ")));
    }
    (scope, root)
}

fn settings_text(s: &Settings) -> String {
    s.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Which settings differ, for "not shared" reasons: `different window (5m vs 10m)`; empty
/// when none does.
fn settings_diff(a: &Settings, b: &Settings) -> String {
    let mut out = Vec::new();
    for (k, va) in a {
        let vb = b.iter().find(|(kb, _)| kb == k).map(|(_, v)| v.as_str());
        if vb != Some(va.as_str()) {
            let name = match *k {
                "within" => "window",
                "time" => "time mode",
                other => other,
            };
            out.push(format!("different {name} ({va} vs {})", vb.unwrap_or("-")));
        }
    }
    for (k, vb) in b {
        if !a.iter().any(|(ka, _)| ka == k) {
            out.push(format!("different {k} (- vs {vb})"));
        }
    }
    out.join(", ")
}

impl Builder {
    fn push(&mut self, inst: Inst) -> usize {
        self.insts.push(inst);
        self.insts.len() - 1
    }

    fn add_rule(&mut self, ri: usize, rule: &Rule) {
        let (scope_set, root_set) = settings(rule);
        let scope = settings_text(&scope_set);
        let mut evs = Vec::with_capacity(rule.events.len());
        let mut unused = Vec::new();
        for (di, def) in rule.events.iter().enumerate() {
            if !rule.pattern.uses(di) {
                unused.push(def.name.clone());
                evs.push(None);
                continue;
            }
            let p = self.push(Inst {
                kind: NodeKind::Predicate {
                    uses: vec![Use {
                        rule: ri,
                        def: di,
                        event: def.name.clone(),
                    }],
                },
                // Conditions that hold for the same events are one predicate (normalised
                // further than the rule's meaning, which its event node keeps).
                canonical: def.cond.predicate_key(),
                // Predicates alike but apart are those a capture keeps in another order.
                shape: def.cond.canonical_any_order(),
                scope: String::new(),
                children: Vec::new(),
                rule: ri,
                place: "",
            });
            let group: Vec<(String, String)> = rule
                .group_by
                .iter()
                .zip(&def.group_fields)
                .map(|(n, f)| (n.clone(), f.name().to_string()))
                .collect();
            // As the predicate: conditions spelled apart that hold for the same events are one
            // event node (found by an audit: `app == "x"` and `syslog and app == "x"` made two,
            // said to be the only use of their predicate, and their operators went unshared).
            let shape = format!("event({})", def.cond.predicate_key());
            let mut canonical = shape.clone();
            if !group.is_empty() {
                let _ = write!(canonical, " by [{}]", mapping(&group));
            }
            let e = self.push(Inst {
                kind: NodeKind::Event { group },
                canonical,
                shape,
                scope: String::new(),
                children: vec![p],
                rule: ri,
                place: "",
            });
            evs.push(Some(e));
        }
        let top = self.walk(&rule.pattern, &evs, ri, &scope);
        // A rule's state is keyed by its meaning as written ([`Rule::canonical`], which the
        // engine keys its states by): rules whose conditions are spelled apart run as states
        // apart, whatever their operators share.
        // (A digest: the text holds definitions the pattern does not use, which are no node.)
        let spelled = {
            let mut h = crate::fnv::Fnv::new();
            h.feed(rule.canonical().as_bytes());
            format!("{:016x}", h.finish())
        };
        let root = top.map(|top| {
            let canonical = format!(
                "rule({}) {} {}{WRITTEN}{}",
                self.insts[top].canonical,
                scope,
                settings_text(&root_set),
                spelled
            );
            let shape = format!("rule({})", self.insts[top].shape);
            self.push(Inst {
                kind: NodeKind::Root {
                    within: rule.within,
                    group_by: rule.group_by.clone(),
                    time: rule.time,
                    max_delay: rule.max_delay,
                },
                canonical,
                shape,
                scope: scope.clone(),
                children: vec![top],
                rule: ri,
                place: "",
            })
        });
        self.roots.push(root);
        self.settings.push((scope_set, root_set));
        self.rules.push(GraphRule {
            name: rule.name.clone(),
            root: None,
            events: evs,
            unused,
        });
    }

    /// Adds the instances of a pattern (post-order); returns its top instance.
    fn walk(
        &mut self,
        p: &Pattern,
        evs: &[Option<usize>],
        ri: usize,
        scope: &str,
    ) -> Option<usize> {
        let (kind, mut children) = match p {
            Pattern::Event(i) => return evs.get(*i).copied().flatten(),
            Pattern::Seq(ps) | Pattern::Or(ps) | Pattern::And(ps) => {
                let mut cs = Vec::with_capacity(ps.len());
                for c in ps {
                    cs.push(self.walk(c, evs, ri, scope)?);
                }
                if matches!(p, Pattern::Seq(_)) {
                    self.place_absences(ps, &cs);
                }
                let kind = match p {
                    Pattern::Seq(_) => NodeKind::Seq,
                    Pattern::Or(_) => NodeKind::Or,
                    _ => NodeKind::And,
                };
                (kind, cs)
            }
            Pattern::Repeat {
                inner,
                min,
                max,
                distinct,
            } => (
                NodeKind::Repeat {
                    min: *min,
                    max: *max,
                    distinct: distinct.as_ref().map(|d| d.name().to_string()),
                },
                vec![self.walk(inner, evs, ri, scope)?],
            ),
            Pattern::Absent { inner, for_ } => {
                let c = self.walk(inner, evs, ri, scope)?;
                // A count an absence holds (`absent(x{n,}) for D`: fewer than n in any D)
                // counts over that D, not as a closure counts: it is no other count's node.
                if matches!(**inner, Pattern::Repeat { .. }) {
                    let suffix = match for_ {
                        Some(d) => format!(" counted by an absence for {d}"),
                        None => " counted by an absence".to_string(),
                    };
                    let inst = &mut self.insts[c];
                    inst.canonical.push_str(&suffix);
                    inst.shape.push_str(&suffix);
                    inst.place = "counted by an absence";
                }
                (NodeKind::Absent { for_: *for_ }, vec![c])
            }
        };
        if matches!(kind, NodeKind::Or | NodeKind::And) {
            // Commutative: children in canonical order, so or(a, b) and or(b, a) are one.
            children.sort_by(|a, b| self.insts[*a].canonical.cmp(&self.insts[*b].canonical));
        }
        let mut forms: Vec<&str> = children
            .iter()
            .map(|c| self.insts[*c].canonical.as_str())
            .collect();
        let mut shapes: Vec<&str> = children
            .iter()
            .map(|c| self.insts[*c].shape.as_str())
            .collect();
        if matches!(kind, NodeKind::Or | NodeKind::And) {
            forms.sort_unstable();
            shapes.sort_unstable();
        }
        let canonical = op_form(&kind, &forms);
        let shape = op_form(&kind, &shapes);
        Some(self.push(Inst {
            scope: scope.to_string(),
            place: if matches!(kind, NodeKind::Absent { .. }) {
                "alone"
            } else {
                ""
            },
            kind,
            canonical,
            shape,
            children,
            rule: ri,
        }))
    }

    /// An absence inside a `seq` times from its place: at the start, the silence before the
    /// next step; later, the time since the step before it (and, in the middle, what the next
    /// step may do). Its identity says so, so only absences in the same place, after the
    /// same steps, are one node (an absence alone times from its events only).
    fn place_absences(&mut self, ps: &[Pattern], cs: &[usize]) {
        let last = cs.len().saturating_sub(1);
        // A neighbour is named by a fingerprint of its canonical form: its text would nest a
        // copy of every step below it, doubling with each level of nested sequences.
        let digest = |c: &str| format!("step {:016x}", fingerprint(c));
        for (i, p) in ps.iter().enumerate() {
            if !matches!(p, Pattern::Absent { .. }) {
                continue;
            }
            let (place, suffix) = if i == 0 {
                ("at the start of a seq", " at the start".to_string())
            } else {
                let after = digest(&self.insts[cs[i - 1]].canonical);
                if i < last {
                    let before = digest(&self.insts[cs[i + 1]].canonical);
                    (
                        "between two steps of a seq",
                        format!(" after {after} before {before}"),
                    )
                } else {
                    ("after a step of a seq", format!(" after {after}"))
                }
            };
            let inst = &mut self.insts[cs[i]];
            inst.canonical.push_str(&suffix);
            inst.shape.push_str(&suffix);
            inst.place = place;
        }
    }

    fn finish(self, share: bool) -> Graph {
        let Builder {
            insts,
            mut rules,
            settings,
            roots,
        } = self;

        // 1. Classes: instances with the same key are one node (when sharing).
        let (classes, class_of) = merge(&insts, share);
        let mut class_parents: Vec<BTreeSet<(usize, usize)>> = vec![BTreeSet::new(); classes.len()];
        for (p, class) in classes.iter().enumerate() {
            for (slot, c) in class.children.iter().enumerate() {
                class_parents[*c].insert((p, slot));
            }
        }

        // 2. Similar operations (OA, SS, OS) → virtual nodes, by the cost model.
        let sim = if share {
            similar(&classes, &settings)
        } else {
            Similar::default()
        };

        // 3. Final nodes: a class, or a virtual node in place of its lowest member.
        let mut units: Vec<(u8, usize, Vec<usize>)> = Vec::new();
        let mut in_comp: BTreeMap<usize, usize> = BTreeMap::new();
        for (ci, comp) in sim.components.iter().enumerate() {
            for m in comp {
                in_comp.insert(*m, ci);
            }
        }
        let mut done_comp = BTreeSet::new();
        for (c, class) in classes.iter().enumerate() {
            match in_comp.get(&c) {
                Some(ci) => {
                    if done_comp.insert(*ci) {
                        units.push((class.kind.category(), c, sim.components[*ci].clone()));
                    }
                }
                None => units.push((class.kind.category(), c, vec![c])),
            }
        }
        units.sort_by_key(|(cat, first, _)| (*cat, *first));
        let mut id_of = vec![0usize; classes.len()];
        for (id, (_, _, members)) in units.iter().enumerate() {
            for m in members {
                id_of[*m] = id;
            }
        }
        let map_parents = |c: usize| -> Vec<Address> {
            class_parents[c]
                .iter()
                .map(|(p, slot)| Address {
                    node: id_of[*p],
                    slot: *slot,
                })
                .collect()
        };

        let mut nodes: Vec<Node> = Vec::with_capacity(units.len());
        for (id, (_, first, members)) in units.iter().enumerate() {
            let class = &classes[*first];
            let node = if members.len() == 1 {
                let parents: BTreeSet<NodeId> =
                    map_parents(*first).into_iter().map(|a| a.node).collect();
                let mut kind = class.kind.clone();
                if let NodeKind::Predicate { uses } = &mut kind {
                    uses.sort();
                }
                Node {
                    id,
                    kind,
                    canonical: class.canonical.clone(),
                    scope: class.scope.clone(),
                    children: class.children.iter().map(|c| id_of[*c]).collect(),
                    parents: parents.into_iter().collect(),
                    rules: class.rules.iter().copied().collect(),
                    sharing: Vec::new(),
                    not_shared: Vec::new(),
                }
            } else {
                let mut ops = Vec::new();
                let mut bits: Vec<NodeId> = Vec::new();
                let mut parents = BTreeSet::new();
                let mut rules_served = BTreeSet::new();
                for m in members {
                    let mc = &classes[*m];
                    let children: Vec<NodeId> = mc.children.iter().map(|c| id_of[*c]).collect();
                    for c in &children {
                        if !bits.contains(c) {
                            bits.push(*c);
                        }
                    }
                    let addrs = map_parents(*m);
                    parents.extend(addrs.iter().map(|a| a.node));
                    rules_served.extend(mc.rules.iter().copied());
                    ops.push(VirtualOp {
                        op: mc.kind.op().unwrap_or(Op::Or),
                        canonical: mc.canonical.clone(),
                        children,
                        parents: addrs,
                    });
                }
                let mut forms: Vec<&str> = ops.iter().map(|o| o.canonical.as_str()).collect();
                forms.sort_unstable();
                let canonical = format!("virtual{{{}}}", forms.join(" | "));
                // The scope of its operators that keep state: an `or` of events without a
                // window (which keeps none) joins one whose scope is its own but for the
                // window, whatever the order the rules came in.
                let home = members
                    .iter()
                    .find(|m| classes[**m].kind != NodeKind::Or)
                    .map_or(class, |m| &classes[*m]);
                Node {
                    id,
                    kind: NodeKind::Virtual { ops },
                    canonical,
                    scope: home.scope.clone(),
                    children: bits,
                    parents: parents.into_iter().collect(),
                    rules: rules_served.into_iter().collect(),
                    sharing: Vec::new(),
                    not_shared: Vec::new(),
                }
            };
            nodes.push(node);
        }

        // 4. Reasons: why each node is or is not shared.
        let rule_names: Vec<String> = rules.iter().map(|r| r.name.clone()).collect();
        for (id, (_, _, members)) in units.iter().enumerate() {
            let mut sharing = Vec::new();
            for m in members {
                let class = &classes[*m];
                if class.uses > 1 {
                    // Parent addresses (node and child position): its places in the graph.
                    let parents: Vec<String> = map_parents(*m)
                        .iter()
                        .map(|a| format!("#{}.{}", a.node, a.slot))
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect();
                    let prefix = if members.len() > 1 {
                        format!("{}: ", op_label(&class.kind, &class.children, &id_of))
                    } else {
                        String::new()
                    };
                    sharing.push(Sharing {
                        kind: ShareKind::SO,
                        reason: format!("{prefix}{}", so_reason(class, &parents, &rule_names)),
                    });
                }
            }
            if members.len() > 1 {
                for (kind, a, b) in &sim.relations {
                    if id_of[*a] == id {
                        sharing.push(Sharing {
                            kind: *kind,
                            reason: similar_reason(*kind, *a, *b, &classes, &id_of, &map_parents),
                        });
                    }
                }
            }
            nodes[id].sharing = cap_reasons(sharing);
        }
        for (kind, a, b, why_a, why_b) in &sim.near_misses {
            for (x, y, why) in [(*a, *b, why_a), (*b, *a, why_b)] {
                // Combined after all, through another relation: one node.
                if id_of[x] == id_of[y] {
                    continue;
                }
                let note = format!("not combined ({}) with #{}: {why}", kind.name(), id_of[y]);
                nodes[id_of[x]].note_not_shared(note);
            }
        }
        not_shared_twins(
            share, &insts, &class_of, &classes, &id_of, &settings, &mut nodes,
        );
        if !share {
            similar_unshared(&insts, &settings, |i| id_of[class_of[i]], &mut nodes);
        }
        for n in &mut nodes {
            if n.sharing.is_empty() && n.not_shared.is_empty() {
                n.not_shared
                    .push(format!("not shared: {}", alone_reason(&n.kind)));
            }
        }

        // 5. The hash table and the counts.
        let mut index = BTreeMap::new();
        for n in &nodes {
            if matches!(n.kind, NodeKind::Predicate { .. }) {
                let consumers: BTreeSet<NodeId> = n
                    .parents
                    .iter()
                    .flat_map(|e| nodes[*e].parents.iter().copied())
                    .collect();
                index.insert(n.id, consumers.into_iter().collect::<Vec<_>>());
            }
        }
        let stats = stats(&insts, &nodes, &index);
        for (r, root) in rules.iter_mut().zip(&roots) {
            r.root = root.map(|i| id_of[class_of[i]]);
            for e in r.events.iter_mut().flatten() {
                *e = id_of[class_of[*e]];
            }
        }
        Graph {
            share,
            rules,
            nodes,
            index,
            stats,
        }
    }
}

/// Merges instances with the same [`share_key`] into classes (only when `share`); returns the
/// classes and each instance's class.
fn merge(insts: &[Inst], share: bool) -> (Vec<Class>, Vec<usize>) {
    let mut classes: Vec<Class> = Vec::new();
    let mut class_of: Vec<usize> = Vec::with_capacity(insts.len());
    let mut by_key: BTreeMap<String, usize> = BTreeMap::new();
    for inst in insts {
        let key = share_key(inst);
        let found = if share {
            by_key.get(&key).copied()
        } else {
            None
        };
        match found {
            Some(c) => {
                let class = &mut classes[c];
                class.rules.insert(inst.rule);
                class.uses += 1;
                if let (NodeKind::Predicate { uses }, NodeKind::Predicate { uses: more }) =
                    (&mut class.kind, &inst.kind)
                {
                    uses.extend(more.iter().cloned());
                }
                class_of.push(c);
            }
            None => {
                let c = classes.len();
                classes.push(Class {
                    kind: inst.kind.clone(),
                    canonical: inst.canonical.clone(),
                    shape: inst.shape.clone(),
                    scope: inst.scope.clone(),
                    children: inst.children.iter().map(|ch| class_of[*ch]).collect(),
                    rule: inst.rule,
                    rules: BTreeSet::from([inst.rule]),
                    uses: 1,
                    place: inst.place,
                });
                by_key.insert(key, c);
                class_of.push(c);
            }
        }
    }
    (classes, class_of)
}

/// The counts of a built graph against its instances (the unshared graph).
fn stats(insts: &[Inst], nodes: &[Node], index: &BTreeMap<NodeId, Vec<NodeId>>) -> Stats {
    let mut inst_parents: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); insts.len()];
    for (p, inst) in insts.iter().enumerate() {
        for c in &inst.children {
            inst_parents[*c].insert(p);
        }
    }
    let deliveries_unshared = insts
        .iter()
        .enumerate()
        .filter(|(_, i)| matches!(i.kind, NodeKind::Event { .. }))
        .map(|(e, _)| inst_parents[e].len())
        .sum();
    let mut by_kind = BTreeMap::new();
    for n in nodes {
        let kinds: BTreeSet<ShareKind> = n.sharing.iter().map(|s| s.kind).collect();
        for k in kinds {
            *by_kind.entry(k).or_insert(0) += 1;
        }
    }
    Stats {
        nodes: nodes.len(),
        nodes_unshared: insts.len(),
        predicates: index.len(),
        predicates_unshared: insts
            .iter()
            .filter(|i| matches!(i.kind, NodeKind::Predicate { .. }))
            .count(),
        deliveries: index.values().map(Vec::len).sum(),
        deliveries_unshared,
        by_kind,
    }
}

/// The canonical text of an operator over its children's texts.
fn op_form(kind: &NodeKind, inner: &[&str]) -> String {
    let inner = inner.join(", ");
    match kind {
        NodeKind::Repeat { min, max, distinct } => {
            let mut s = format!("repeat({inner}){}", counts(*min, *max));
            if let Some(d) = distinct {
                let _ = write!(s, " distinct({d})");
            }
            s
        }
        NodeKind::Absent { for_ } => match for_ {
            Some(d) => format!("absent({inner}) for {d}"),
            None => format!("absent({inner})"),
        },
        other => format!("{}({inner})", other.name()),
    }
}

/// Keeps the first [`MAX_NOTES`] reasons of each kind and counts the rest in one more.
fn cap_reasons(sharing: Vec<Sharing>) -> Vec<Sharing> {
    let mut out: Vec<Sharing> = Vec::new();
    let mut extra: BTreeMap<ShareKind, usize> = BTreeMap::new();
    for sh in sharing {
        if out.iter().filter(|o| o.kind == sh.kind).count() < MAX_NOTES {
            out.push(sh);
        } else {
            *extra.entry(sh.kind).or_insert(0) += 1;
        }
    }
    for (kind, n) in extra {
        out.push(Sharing {
            kind,
            reason: format!("and {n} more like these"),
        });
    }
    out
}

/// The key under which instances are merged: kind category, canonical form, scope.
fn share_key(inst: &Inst) -> String {
    format!(
        "{}\u{1}{}\u{1}{}",
        inst.kind.category(),
        inst.canonical,
        inst.scope
    )
}

fn op_label(kind: &NodeKind, children: &[usize], id_of: &[usize]) -> String {
    let ids: Vec<String> = children.iter().map(|c| format!("#{}", id_of[*c])).collect();
    format!("{}({})", kind.name(), ids.join(", "))
}

fn so_reason(class: &Class, parents: &[String], rule_names: &[String]) -> String {
    let rules: Vec<&str> = class
        .rules
        .iter()
        .filter_map(|r| rule_names.get(*r).map(String::as_str))
        .collect();
    let in_rules = if rules.len() == 1 {
        format!("rule {}", rules.join(", "))
    } else {
        format!("rules {}", rules.join(", "))
    };
    let n = class.uses;
    match &class.kind {
        NodeKind::Predicate { uses } => {
            let names: Vec<String> = uses
                .iter()
                .map(|u| {
                    let r = rule_names.get(u.rule).map_or("?", String::as_str);
                    format!("{r}/{}", u.event)
                })
                .collect();
            format!(
                "same condition in {n} uses ({}): evaluated once per event",
                names.join(", ")
            )
        }
        NodeKind::Event { .. } => {
            format!("same predicate and group mapping in {n} uses ({in_rules}): one node")
        }
        NodeKind::Root { .. } => {
            format!("{in_rules} have the same pattern and settings: matched once, alerted per rule")
        }
        kind => {
            let what = match kind {
                NodeKind::Repeat { .. } => "shared closure counter: ",
                NodeKind::Absent { .. } => "shared absence timer: ",
                _ => "",
            };
            // Its places in the graph (rules that share a root share what is below it too).
            let places = match parents.len() {
                1 => "in one place".to_string(),
                n => format!("in {n} places"),
            };
            format!(
                "{what}same {} over the same children, window and grouping {places} ({in_rules}): one operation, outputs to {}",
                class.kind.name(),
                parents.join(", ")
            )
        }
    }
}

fn similar_reason(
    kind: ShareKind,
    a: usize,
    b: usize,
    classes: &[Class],
    id_of: &[usize],
    map_parents: &dyn Fn(usize) -> Vec<Address>,
) -> String {
    let label = |c: usize| {
        let ids: Vec<String> = classes[c]
            .children
            .iter()
            .map(|x| format!("#{}", id_of[*x]))
            .collect();
        format!("{}({})", classes[c].kind.name(), ids.join(", "))
    };
    let outs = |c: usize| {
        let ps: BTreeSet<String> = map_parents(c)
            .iter()
            .map(|p| format!("#{}", p.node))
            .collect();
        ps.into_iter().collect::<Vec<_>>().join(", ")
    };
    let first = |c: usize| {
        classes[c]
            .children
            .first()
            .map_or(String::new(), |x| format!("#{}", id_of[*x]))
    };
    // The or of an OA or OS pair first, whichever rule came first.
    let (o, n) = if classes[a].kind == NodeKind::Or {
        (a, b)
    } else {
        (b, a)
    };
    match kind {
        ShareKind::OA => format!(
            "{} and {} are over the same events: one occurrence bit per event; the or output goes to {}, the and output to {}",
            label(o),
            label(n),
            outs(o),
            outs(n)
        ),
        ShareKind::SS => format!(
            "{} and {} start with the same event {}: delivered once, it starts both; outputs to {} and {}",
            label(a),
            label(b),
            first(a),
            outs(a),
            outs(b)
        ),
        ShareKind::OS => format!(
            "{} contains {}, the first event of {}: delivered once for both; the or output goes to {}, the seq output to {}",
            label(o),
            first(n),
            label(n),
            outs(o),
            outs(n)
        ),
        ShareKind::SO => String::new(),
    }
}

/// The most "not shared" reasons listed per node (a rule set may hold many alike rules).
const MAX_NOTES: usize = 3;

/// "not shared" notes for nodes that look alike but were kept apart: in a shared graph,
/// operators (and events, roots) whose scope or mapping differs; without sharing, twins.
fn not_shared_twins(
    share: bool,
    insts: &[Inst],
    class_of: &[usize],
    classes: &[Class],
    id_of: &[usize],
    settings: &[(Settings, Settings)],
    nodes: &mut [Node],
) {
    if !share {
        let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, inst) in insts.iter().enumerate() {
            groups
                .entry(share_key(inst))
                .or_default()
                .push(id_of[class_of[i]]);
        }
        for ids in groups.values().filter(|g| g.len() > 1) {
            for id in ids {
                let others: Vec<String> = ids
                    .iter()
                    .filter(|o| *o != id)
                    .map(|o| format!("#{o}"))
                    .collect();
                let more = others.len().saturating_sub(MAX_NOTES * 3);
                let mut list = others[..others.len() - more].join(", ");
                if more > 0 {
                    let _ = write!(list, " and {more} more");
                }
                nodes[*id]
                    .not_shared
                    .push(format!("not shared (--no-share): identical to {list}"));
            }
        }
        return;
    }
    // Predicates alike but apart: the same condition, its operands in another order that a
    // regex capture pins.
    let mut preds: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (c, class) in classes.iter().enumerate() {
        if matches!(class.kind, NodeKind::Predicate { .. }) {
            preds.entry(class.shape.as_str()).or_default().push(c);
        }
    }
    for group in preds.values().filter(|g| g.len() > 1) {
        for a in group {
            for b in group.iter().filter(|b| *b != a).take(MAX_NOTES) {
                nodes[id_of[*a]].not_shared.push(format!(
                    "not shared with #{}: the same condition with its operands in another order, which a regex capture keeps as written (a later operand may test a captured field)",
                    id_of[*b]
                ));
            }
        }
    }
    // Alike but apart: group by the form without the scope.
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (c, class) in classes.iter().enumerate() {
        if matches!(class.kind, NodeKind::Predicate { .. }) {
            continue;
        }
        let near = format!("{}\u{1}{}", class.kind.category(), class.shape);
        groups.entry(near).or_default().push(c);
    }
    for group in groups.values().filter(|g| g.len() > 1) {
        for a in group {
            let others = group.len() - 1;
            if others > MAX_NOTES {
                nodes[id_of[*a]].not_shared.push(format!(
                    "not shared with {others} alike nodes in other scopes; the first {MAX_NOTES}:"
                ));
            }
            // (Two alike in one virtual node are one node: nothing to say.)
            for b in group
                .iter()
                .filter(|b| *b != a && id_of[**b] != id_of[*a])
                .take(MAX_NOTES)
            {
                let (ca, cb) = (&classes[*a], &classes[*b]);
                let why = match (&ca.kind, &cb.kind) {
                    (NodeKind::Event { group: ga }, NodeKind::Event { group: gb }) => {
                        format!(
                            "different group mapping ([{}] vs [{}])",
                            mapping(ga),
                            mapping(gb)
                        )
                    }
                    (NodeKind::Root { .. }, _) => {
                        let (sa, ra) = &settings[ca.rule];
                        let (sb, rb) = &settings[cb.rule];
                        let all_a: Settings = sa.iter().chain(ra).cloned().collect();
                        let all_b: Settings = sb.iter().chain(rb).cloned().collect();
                        let diff = settings_diff(&all_a, &all_b);
                        let written = |c: &Class| {
                            c.canonical
                                .split(WRITTEN)
                                .nth(1)
                                .unwrap_or_default()
                                .to_string()
                        };
                        if diff.is_empty() && written(ca) != written(cb) {
                            "the same operators and settings, its rule written otherwise (conditions spelled apart, definitions in another order or unused, or an `and`'s parts in another order, which decides the match when one event completes two of its orders): a rule's state is kept by its rule as written, so each runs its own".to_string()
                        } else {
                            diff
                        }
                    }
                    _ => settings_diff(&settings[ca.rule].0, &settings[cb.rule].0),
                };
                let why = if why.is_empty() {
                    "different group mapping of its events".to_string()
                } else {
                    why
                };
                nodes[id_of[*a]].note_not_shared(format!("not shared with #{}: {why}", id_of[*b]));
            }
        }
    }
    // Alike but apart by a parameter: a closure or an absence over the same events in the
    // same scope, with another count, field or duration.
    let mut by_input: BTreeMap<(u8, &[usize], &str), Vec<usize>> = BTreeMap::new();
    for (c, class) in classes.iter().enumerate() {
        if matches!(
            class.kind,
            NodeKind::Repeat { .. } | NodeKind::Absent { .. }
        ) {
            by_input
                .entry((class.kind.category(), &class.children, &class.scope))
                .or_default()
                .push(c);
        }
    }
    for group in by_input.values().filter(|g| g.len() > 1) {
        for a in group {
            for b in group.iter().filter(|b| *b != a).take(MAX_NOTES) {
                let why = match (&classes[*a].kind, &classes[*b].kind) {
                    (
                        NodeKind::Repeat {
                            min: n1,
                            max: m1,
                            distinct: d1,
                        },
                        NodeKind::Repeat {
                            min: n2,
                            max: m2,
                            distinct: d2,
                        },
                    ) => {
                        if (n1, m1) != (n2, m2) {
                            format!(
                                "different count ({} vs {})",
                                counts(*n1, *m1),
                                counts(*n2, *m2)
                            )
                        } else if d1 == d2 {
                            continue;
                        } else {
                            let d = |d: &Option<String>| {
                                d.as_ref()
                                    .map_or("events".to_string(), |d| format!("distinct {d}"))
                            };
                            format!("counts other things ({} vs {})", d(d1), d(d2))
                        }
                    }
                    (NodeKind::Absent { for_: f1 }, NodeKind::Absent { for_: f2 }) if f1 != f2 => {
                        let d = |d: &Option<Duration>| d.map_or("-".to_string(), |d| d.to_string());
                        format!("different duration ({} vs {})", d(f1), d(f2))
                    }
                    (NodeKind::Absent { .. }, NodeKind::Absent { .. }) => {
                        // The same absence timed from another place ([`Builder::place_absences`]).
                        let (pa, pb) = (classes[*a].place, classes[*b].place);
                        if pa == pb {
                            format!("timed from other steps (both {pa})")
                        } else {
                            format!("timed from another place ({pa} vs {pb})")
                        }
                    }
                    _ => continue,
                };
                nodes[id_of[*a]].note_not_shared(format!("not shared with #{}: {why}", id_of[*b]));
            }
        }
    }
}

/// `--no-share`: notes on the nodes that sharing would have combined as similar (OA, SS,
/// OS), found by running the shared analysis over the same instances.
fn similar_unshared(
    insts: &[Inst],
    settings: &[(Settings, Settings)],
    node_of_inst: impl Fn(usize) -> NodeId,
    nodes: &mut [Node],
) {
    let (classes, class_of) = merge(insts, true);
    let sim = similar(&classes, settings);
    let mut members: Vec<Vec<NodeId>> = vec![Vec::new(); classes.len()];
    for (i, c) in class_of.iter().enumerate() {
        let id = node_of_inst(i);
        if !members[*c].contains(&id) {
            members[*c].push(id);
        }
    }
    for (kind, a, b) in &sim.relations {
        for (x, y) in [(*a, *b), (*b, *a)] {
            let mut others: Vec<String> = members[y]
                .iter()
                .take(MAX_NOTES)
                .map(|o| format!("#{o}"))
                .collect();
            if members[y].len() > MAX_NOTES {
                others.push(format!("{} more", members[y].len() - MAX_NOTES));
            }
            let note = format!(
                "not combined ({}) with {} (--no-share)",
                kind.name(),
                others.join(", ")
            );
            for id in &members[x] {
                nodes[*id].note_not_shared(note.clone());
            }
        }
    }
}

/// Why a node that has no counterpart in the rule set stands alone.
/// What separates, in a root's canonical form, a digest of its rule as written (its state's
/// key, [`Rule::canonical`]).
const WRITTEN: &str = " as written: ";

fn alone_reason(kind: &NodeKind) -> &'static str {
    match kind {
        NodeKind::Predicate { .. } => "no other event definition has this condition",
        NodeKind::Event { .. } => "no other use of this predicate with this group mapping",
        NodeKind::Seq | NodeKind::Or | NodeKind::And => {
            "no other node has this operator over the same events in the same scope, and no similar operator (OA, SS, OS) is there to combine with"
        }
        NodeKind::Repeat { .. } | NodeKind::Absent { .. } => {
            "no other node has this operator over the same events in the same scope"
        }
        NodeKind::Root { .. } => "no other rule has the same meaning",
        NodeKind::Virtual { .. } => "a virtual node is shared by construction",
    }
}

/// Similar operations found among the classes.
#[derive(Default)]
struct Similar {
    /// Connected groups of classes to combine (each sorted, at least two).
    components: Vec<Vec<usize>>,
    /// (kind, a, b): the pairs that justified the combination.
    relations: Vec<(ShareKind, usize, usize)>,
    /// (kind, a, b, why from a, why from b): pairs that were similar but not combined; each
    /// reason names its own node's value first (`different window (5m vs 10m)`).
    near_misses: Vec<(ShareKind, usize, usize, String, String)>,
}

fn find(uf: &mut [usize], mut x: usize) -> usize {
    while uf[x] != x {
        uf[x] = uf[uf[x]];
        x = uf[x];
    }
    x
}

/// Finds the OA, SS and OS pairs and decides, by the cost model, which are combined.
fn similar(classes: &[Class], settings: &[(Settings, Settings)]) -> Similar {
    let is_event = |c: &usize| matches!(classes[*c].kind, NodeKind::Event { .. });
    // OA: an or and an and over the same child set.
    let mut by_set: BTreeMap<Vec<usize>, (Vec<usize>, Vec<usize>)> = BTreeMap::new();
    // SS: seqs by first child; OS: ors by each child.
    let mut seq_by_first: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut or_by_child: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (c, class) in classes.iter().enumerate() {
        match class.kind {
            NodeKind::Or | NodeKind::And => {
                let set: Vec<usize> = class
                    .children
                    .iter()
                    .copied()
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                let entry = by_set.entry(set.clone()).or_default();
                if class.kind == NodeKind::Or {
                    entry.0.push(c);
                    for ch in set {
                        or_by_child.entry(ch).or_default().push(c);
                    }
                } else {
                    entry.1.push(c);
                }
            }
            NodeKind::Seq => {
                if let Some(first) = class.children.first() {
                    seq_by_first.entry(*first).or_default().push(c);
                }
            }
            _ => {}
        }
    }
    // Candidate groups: inside a group, `rel` says which pairs are similar.
    let differ = |a: usize, b: usize| classes[a].kind != classes[b].kind;
    let mut groups: Vec<(ShareKind, Vec<usize>)> = Vec::new();
    for (ors, ands) in by_set.values() {
        if !ors.is_empty() && !ands.is_empty() {
            groups.push((ShareKind::OA, ors.iter().chain(ands).copied().collect()));
        }
    }
    for (first, seqs) in &seq_by_first {
        if seqs.len() > 1 {
            groups.push((ShareKind::SS, seqs.clone()));
        }
        if let Some(ors) = or_by_child.get(first) {
            groups.push((ShareKind::OS, ors.iter().chain(seqs).copied().collect()));
        }
    }
    let mut out = Similar::default();
    let mut uf: Vec<usize> = (0..classes.len()).collect();
    let mut seen_near: BTreeSet<(ShareKind, usize, usize)> = BTreeSet::new();
    let mut seen: BTreeSet<(ShareKind, usize, usize)> = BTreeSet::new();
    for (kind, group) in groups {
        // SS: all pairs are similar, except identical seqs kept apart by their scopes
        // (reported as "not shared"); OA, OS: pairs of different operators.
        let rel = |a: usize, b: usize| match kind {
            ShareKind::SS => classes[a].canonical != classes[b].canonical,
            _ => differ(a, b),
        };
        // `rel` is "keys differ" (the canonical form for SS, the operator otherwise): the first
        // member related to `m` is the list's first, or else the first whose key differs from
        // it, found once per list, not once per member (rule sets may hold thousands alike).
        let first_rel = |list: &[usize], other: Option<usize>, m: usize| -> Option<usize> {
            let &first = list.first()?;
            if first != m && rel(first, m) {
                Some(first)
            } else {
                other.filter(|o| *o != m && rel(*o, m))
            }
        };
        let other_of = |list: &[usize]| -> Option<usize> {
            let &first = list.first()?;
            list.iter().copied().find(|c| rel(first, *c))
        };
        let (eligible, operator_fed): (Vec<usize>, Vec<usize>) = group
            .iter()
            .partition(|c| classes[**c].children.iter().all(is_event));
        // Cost model 1: operators fed by operators are not combined.
        let group_other = other_of(&group);
        for m in &operator_fed {
            if let Some(p) = first_rel(&group, group_other, *m)
                && seen_near.insert((kind, *m.min(&p), *m.max(&p)))
            {
                let why: String = "a child is an operator, not an event: no predicate delivery to save (its shared children are SO already)".into();
                out.near_misses.push((kind, *m, p, why.clone(), why));
            }
        }
        // Cost model 2: only within one scope (group_by, window, time). An `or` of events
        // without a window keeps no state its window could change: it joins the scope of
        // the group's first other operator whose scope is its own but for the window (one
        // scope only, so no windows are mixed).
        let sans_window = |c: usize| -> Vec<&(&str, String)> {
            settings[classes[c].rule]
                .0
                .iter()
                .filter(|(k, _)| *k != "within")
                .collect()
        };
        let windowless_or = |c: usize| {
            classes[c].kind == NodeKind::Or
                && settings[classes[c].rule]
                    .0
                    .iter()
                    .any(|(k, v)| *k == "within" && v == "-")
        };
        let mut buckets: Vec<Vec<usize>> = Vec::new();
        let mut bucket_of: HashMap<&str, usize> = HashMap::new();
        for &c in &eligible {
            let home = (kind != ShareKind::SS && windowless_or(c))
                .then(|| {
                    eligible.iter().copied().find(|&o| {
                        classes[o].kind != NodeKind::Or && sans_window(o) == sans_window(c)
                    })
                })
                .flatten();
            let scope = classes[home.unwrap_or(c)].scope.as_str();
            match bucket_of.get(scope) {
                Some(&b) => buckets[b].push(c),
                None => {
                    bucket_of.insert(scope, buckets.len());
                    buckets.push(vec![c]);
                }
            }
        }
        let others_of: Vec<Option<usize>> = buckets.iter().map(|b| other_of(b)).collect();
        for (bi, bucket) in buckets.iter().enumerate() {
            for m in bucket {
                // A star: each member joins the first member it is similar to.
                if let Some(p) = first_rel(bucket, others_of[bi], *m)
                    && seen.insert((kind, *m.min(&p), *m.max(&p)))
                {
                    let (ra, rb) = (find(&mut uf, p), find(&mut uf, *m));
                    if ra != rb {
                        uf[ra.max(rb)] = ra.min(rb);
                    }
                    out.relations.push((kind, p.min(*m), p.max(*m)));
                }
                // Alike in other scopes: say why not (a few, not every pair; among the first
                // `NEAR_SCAN` other scopes, so thousands of scopes stay linear).
                let others: Vec<usize> = buckets
                    .iter()
                    .enumerate()
                    .filter(|(bj, _)| *bj != bi)
                    .take(NEAR_SCAN)
                    .filter_map(|(bj, b)| first_rel(b, others_of[bj], *m))
                    .take(3)
                    .collect();
                for p in &others {
                    if seen_near.insert((kind, *m.min(p), *m.max(p))) {
                        let (sm, sp) =
                            (&settings[classes[*m].rule].0, &settings[classes[*p].rule].0);
                        out.near_misses.push((
                            kind,
                            *m,
                            *p,
                            settings_diff(sm, sp),
                            settings_diff(sp, sm),
                        ));
                    }
                }
            }
        }
    }
    let mut comps: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for (_, a, b) in &out.relations {
        for x in [*a, *b] {
            let r = find(&mut uf, x);
            comps.entry(r).or_default().insert(x);
        }
    }
    out.components = comps
        .into_values()
        .map(|v| v.into_iter().collect())
        .collect();
    out
}

/// How many other scopes [`similar`] looks through for "not combined" notes per node.
const NEAR_SCAN: usize = 64;

fn dot_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            // The label's own line breaks.
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push_str(&visible(&c.to_string()).replace('\\', "\\\\")),
            c => out.push(c),
        }
    }
    out
}

/// `s` with its control characters written as escapes (`\n`, `\r`, `\t`, `\u{7}`): a
/// condition's literal may hold them, and a dump must keep one node per line and never send
/// them raw to a terminal or to Graphviz.
fn visible(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

impl Graph {
    /// The operator nodes that consume a predicate (the hash table's entry; empty if none).
    pub fn consumers(&self, predicate: NodeId) -> &[NodeId] {
        self.index.get(&predicate).map_or(&[], Vec::as_slice)
    }

    /// A child reference as dumps write it: `#id`, or `#id:op(..)` for an output of a virtual
    /// node (which of its operations this parent reads).
    fn child_ref(&self, parent: NodeId, slot: usize, child: NodeId) -> String {
        match self.nodes.get(child).map(|c| &c.kind) {
            Some(NodeKind::Virtual { ops }) => {
                let addr = Address { node: parent, slot };
                match ops.iter().find(|o| o.parents.contains(&addr)) {
                    Some(o) => {
                        let ids: Vec<String> = o.children.iter().map(|c| format!("#{c}")).collect();
                        format!("#{child}:{}({})", o.op.name(), ids.join(", "))
                    }
                    None => format!("#{child}"),
                }
            }
            _ => format!("#{child}"),
        }
    }

    /// A node's form with its children written as `#id` (what the dumps show); the full text
    /// is [`Node::canonical`].
    pub fn label(&self, id: NodeId) -> String {
        let Some(n) = self.nodes.get(id) else {
            return String::new();
        };
        let refs: Vec<String> = n
            .children
            .iter()
            .enumerate()
            .map(|(slot, c)| self.child_ref(id, slot, *c))
            .collect();
        let first = refs.first().cloned().unwrap_or_default();
        match &n.kind {
            NodeKind::Predicate { .. } => visible(&n.canonical).into_owned(),
            NodeKind::Event { group } => {
                let mut s = format!("event({first})");
                if !group.is_empty() {
                    let _ = write!(s, " by [{}]", mapping(group));
                }
                s
            }
            NodeKind::Seq | NodeKind::Or | NodeKind::And => {
                format!("{}({})", n.kind.name(), refs.join(", "))
            }
            NodeKind::Repeat { min, max, distinct } => {
                let mut s = format!("{first}{}", counts(*min, *max));
                if let Some(d) = distinct {
                    let _ = write!(s, " distinct({d})");
                }
                s
            }
            NodeKind::Absent { for_ } => match for_ {
                Some(d) => format!("absent({first}) for {d}"),
                None => format!("absent({first})"),
            },
            NodeKind::Root { .. } => format!("rule({first})"),
            NodeKind::Virtual { ops } => ops
                .iter()
                .map(|o| {
                    let ids: Vec<String> = o.children.iter().map(|c| format!("#{c}")).collect();
                    format!("{}({})", o.op.name(), ids.join(", "))
                })
                .collect::<Vec<_>>()
                .join(" | "),
        }
    }

    /// The nodes shared by `kind`.
    pub fn shared(&self, kind: ShareKind) -> impl Iterator<Item = &Node> {
        self.nodes
            .iter()
            .filter(move |n| n.sharing.iter().any(|s| s.kind == kind))
    }

    fn rule_names(&self, rules: &[usize]) -> String {
        rules
            .iter()
            .filter_map(|r| self.rules.get(*r).map(|r| r.name.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The one-line summary of [`Graph::stats`].
    pub fn summary(&self) -> String {
        let s = &self.stats;
        let kinds: Vec<String> = [ShareKind::SO, ShareKind::OA, ShareKind::SS, ShareKind::OS]
            .iter()
            .map(|k| format!("{} {}", k.name(), s.by_kind.get(k).copied().unwrap_or(0)))
            .collect();
        let shared = self.nodes.iter().filter(|n| !n.sharing.is_empty()).count();
        format!(
            "{} rule{}, {}: {} nodes ({} without sharing), {shared} of them shared; predicates evaluated per event: at most {} ({} without sharing); predicate deliveries: {} ({} without sharing); shared nodes by kind: {}",
            self.rules.len(),
            if self.rules.len() == 1 { "" } else { "s" },
            if self.share { "shared" } else { "not shared" },
            s.nodes,
            s.nodes_unshared,
            s.predicates,
            s.predicates_unshared,
            s.deliveries,
            s.deliveries_unshared,
            kinds.join(", ")
        )
    }

    /// A readable dump: a summary, then every node in id order with its kind, form
    /// (children as `#id`), parents, rules, scope, and why it is or is not shared.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# {}", self.summary());
        for r in &self.rules {
            match r.root {
                Some(id) if r.unused.is_empty() => {
                    let _ = writeln!(s, "# rule {} -> #{id}", r.name);
                }
                Some(id) => {
                    let _ = writeln!(
                        s,
                        "# rule {} -> #{id} (not in the graph, never evaluated: {}, which the pattern does not use)",
                        r.name,
                        r.unused.join(", ")
                    );
                }
                None => {
                    let _ = writeln!(s, "# rule {} -> (no root)", r.name);
                }
            }
        }
        for n in &self.nodes {
            let _ = writeln!(s);
            let kinds: BTreeSet<&str> = n.sharing.iter().map(|x| x.kind.name()).collect();
            let tag = if kinds.is_empty() {
                String::new()
            } else {
                format!(" [{}]", kinds.into_iter().collect::<Vec<_>>().join("+"))
            };
            let _ = writeln!(s, "#{} {}{tag}  {}", n.id, n.kind.name(), self.label(n.id));
            match &n.kind {
                NodeKind::Predicate { uses } => {
                    let names: Vec<String> = uses
                        .iter()
                        .map(|u| {
                            let r = self.rules.get(u.rule).map_or("?", |r| r.name.as_str());
                            format!("{r}/{}", u.event)
                        })
                        .collect();
                    let _ = writeln!(s, "    uses: {}", names.join(", "));
                    let cons: Vec<String> = self
                        .consumers(n.id)
                        .iter()
                        .map(|c| format!("#{c}"))
                        .collect();
                    let _ = writeln!(s, "    consumers: {}", or_dash(&cons.join(" ")));
                }
                NodeKind::Virtual { ops } => {
                    let bits: Vec<String> = n.children.iter().map(|c| format!("#{c}")).collect();
                    let _ = writeln!(s, "    occurrence bits: {}", bits.join(" "));
                    for o in ops {
                        let ch: Vec<String> = o.children.iter().map(|c| format!("#{c}")).collect();
                        let pa: Vec<String> = o
                            .parents
                            .iter()
                            .map(|a| format!("#{}.{}", a.node, a.slot))
                            .collect();
                        let _ = writeln!(
                            s,
                            "    {}({}) -> {}",
                            o.op.name(),
                            ch.join(", "),
                            or_dash(&pa.join(" "))
                        );
                    }
                }
                _ => {}
            }
            if !matches!(n.kind, NodeKind::Predicate { .. }) {
                let ps: Vec<String> = n.parents.iter().map(|p| format!("#{p}")).collect();
                let _ = writeln!(s, "    parents: {}", or_dash(&ps.join(" ")));
            }
            let _ = writeln!(s, "    rules: {}", self.rule_names(&n.rules));
            if !n.scope.is_empty() {
                let _ = writeln!(s, "    scope: {}", n.scope);
            }
            if matches!(n.kind, NodeKind::Root { .. }) {
                let _ = writeln!(s, "    canonical: {}", visible(&n.canonical));
            }
            for sh in &n.sharing {
                let _ = writeln!(s, "    shared {}: {}", sh.kind.name(), sh.reason);
            }
            for ns in &n.not_shared {
                let _ = writeln!(s, "    {ns}");
            }
        }
        s
    }

    /// Graphviz: edges go from a child to its parents (the direction events flow); shared
    /// nodes are filled and double-bordered, with their sharing kinds in the label.
    pub fn to_dot(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "digraph cepheus {{");
        let _ = writeln!(s, "  label=\"{}\";", dot_escape(&self.summary()));
        let _ = writeln!(s, "  labelloc=t; rankdir=BT;");
        let _ = writeln!(
            s,
            "  node [shape=box, fontname=\"monospace\", fontsize=10];\n  edge [fontname=\"monospace\", fontsize=9];"
        );
        for n in &self.nodes {
            let kinds: BTreeSet<&str> = n.sharing.iter().map(|x| x.kind.name()).collect();
            let kinds: Vec<&str> = kinds.into_iter().collect();
            let mut label = format!("#{} {}", n.id, n.kind.name());
            if !kinds.is_empty() {
                let _ = write!(label, " [{}]", kinds.join("+"));
            }
            label.push('\n');
            label.push_str(&self.label(n.id));
            // Roots name their rules; a shared node names the rules it serves too.
            if matches!(n.kind, NodeKind::Root { .. }) || n.is_shared() {
                let _ = write!(label, "\nrules: {}", self.rule_names(&n.rules));
            }
            // Why it is or is not shared: the tooltip (SVG, and most viewers).
            let why: Vec<String> = n
                .sharing
                .iter()
                .map(|x| format!("shared {}: {}", x.kind.name(), x.reason))
                .chain(n.not_shared.iter().cloned())
                .collect();
            let shape = match n.kind {
                NodeKind::Predicate { .. } => "ellipse",
                NodeKind::Event { .. } => "box",
                NodeKind::Root { .. } => "house",
                NodeKind::Virtual { .. } => "octagon",
                _ => "box",
            };
            let style = match (n.is_shared(), &n.kind) {
                (true, NodeKind::Virtual { .. }) => {
                    ", style=\"filled,bold\", fillcolor=\"#ffd27f\", peripheries=2"
                }
                (true, _) => ", style=filled, fillcolor=\"#a6d8ff\", peripheries=2",
                (false, _) => "",
            };
            let _ = writeln!(
                s,
                "  n{} [label=\"{}\", tooltip=\"{}\", shape={shape}{style}];",
                n.id,
                dot_escape(&label),
                dot_escape(&why.join("\n"))
            );
        }
        for n in &self.nodes {
            for (slot, c) in n.children.iter().enumerate() {
                let edge_label = match &self.nodes.get(*c).map(|c| &c.kind) {
                    Some(NodeKind::Virtual { .. }) => {
                        let r = self.child_ref(n.id, slot, *c);
                        let op = r.split_once(':').map_or("", |(_, op)| op);
                        Some(format!(" [label=\"{}\"]", dot_escape(op)))
                    }
                    _ => None,
                };
                let _ = writeln!(s, "  n{c} -> n{}{};", n.id, edge_label.unwrap_or_default());
            }
        }
        let _ = writeln!(s, "}}");
        s
    }
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::compile_str;

    fn rules(text: &str) -> RuleSet {
        let c = compile_str("t.toml", text);
        match c.rules {
            Some(r) => r,
            None => panic!("{:?}", c.diagnostics),
        }
    }

    #[test]
    fn identical_predicates_are_one_node_only_when_shared() {
        let rs = rules(
            r#"
[[rule]]
name = "a"
severity = "low"
events.x = 'syslog and app == "x"'
pattern = "x"
[[rule]]
name = "b"
severity = "low"
events.y = 'app == "x" and syslog'
pattern = "y{3,} within 1m"
"#,
        );
        let g = build(&rs, true);
        assert_eq!(g.stats.predicates, 1);
        assert_eq!(g.stats.predicates_unshared, 2);
        let u = build(&rs, false);
        assert_eq!(u.stats.predicates, 2);
        assert_eq!(u.stats.nodes, u.stats.nodes_unshared);
        assert!(u.nodes.iter().all(|n| n.sharing.is_empty()));
        // ids are topological
        for n in &g.nodes {
            assert!(n.children.iter().all(|c| *c < n.id), "{n:?}");
        }
    }
}
