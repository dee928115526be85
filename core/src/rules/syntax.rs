//! Lexer, syntax tree and recursive-descent parser of the condition and pattern languages.
//!
//! Spans are byte offsets inside the expression string; the caller maps them into the file.

use std::net::IpAddr;
use std::ops::Range;

use ipnet::IpNet;

use crate::event::Source;
use crate::rules::ir::{ArithOp, CmpOp, StrOp};
use crate::time::Duration;

/// A byte range inside an expression string.
pub type Span = Range<usize>;

/// A syntax error: where and what, with an optional hint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntaxError {
    /// Where, inside the expression string.
    pub span: Span,
    /// What.
    pub message: String,
    /// How to fix it.
    pub help: Option<String>,
}

/// The largest count a closure may ask for (`a{n,m}`): each counted event is held in memory
/// per group while the window lasts.
pub const MAX_COUNT: u32 = 100_000;

/// The deepest nesting a condition or pattern may have (parentheses, `not`, `seq(..)`,
/// operator chains, postfix counts and windows): far beyond what a rule needs, and what keeps a
/// hostile rule file from exhausting the stack of the parser and of every pass after it.
pub const MAX_NESTING: u32 = 100;

/// A syntax error with the hint that says how to fix it (every error has one).
fn err<T>(
    span: Span,
    message: impl Into<String>,
    help: impl Into<String>,
) -> Result<T, SyntaxError> {
    Err(SyntaxError {
        span,
        message: message.into(),
        help: Some(help.into()),
    })
}

const IP_HELP: &str = "an IPv4 address is four numbers from 0 to 255 (`10.0.0.3`), an IPv6 one \
     is written as in `2001:db8::1`; quote anything else to compare it as text";

/// A token kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// A name: field, keyword, event name.
    Ident(String),
    /// `"..."` (only `\"` is an escape; backslashes are kept as written).
    Str(String),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// `5s`, `1h30m`.
    Dur(Duration),
    /// An IP address.
    Ip(IpAddr),
    /// A network `10.0.0.0/8`.
    Cidr(IpNet),
    /// Punctuation or operator.
    Punct(&'static str),
    /// End of input.
    Eof,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Str(_) => "a string".into(),
            Tok::Int(i) => format!("`{i}`"),
            Tok::Float(x) => format!("`{x}`"),
            Tok::Dur(d) => format!("`{d}`"),
            Tok::Ip(ip) => format!("`{ip}`"),
            Tok::Cidr(n) => format!("`{n}`"),
            Tok::Punct(p) => format!("`{p}`"),
            Tok::Eof => "the end".into(),
        }
    }
}

/// A token with its span; strings also keep the offset of each content byte.
#[derive(Clone, Debug)]
pub struct Token {
    /// The token.
    pub tok: Tok,
    /// Where.
    pub span: Span,
    /// For strings: the offset in the input of each byte of the content (and one past).
    pub offsets: Vec<usize>,
}

const PUNCTS: &[&str] = &[
    "==", "!=", "<=", ">=", "=~", "!~", "..", "(", ")", "[", "]", "{", "}", ",", "<", ">", "+",
    "-", "*", "/", "%",
];

/// Splits an expression into tokens.
pub fn lex(src: &str) -> Result<Vec<Token>, SyntaxError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c == b'"' || c == b'\'' {
            let q = c;
            let mut text = String::new();
            let mut offsets = Vec::new();
            // Whether it holds an escaped quote (`\"`), which a writer may have meant as its end.
            let mut escaped_quote: Option<usize> = None;
            i += 1;
            loop {
                let Some(&d) = b.get(i) else {
                    let q = q as char;
                    let help = if escaped_quote.is_some() {
                        format!(
                            "`\\{q}` inside a string is a quote, not its end, so a string cannot end in a single backslash (a regex matching text that ends in one writes it escaped, `\\\\`: `msg =~ {q}C:\\\\{q}`, or `msg =~ {q}\\\\${q}` for any such text)"
                        )
                    } else {
                        format!("close it with {q}")
                    };
                    // At the escaped quote the writer most likely meant as the end, if any.
                    return Err(SyntaxError {
                        span: escaped_quote.map_or(start..src.len(), |at| at..at + 2),
                        message: "unterminated string".into(),
                        help: Some(help),
                    });
                };
                if d == q {
                    offsets.push(i);
                    i += 1;
                    break;
                }
                // A backslash pair is kept as written and escapes nothing, so a regex may end
                // in an escaped backslash (`"C:\\"`) as in any regex tool.
                if d == b'\\' && b.get(i + 1) == Some(&b'\\') {
                    text.push_str("\\\\");
                    offsets.extend([i, i + 1]);
                    i += 2;
                    continue;
                }
                if d == b'\\' && b.get(i + 1) == Some(&q) {
                    escaped_quote.get_or_insert(i);
                    text.push(q as char);
                    offsets.push(i);
                    i += 2;
                    continue;
                }
                let ch = src[i..].chars().next().unwrap_or('\u{fffd}');
                text.push(ch);
                offsets.extend((0..ch.len_utf8()).map(|k| i + k));
                i += ch.len_utf8();
            }
            out.push(Token {
                tok: Tok::Str(text),
                span: start..i,
                offsets,
            });
            continue;
        }
        // a word: identifiers, numbers, durations, addresses
        if c.is_ascii_alphanumeric() || c == b'_' || c == b':' {
            let mut j = i;
            while j < b.len() {
                let d = b[j];
                let ok = d.is_ascii_alphanumeric()
                    || d == b'_'
                    || d == b':'
                    || d == b'@'
                    || (d == b'.' && b.get(j + 1) != Some(&b'.') && !(j > i && b[j - 1] == b'.'));
                if !ok {
                    break;
                }
                j += 1;
            }
            let mut word = &src[i..j];
            // sd.<id>.<param> may contain `-`
            if word.starts_with("sd.") {
                while j < b.len()
                    && (b[j].is_ascii_alphanumeric() || matches!(b[j], b'_' | b'.' | b'@' | b'-'))
                {
                    j += 1;
                }
                word = &src[i..j];
            }
            // optional /prefix for addresses
            let looks_ip =
                word.contains(':') || (c.is_ascii_digit() && word.matches('.').count() == 3);
            if looks_ip {
                let mut k = j;
                if b.get(k) == Some(&b'/') {
                    k += 1;
                    while k < b.len() && b[k].is_ascii_digit() {
                        k += 1;
                    }
                }
                let text = &src[i..k];
                let tok = if k > j {
                    match text.parse::<IpNet>() {
                        Ok(n) => Tok::Cidr(n),
                        Err(_) => {
                            return err(
                                i..k,
                                format!("`{text}` is not a valid network (CIDR)"),
                                "a network is an address and a prefix length: `10.0.0.0/8` \
                                 (0 to 32 for IPv4), `2001:db8::/32` (0 to 128 for IPv6)",
                            );
                        }
                    }
                } else {
                    match text.parse::<IpAddr>() {
                        Ok(a) => Tok::Ip(a),
                        Err(_) => {
                            return err(
                                i..k,
                                format!("`{text}` is not a valid IP address"),
                                IP_HELP,
                            );
                        }
                    }
                };
                out.push(Token {
                    tok,
                    span: i..k,
                    offsets: Vec::new(),
                });
                i = k;
                continue;
            }
            // `5 m`, `2 hours`: a number, spaces and a unit are one duration, as in
            // `forget_after = "5 m"` and every other duration the agent reads (the unit must
            // end there, and be one `Duration::parse` takes: `5 and` stays a number).
            if word.bytes().all(|d| d.is_ascii_digit()) {
                let mut k = j;
                while k < b.len() && (b[k] == b' ' || b[k] == b'\t') {
                    k += 1;
                }
                let unit_end = (k..b.len())
                    .find(|&x| !b[x].is_ascii_alphabetic())
                    .unwrap_or(b.len());
                let unit = &src[k..unit_end];
                // (`5 m..10m`: a range's `..` ends the unit too.)
                let range = b.get(unit_end..unit_end + 2) == Some(b"..".as_slice());
                let ends = range
                    || b.get(unit_end)
                        .is_none_or(|&x| !(x.is_ascii_alphanumeric() || x == b'_' || x == b'.'));
                if k > j
                    && ends
                    && !unit.is_empty()
                    && let Ok(d) = Duration::parse(&format!("{word}{unit}"))
                {
                    out.push(Token {
                        tok: Tok::Dur(d),
                        span: i..unit_end,
                        offsets: Vec::new(),
                    });
                    i = unit_end;
                    continue;
                }
            }
            let tok = if c.is_ascii_digit() {
                if word.bytes().all(|d| d.is_ascii_digit()) {
                    match word.parse::<i64>() {
                        Ok(n) => Tok::Int(n),
                        Err(_) => {
                            return err(
                                i..j,
                                format!("`{word}` is too large for an integer"),
                                "integers are 64-bit: at most 9223372036854775807",
                            );
                        }
                    }
                } else if word.contains('.')
                    && word.bytes().all(|d| d.is_ascii_digit() || d == b'.')
                {
                    match word.parse::<f64>() {
                        Ok(x) => Tok::Float(x),
                        Err(_) => {
                            return err(
                                i..j,
                                format!("`{word}` is not a number"),
                                if word.matches('.').count() == 2 {
                                    "write a number with one decimal point, e.g. `1.5`; an IPv4 address has four parts, e.g. `10.0.0.1`"
                                } else {
                                    "write a number with one decimal point, e.g. `1.5`, or an IPv4 address, e.g. `10.0.0.1`"
                                },
                            );
                        }
                    }
                } else {
                    match Duration::parse(word) {
                        Ok(d) => Tok::Dur(d),
                        Err(e) => {
                            return Err(SyntaxError {
                                span: i..j,
                                message: format!("`{word}` is not a number or a duration"),
                                help: Some(e),
                            });
                        }
                    }
                }
            } else {
                if word.contains(':') {
                    return err(i..j, format!("`{word}` is not a valid IP address"), IP_HELP);
                }
                Tok::Ident(word.to_string())
            };
            out.push(Token {
                tok,
                span: i..j,
                offsets: Vec::new(),
            });
            i = j;
            continue;
        }
        let rest = &src[i..];
        if let Some(p) = PUNCTS.iter().find(|p| rest.starts_with(**p)) {
            out.push(Token {
                tok: Tok::Punct(p),
                span: i..i + p.len(),
                offsets: Vec::new(),
            });
            i += p.len();
            continue;
        }
        let ch = rest.chars().next().unwrap_or('?');
        let help = match ch {
            '=' => Some("compare with `==`".to_string()),
            '&' => Some("write `and`".to_string()),
            '|' => Some("write `or`".to_string()),
            '!' => Some("write `not`, `!=` or `!~`".to_string()),
            '~' => Some("match a regex with `=~` (`!~`: does not match)".to_string()),
            c if !c.is_ascii() => Some(
                "names of fields, events and operators are ASCII letters, digits and `_`; other text goes in quotes".to_string(),
            ),
            _ => None,
        };
        return Err(SyntaxError {
            span: i..i + ch.len_utf8(),
            message: format!("unexpected character `{ch}`"),
            help,
        });
    }
    out.push(Token {
        tok: Tok::Eof,
        span: src.len()..src.len(),
        offsets: Vec::new(),
    });
    Ok(out)
}

/// A literal in a condition.
#[derive(Clone, Debug, PartialEq)]
pub enum Lit {
    /// `"text"`
    Str(String),
    /// `3`
    Int(i64),
    /// `1.5`
    Float(f64),
    /// `true` / `false`
    Bool(bool),
    /// `10.0.0.1`
    Ip(IpAddr),
    /// `10.0.0.0/8`
    Cidr(IpNet),
    /// `5s`
    Dur(Duration),
}

/// A value expression.
#[derive(Clone, Debug, PartialEq)]
pub enum ExprAst {
    /// A literal.
    Lit(Lit, Span),
    /// A field name.
    Field(String, Span),
    /// `a + b` etc.; the span is the operator's.
    Arith(ArithOp, Box<ExprAst>, Box<ExprAst>, Span),
    /// `-a`
    Neg(Box<ExprAst>, Span),
    /// `name(args)`: a function (`hour(time)`); the span is the whole call.
    Call(String, Vec<ExprAst>, Span),
}

impl ExprAst {
    /// The whole span of the expression.
    pub fn span(&self) -> Span {
        match self {
            ExprAst::Lit(_, s) | ExprAst::Field(_, s) => s.clone(),
            ExprAst::Arith(_, a, b, _) => a.span().start..b.span().end,
            ExprAst::Neg(e, s) => s.start..e.span().end,
            ExprAst::Call(_, _, s) => s.clone(),
        }
    }
}

/// A condition.
#[derive(Clone, Debug, PartialEq)]
pub enum CondAst {
    /// `a or b or c`
    Or(Vec<CondAst>),
    /// `a and b and c`
    And(Vec<CondAst>),
    /// `not a`
    Not(Box<CondAst>, Span),
    /// `syslog` / `flow`
    Source(Source, Span),
    /// `true` / `false`
    Bool(bool, Span),
    /// `a == b` (span: the operator)
    Cmp(CmpOp, ExprAst, ExprAst, Span),
    /// `a contains b` (span: the operator)
    Str(StrOp, ExprAst, ExprAst, Span),
    /// `a =~ "re"`: the regex text, its span, and the input offset of each of its bytes.
    Regex {
        /// The string the regex runs on.
        lhs: ExprAst,
        /// `!~`
        negate: bool,
        /// The regex as written.
        re: String,
        /// Span of the regex string literal.
        re_span: Span,
        /// Input offset of each byte of `re` (and one past the end).
        offsets: Vec<usize>,
    },
    /// `a in [..]` or `a in 10.0.0.0/8` (span: `in`)
    In(ExprAst, Vec<ExprAst>, Span),
    /// `exists(field)`: the name and its span.
    Exists(String, Span),
    /// A bare value where a condition was expected (a checker error).
    Bare(ExprAst),
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    /// Nesting of what is being parsed (see [`MAX_NESTING`]).
    depth: u32,
}

impl Parser {
    /// One level deeper, at `span`; an error past [`MAX_NESTING`].
    fn enter(&mut self, span: &Span) -> Result<(), SyntaxError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(SyntaxError {
                span: span.clone(),
                message: format!("nested more than {MAX_NESTING} levels deep"),
                help: Some("split it into several event definitions or rules".into()),
            });
        }
        Ok(())
    }

    /// Back up `levels` levels.
    fn leave(&mut self, levels: u32) {
        self.depth = self.depth.saturating_sub(levels);
    }

    fn peek(&self) -> &Token {
        &self.toks[self.pos.min(self.toks.len() - 1)]
    }

    fn bump(&mut self) -> Token {
        let t = self.peek().clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn is_punct(&self, p: &str) -> bool {
        matches!(&self.peek().tok, Tok::Punct(q) if *q == p)
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(&self.peek().tok, Tok::Ident(q) if q == w)
    }

    fn expect_punct(&mut self, p: &str) -> Result<Span, SyntaxError> {
        if self.is_punct(p) {
            Ok(self.bump().span)
        } else {
            let t = self.peek();
            err(
                t.span.clone(),
                format!("expected `{p}`, found {}", t.tok.describe()),
                match p {
                    ")" => "close the parenthesis opened before it".to_string(),
                    "(" => "an operator's operands go in parentheses: `seq(a, b)`, `exists(host)`"
                        .to_string(),
                    _ => format!("write `{p}` here"),
                },
            )
        }
    }

    fn end(&self) -> Result<(), SyntaxError> {
        let t = self.peek();
        if t.tok == Tok::Eof {
            Ok(())
        } else {
            // `app not in [...]`, `msg not contains "x"`: the negation goes first.
            if let Tok::Ident(w) = &t.tok
                && w == "not"
            {
                return err(
                    t.span.clone(),
                    "unexpected `not` here",
                    "a negation goes before the test: `not (app in [\"a\", \"b\"])`, `not (msg contains \"x\")`; `!=` and `!~` negate one comparison",
                );
            }
            // A misspelt operator word (`contain`) reads as a second expression.
            if let Tok::Ident(w) = &t.tok
                && let Some(near) = crate::rules::diag::did_you_mean(
                    w,
                    [
                        "contains",
                        "starts_with",
                        "ends_with",
                        "and",
                        "or",
                        "not",
                        "in",
                    ],
                )
            {
                return err(
                    t.span.clone(),
                    format!("unexpected {} here", t.tok.describe()),
                    format!("did you mean `{near}`?"),
                );
            }
            let help = if matches!(t.tok, Tok::Ident(_) | Tok::Str(_)) {
                "combine conditions with `and` or `or`"
            } else {
                "nothing may follow a whole expression here: remove it, or join two with `and` or `or`"
            };
            err(
                t.span.clone(),
                format!("unexpected {} here", t.tok.describe()),
                help,
            )
        }
    }

    // ---- conditions ----

    fn or(&mut self) -> Result<CondAst, SyntaxError> {
        let at = self.peek().span.clone();
        self.enter(&at)?;
        let mut parts = vec![self.and()?];
        while self.is_word("or") {
            self.bump();
            parts.push(self.and()?);
        }
        self.leave(1);
        Ok(if parts.len() == 1 {
            parts.pop().unwrap_or(CondAst::Bool(true, 0..0))
        } else {
            CondAst::Or(parts)
        })
    }

    fn and(&mut self) -> Result<CondAst, SyntaxError> {
        let mut parts = vec![self.not()?];
        while self.is_word("and") {
            self.bump();
            parts.push(self.not()?);
        }
        Ok(if parts.len() == 1 {
            parts.pop().unwrap_or(CondAst::Bool(true, 0..0))
        } else {
            CondAst::And(parts)
        })
    }

    fn not(&mut self) -> Result<CondAst, SyntaxError> {
        if self.is_word("not") {
            let s = self.bump().span;
            self.enter(&s)?;
            let c = self.not()?;
            self.leave(1);
            return Ok(CondAst::Not(Box::new(c), s));
        }
        self.atom_cond()
    }

    fn atom_cond(&mut self) -> Result<CondAst, SyntaxError> {
        let t = self.peek().clone();
        match &t.tok {
            Tok::Punct("(") => {
                // a parenthesised condition, or an arithmetic expression `(a + b) > 3`
                let save = self.pos;
                self.bump();
                let inner = self.or()?;
                if !self.is_punct(")") {
                    // Not closed here: an arithmetic `(` would be read below; if that fails
                    // too, the unclosed `(` is the error, where its `)` was expected (not at
                    // the first operator the arithmetic reading trips on).
                    let here = self.peek().clone();
                    self.pos = save;
                    return self.comparison().or_else(|_| {
                        err(
                            here.span.clone(),
                            format!(
                                "expected `)` to close an earlier `(`, found {}",
                                here.tok.describe()
                            ),
                            "add `)` after the last condition of the group",
                        )
                    });
                }
                {
                    self.bump();
                    let after_is_op = matches!(&self.peek().tok, Tok::Punct(p) if ["==","!=","<","<=",">",">=","+","-","*","/","%","=~","!~"].contains(p))
                        || self.is_word("contains")
                        || self.is_word("starts_with")
                        || self.is_word("ends_with")
                        || self.is_word("in");
                    if !after_is_op {
                        return Ok(inner);
                    }
                }
                self.pos = save;
                self.comparison()
            }
            Tok::Ident(w) if w == "syslog" || w == "flow" => {
                self.bump();
                Ok(CondAst::Source(
                    if w == "syslog" {
                        Source::Syslog
                    } else {
                        Source::Flow
                    },
                    t.span.clone(),
                ))
            }
            Tok::Ident(w) if w == "exists" => {
                self.bump();
                self.expect_punct("(")?;
                let f = self.bump();
                let Tok::Ident(name) = f.tok else {
                    return err(
                        f.span,
                        format!("expected a field name, found {}", f.tok.describe()),
                        "write a field's name, unquoted: `exists(sd.origin.ip)`",
                    );
                };
                self.expect_punct(")")?;
                Ok(CondAst::Exists(name, f.span))
            }
            Tok::Ident(w) if (w == "true" || w == "false") && !self.next_is_operator() => {
                self.bump();
                Ok(CondAst::Bool(w == "true", t.span.clone()))
            }
            _ => self.comparison(),
        }
    }

    fn next_is_operator(&self) -> bool {
        match self.toks.get(self.pos + 1).map(|t| &t.tok) {
            Some(Tok::Punct(p)) => ["==", "!=", "<", "<=", ">", ">=", "=~", "!~"].contains(p),
            Some(Tok::Ident(w)) => {
                ["contains", "starts_with", "ends_with", "in"].contains(&w.as_str())
            }
            _ => false,
        }
    }

    fn comparison(&mut self) -> Result<CondAst, SyntaxError> {
        let lhs = self.additive()?;
        let t = self.peek().clone();
        let cmp = match &t.tok {
            Tok::Punct("==") => Some(CmpOp::Eq),
            Tok::Punct("!=") => Some(CmpOp::Ne),
            Tok::Punct("<") => Some(CmpOp::Lt),
            Tok::Punct("<=") => Some(CmpOp::Le),
            Tok::Punct(">") => Some(CmpOp::Gt),
            Tok::Punct(">=") => Some(CmpOp::Ge),
            _ => None,
        };
        if let Some(op) = cmp {
            self.bump();
            let rhs = self.additive()?;
            return Ok(CondAst::Cmp(op, lhs, rhs, t.span));
        }
        let sop = match &t.tok {
            Tok::Ident(w) if w == "contains" => Some(StrOp::Contains),
            Tok::Ident(w) if w == "starts_with" => Some(StrOp::StartsWith),
            Tok::Ident(w) if w == "ends_with" => Some(StrOp::EndsWith),
            _ => None,
        };
        if let Some(op) = sop {
            self.bump();
            let rhs = self.additive()?;
            return Ok(CondAst::Str(op, lhs, rhs, t.span));
        }
        match &t.tok {
            Tok::Punct(p @ ("=~" | "!~")) => {
                let negate = *p == "!~";
                self.bump();
                let r = self.bump();
                let Tok::Str(re) = r.tok else {
                    return Err(SyntaxError {
                        span: r.span,
                        message: format!(
                            "expected a regex string after `{p}`, found {}",
                            r.tok.describe()
                        ),
                        help: Some("write the regex in double quotes: msg =~ \"^Failed\"".into()),
                    });
                };
                Ok(CondAst::Regex {
                    lhs,
                    negate,
                    re,
                    re_span: r.span,
                    offsets: r.offsets,
                })
            }
            Tok::Ident(w) if w == "in" => {
                self.bump();
                if self.is_punct("[") {
                    self.bump();
                    let mut items = Vec::new();
                    while !self.is_punct("]") {
                        items.push(self.unary()?);
                        if self.is_punct(",") {
                            self.bump();
                        } else if !self.is_punct("]") {
                            let t = self.peek();
                            return err(
                                t.span.clone(),
                                format!("expected `,` or `]`, found {}", t.tok.describe()),
                                "separate the items with `,` and close the list with `]`: \
                                 `dport in [22, 80]`",
                            );
                        }
                    }
                    self.bump();
                    Ok(CondAst::In(lhs, items, t.span))
                } else if self.is_punct("(") {
                    let p = self.peek();
                    err(
                        p.span.clone(),
                        "a list is written in square brackets",
                        "`app in [\"sshd\", \"dropbear\"]`",
                    )
                } else {
                    let item = self.unary()?;
                    // Without brackets, `in` takes a network (or one address): `msg in "x"`
                    // would read as a substring test and mean `==`.
                    if let ExprAst::Lit(l, sp) = &item
                        && !matches!(l, Lit::Cidr(_) | Lit::Ip(_))
                    {
                        let hint = match l {
                            Lit::Str(_) => {
                                "`in` takes a list (`app in [\"sshd\", \"dropbear\"]`) or a network (`src in 10.0.0.0/8`); for one value write `==`, for text inside a field a regex: `msg =~ \"Failed password\"`"
                            }
                            _ => {
                                "`in` takes a list (`dport in [22, 2222]`) or a network (`src in 10.0.0.0/8`); for one value write `==`"
                            }
                        };
                        return err(
                            sp.clone(),
                            "`in` without square brackets takes a network, such as `10.0.0.0/8`",
                            hint,
                        );
                    }
                    Ok(CondAst::In(lhs, vec![item], t.span))
                }
            }
            _ => Ok(CondAst::Bare(lhs)),
        }
    }

    fn additive(&mut self) -> Result<ExprAst, SyntaxError> {
        let mut lhs = self.multiplicative()?;
        let mut chain = 0;
        loop {
            let t = self.peek().clone();
            let op = match t.tok {
                Tok::Punct("+") => ArithOp::Add,
                Tok::Punct("-") => ArithOp::Sub,
                _ => {
                    self.leave(chain);
                    return Ok(lhs);
                }
            };
            self.bump();
            // Each operator nests the chain one level deeper.
            self.enter(&t.span)?;
            chain += 1;
            let rhs = self.multiplicative()?;
            lhs = ExprAst::Arith(op, Box::new(lhs), Box::new(rhs), t.span);
        }
    }

    fn multiplicative(&mut self) -> Result<ExprAst, SyntaxError> {
        let mut lhs = self.unary()?;
        let mut chain = 0;
        loop {
            let t = self.peek().clone();
            let op = match t.tok {
                Tok::Punct("*") => ArithOp::Mul,
                Tok::Punct("/") => ArithOp::Div,
                Tok::Punct("%") => ArithOp::Rem,
                _ => {
                    self.leave(chain);
                    return Ok(lhs);
                }
            };
            self.bump();
            // Each operator nests the chain one level deeper.
            self.enter(&t.span)?;
            chain += 1;
            let rhs = self.unary()?;
            lhs = ExprAst::Arith(op, Box::new(lhs), Box::new(rhs), t.span);
        }
    }

    fn unary(&mut self) -> Result<ExprAst, SyntaxError> {
        if self.is_punct("-") {
            let s = self.bump().span;
            self.enter(&s)?;
            let e = self.unary()?;
            self.leave(1);
            return Ok(ExprAst::Neg(Box::new(e), s));
        }
        let t = self.bump();
        let s = t.span.clone();
        Ok(match t.tok {
            Tok::Str(v) => ExprAst::Lit(Lit::Str(v), s),
            Tok::Int(v) => ExprAst::Lit(Lit::Int(v), s),
            Tok::Float(v) => ExprAst::Lit(Lit::Float(v), s),
            Tok::Dur(v) => ExprAst::Lit(Lit::Dur(v), s),
            Tok::Ip(v) => ExprAst::Lit(Lit::Ip(v), s),
            Tok::Cidr(v) => ExprAst::Lit(Lit::Cidr(v), s),
            Tok::Ident(w) if w == "true" => ExprAst::Lit(Lit::Bool(true), s),
            Tok::Ident(w) if w == "false" => ExprAst::Lit(Lit::Bool(false), s),
            Tok::Ident(w)
                if [
                    "and",
                    "or",
                    "not",
                    "in",
                    "contains",
                    "starts_with",
                    "ends_with",
                ]
                .contains(&w.as_str()) =>
            {
                return err(
                    s,
                    format!("expected a value, found the keyword `{w}`"),
                    "give the comparison a value before it: `app == \"sshd\"`",
                );
            }
            Tok::Ident(w) if self.is_punct("(") => {
                // A function call: `hour(time)`, `weekday(time, "Europe/Paris")`.
                self.bump();
                self.enter(&s)?;
                let mut args = Vec::new();
                while !self.is_punct(")") {
                    args.push(self.additive()?);
                    if self.is_punct(",") {
                        self.bump();
                    } else if !self.is_punct(")") {
                        let t = self.peek();
                        return err(
                            t.span.clone(),
                            format!("expected `,` or `)`, found {}", t.tok.describe()),
                            format!("separate the arguments with `,`: `{w}(time, \"UTC\")`"),
                        );
                    }
                }
                let close = self.bump().span;
                self.leave(1);
                ExprAst::Call(w, args, s.start..close.end)
            }
            Tok::Ident(w) => ExprAst::Field(w, s),
            Tok::Punct("(") => {
                self.enter(&s)?;
                let e = self.additive()?;
                self.expect_punct(")")?;
                self.leave(1);
                e
            }
            other => {
                let help = if other == Tok::Eof {
                    "the condition ends after an operator: give it a value, e.g. `app == \"sshd\"`"
                } else {
                    "a value is a quoted string, a number, a duration, an address or a field name"
                };
                return err(
                    s,
                    format!("expected a value, found {}", other.describe()),
                    help,
                );
            }
        })
    }

    // ---- patterns ----

    fn pattern(&mut self) -> Result<PatAst, SyntaxError> {
        let at = self.peek().span.clone();
        let start = at.start;
        self.enter(&at)?;
        let mut p = self.pat_primary()?;
        // Each postfix (`+`, `{..}`, `within`) nests the pattern one level deeper.
        let mut levels = 1;
        loop {
            let t = self.peek().clone();
            if matches!(&t.tok, Tok::Punct("+") | Tok::Punct("{"))
                || matches!(&t.tok, Tok::Ident(w) if w == "within")
            {
                self.enter(&t.span)?;
                levels += 1;
            }
            match &t.tok {
                Tok::Punct("+") => {
                    self.bump();
                    p = PatAst::Repeat {
                        inner: Box::new(p),
                        min: 1,
                        max: None,
                        distinct: None,
                        span: start..t.span.end,
                    };
                }
                Tok::Punct("{") => {
                    self.bump();
                    let min = self.count()?;
                    let max = if self.is_punct(",") {
                        self.bump();
                        if self.is_punct("}") {
                            None
                        } else {
                            Some(self.count()?)
                        }
                    } else {
                        Some(min)
                    };
                    let close = self.expect_punct("}")?;
                    p = PatAst::Repeat {
                        inner: Box::new(p),
                        min,
                        max,
                        distinct: None,
                        span: start..close.end,
                    };
                }
                Tok::Ident(w) if w == "distinct" => {
                    self.bump();
                    self.expect_punct("(")?;
                    let f = self.bump();
                    let Tok::Ident(name) = f.tok else {
                        return err(
                            f.span,
                            format!("expected a field name, found {}", f.tok.describe()),
                            "write a field's name, unquoted: `attempt{20,} distinct(dport)`",
                        );
                    };
                    let close = self.expect_punct(")")?;
                    match &mut p {
                        PatAst::Repeat { distinct, span, .. } if distinct.is_none() => {
                            *distinct = Some((name, f.span));
                            span.end = close.end;
                        }
                        _ => {
                            return Err(SyntaxError {
                                span: t.span.start..close.end,
                                message: "`distinct(..)` must follow a count such as `{20,}`"
                                    .into(),
                                help: Some("write e.g. `attempt{20,} distinct(dport)`".into()),
                            });
                        }
                    }
                }
                Tok::Ident(w) if w == "within" => {
                    self.bump();
                    let (d1, s1) = self.duration()?;
                    let (min, max, end) = if self.is_punct("..") {
                        self.bump();
                        let (d2, s2) = self.duration()?;
                        (Some((d1, s1)), (d2, s2.clone()), s2.end)
                    } else {
                        (None, (d1, s1.clone()), s1.end)
                    };
                    p = PatAst::Within {
                        inner: Box::new(p),
                        min,
                        max,
                        span: t.span.start..end,
                    };
                }
                _ => {
                    self.leave(levels);
                    return Ok(p);
                }
            }
        }
    }

    fn count(&mut self) -> Result<u32, SyntaxError> {
        let t = self.bump();
        match t.tok {
            Tok::Int(n) if n > i64::from(MAX_COUNT) => Err(SyntaxError {
                span: t.span,
                message: format!("count too large: a closure counts at most {MAX_COUNT} events"),
                help: Some(
                    "counting that many events of one group is a rate: use a shorter window or another rule"
                        .into(),
                ),
            }),
            Tok::Int(n) => u32::try_from(n).or_else(|_| {
                err(
                    t.span,
                    "count too large",
                    format!("a closure counts at most {MAX_COUNT} events"),
                )
            }),
            other => err(
                t.span,
                format!("expected a count, found {}", other.describe()),
                "counts are whole numbers: `a{3}`, `a{3,}`, `a{2,5}`, or `a+` for one or more",
            ),
        }
    }

    fn duration(&mut self) -> Result<(Duration, Span), SyntaxError> {
        let t = self.bump();
        match t.tok {
            Tok::Dur(d) => Ok((d, t.span)),
            Tok::Int(n) => Err(SyntaxError {
                span: t.span,
                message: format!("`{n}` has no unit"),
                help: Some(format!("write `{n}s`, `{n}m` or `{n}h`")),
            }),
            other => err(
                t.span,
                format!(
                    "expected a duration such as `5m`, found {}",
                    other.describe()
                ),
                "a duration is a number and a unit: `500ms`, `30s`, `5m`, `2h`, `1d`",
            ),
        }
    }

    fn pat_list(&mut self) -> Result<(Vec<PatAst>, Span), SyntaxError> {
        self.expect_punct("(")?;
        let mut items = Vec::new();
        loop {
            if self.is_punct(")") {
                break;
            }
            items.push(self.pattern()?);
            if self.is_punct(",") {
                self.bump();
            } else if !self.is_punct(")") {
                let t = self.peek();
                let after_not = matches!(items.last(), Some(PatAst::Event(w, _)) if w == "not");
                let help = if after_not {
                    let what = match &t.tok {
                        Tok::Ident(b) => b.as_str(),
                        _ => "b",
                    };
                    format!(
                        "in a pattern, an event that must not occur is `absent({what})` \
                         (`not` belongs to conditions)"
                    )
                } else {
                    "separate the operands with `,` and close the list with `)`: `seq(a, b)`"
                        .to_string()
                };
                return err(
                    t.span.clone(),
                    format!("expected `,` or `)`, found {}", t.tok.describe()),
                    help,
                );
            }
        }
        let close = self.bump().span;
        Ok((items, close))
    }

    fn pat_primary(&mut self) -> Result<PatAst, SyntaxError> {
        let t = self.bump();
        let s = t.span.clone();
        match t.tok {
            Tok::Ident(w) if self.is_punct("(") && ["seq", "or", "and"].contains(&w.as_str()) => {
                let (items, close) = self.pat_list()?;
                if items.is_empty() {
                    return err(
                        s.start..close.end,
                        format!("`{w}()` needs at least one pattern"),
                        format!("give it the events it combines: `{w}(a, b)`"),
                    );
                }
                let span = s.start..close.end;
                Ok(match w.as_str() {
                    "seq" => PatAst::Seq(items, span),
                    "or" => PatAst::Or(items, span),
                    _ => PatAst::And(items, span),
                })
            }
            Tok::Ident(w) if w == "absent" => {
                self.expect_punct("(")?;
                let inner = self.pattern()?;
                let close = self.expect_punct(")")?;
                let mut span = s.start..close.end;
                let for_ = if self.is_word("for") {
                    self.bump();
                    let (d, ds) = self.duration()?;
                    span.end = ds.end;
                    Some((d, ds))
                } else {
                    None
                };
                Ok(PatAst::Absent {
                    inner: Box::new(inner),
                    for_,
                    span,
                })
            }
            Tok::Ident(w) if ["within", "for", "distinct"].contains(&w.as_str()) => err(
                s,
                format!("expected an event name or a pattern, found the keyword `{w}`"),
                "`within D`, `for D` and `distinct(f)` follow a pattern: \
                 `seq(a, b) within 5m`, `absent(a) for 5m`, `a{20,} distinct(dport)`",
            ),
            // A name called like an operator: a misspelt one (`Seq(`, `sequence(`, `not(`).
            Tok::Ident(w) if self.is_punct("(") => Err(SyntaxError {
                span: s,
                message: format!("`{w}` is not a pattern operator"),
                help: Some(
                    match w.to_ascii_lowercase().as_str() {
                        "seq" | "sequence" | "then" | "followed_by" => {
                            "operators are lower case: `seq(a, b)`, one after the other"
                        }
                        "and" | "all" | "both" => "both in any order is `and(a, b)`",
                        "or" | "any" | "either" => "either is `or(a, b)`",
                        "not" | "absence" | "absent" | "missing" => {
                            "an event that did not occur is `absent(a) for 5m`"
                        }
                        _ => "the operators are `seq(..)`, `and(..)`, `or(..)` and `absent(..) for D`",
                    }
                    .into(),
                ),
            }),
            Tok::Ident(w) => Ok(PatAst::Event(w, s)),
            Tok::Punct("(") => {
                let p = self.pattern()?;
                self.expect_punct(")")?;
                Ok(p)
            }
            other => {
                let help = if other == Tok::Eof {
                    "the pattern ends early: close every `(` and give each operator its \
                     operands, e.g. `seq(a, b) within 5m`"
                } else {
                    "a pattern combines the names of `events.<name>` with `seq(..)`, \
                     `and(..)`, `or(..)` and `absent(..)`"
                };
                err(
                    s,
                    format!(
                        "expected an event name or a pattern, found {}",
                        other.describe()
                    ),
                    help,
                )
            }
        }
    }
}

/// A pattern expression.
#[derive(Clone, Debug, PartialEq)]
pub enum PatAst {
    /// An event name.
    Event(String, Span),
    /// `seq(..)`
    Seq(Vec<PatAst>, Span),
    /// `or(..)`
    Or(Vec<PatAst>, Span),
    /// `and(..)`
    And(Vec<PatAst>, Span),
    /// `p{n,m}`, `p+`, with `distinct(field)`.
    Repeat {
        /// The repeated pattern.
        inner: Box<PatAst>,
        /// Least count.
        min: u32,
        /// Greatest count.
        max: Option<u32>,
        /// `distinct(field)`.
        distinct: Option<(String, Span)>,
        /// Whole span.
        span: Span,
    },
    /// `absent(p) for D`
    Absent {
        /// What must not occur.
        inner: Box<PatAst>,
        /// `for D`.
        for_: Option<(Duration, Span)>,
        /// Whole span.
        span: Span,
    },
    /// `p within D` or `p within D1..D2`
    Within {
        /// The limited pattern.
        inner: Box<PatAst>,
        /// `D1` of `D1..D2`.
        min: Option<(Duration, Span)>,
        /// `D` or `D2`.
        max: (Duration, Span),
        /// Span of `within ...`.
        span: Span,
    },
}

impl PatAst {
    /// The span of the pattern.
    pub fn span(&self) -> Span {
        match self {
            PatAst::Event(_, s) | PatAst::Seq(_, s) | PatAst::Or(_, s) | PatAst::And(_, s) => {
                s.clone()
            }
            PatAst::Repeat { span, .. } | PatAst::Absent { span, .. } => span.clone(),
            PatAst::Within { inner, span, .. } => inner.span().start..span.end,
        }
    }
}

/// Parses a condition.
pub fn parse_cond(src: &str) -> Result<CondAst, SyntaxError> {
    let toks = lex(src)?;
    if toks.len() == 1 {
        return err(
            0..src.len(),
            "empty condition",
            "say which events: `syslog and app == \"sshd\"`, `flow and dport == 22`",
        );
    }
    let mut p = Parser {
        toks,
        pos: 0,
        depth: 0,
    };
    let c = p.or()?;
    p.end()?;
    Ok(c)
}

/// Parses a pattern.
pub fn parse_pattern(src: &str) -> Result<PatAst, SyntaxError> {
    let toks = lex(src)?;
    if toks.len() == 1 {
        return err(
            0..src.len(),
            "empty pattern",
            "name the events of `events.<name>`: `a`, `seq(a, b) within 5m`, `absent(a) for 5m`",
        );
    }
    let mut p = Parser {
        toks,
        pos: 0,
        depth: 0,
    };
    let c = p.pattern()?;
    let prev = p
        .pos
        .checked_sub(1)
        .and_then(|i| p.toks.get(i))
        .map(|t| t.tok.clone());
    let next = p.peek().tok.clone();
    p.end().map_err(|mut e| {
        e.help = pattern_end_help(prev.as_ref(), &next).or(e.help);
        e
    })?;
    Ok(c)
}

/// What to write instead, when a pattern goes on after it is complete: condition words
/// (`a and b`, `not a`) are operators in a pattern.
fn pattern_end_help(prev: Option<&Tok>, next: &Tok) -> Option<String> {
    let Tok::Ident(w) = next else {
        // (Not the condition's advice: patterns are not joined with `and` or `or`.)
        return Some(match (prev, next) {
            (Some(Tok::Ident(_)), Tok::Punct("-" | "." | "/")) => {
                "an event's name is letters, digits and `_` (`events.my_ev`, then `my_ev` here)"
                    .into()
            }
            _ => "combine events with `seq(..)`, `and(..)` or `or(..)`; limit the match with `within D`".into(),
        });
    };
    Some(
        match (prev, w.as_str()) {
            (_, "and") => "in a pattern, both in any order is `and(a, b)` and one after the other `seq(a, b)`; `and` between conditions goes in `events.<name>`",
            (_, "or") => "in a pattern, either is `or(a, b)`; `or` between conditions goes in `events.<name>`",
            (_, "for") => "`for D` belongs to an absence, `absent(a) for D`; a limit on the whole match is `within D`",
            (Some(Tok::Ident(p)), _) if p == "not" => "an event that did not occur is `absent(a) for D`",
            _ => "combine events with `seq(..)`, `and(..)` or `or(..)`; limit the match with `within D`",
        }
        .into(),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn lexes_addresses_durations_and_names() {
        let t: Vec<Tok> =
            lex(r#"src in [10.0.0.0/8, ::1, fe80::/10] and sd.meta@123.x-y == "a\"b" 5m 1.5 7"#)
                .unwrap()
                .into_iter()
                .map(|t| t.tok)
                .collect();
        assert_eq!(t[0], Tok::Ident("src".into()));
        assert!(matches!(t[3], Tok::Cidr(_)));
        assert!(matches!(t[5], Tok::Ip(_)));
        assert!(matches!(t[7], Tok::Cidr(_)));
        assert_eq!(t[10], Tok::Ident("sd.meta@123.x-y".into()));
        assert_eq!(t[12], Tok::Str("a\"b".into()));
        assert_eq!(t[13], Tok::Dur(Duration::from_secs(300)));
        assert_eq!(t[14], Tok::Float(1.5));
        assert_eq!(t[15], Tok::Int(7));
    }

    /// A duration may be written with spaces, as everywhere else the agent reads one; a
    /// number followed by a word that is no unit stays a number.
    #[test]
    fn durations_may_have_a_space_before_their_unit() {
        let toks =
            |src: &str| -> Vec<Tok> { lex(src).unwrap().into_iter().map(|t| t.tok).collect() };
        assert_eq!(
            toks("for 2 s within 5\tmin 1 days"),
            toks("for 2s within 5min 1d")
        );
        let t = toks("severity <= 3 and x");
        assert_eq!(t[2], Tok::Int(3));
        assert_eq!(t[3], Tok::Ident("and".into()));
        assert!(matches!(toks("5 m_x")[0], Tok::Int(5)));
        assert!(parse_pattern("seq(a, absent(b) for 2 s) within 10 min").is_ok());
        // A range's `..` ends the unit before it.
        assert_eq!(toks("within 5 m..10m"), toks("within 5m..10m"));
        assert_eq!(toks("within 1 h..2 h"), toks("within 1h..2h"));
        assert!(parse_pattern("seq(a, b) within 5 min..10 min").is_ok());
    }

    #[test]
    fn regex_backslashes_are_kept() {
        let c = parse_cond(r#"msg =~ "Accepted \w+ for (?P<user>\S+)""#).unwrap();
        let CondAst::Regex { re, .. } = c else {
            panic!()
        };
        assert_eq!(re, r"Accepted \w+ for (?P<user>\S+)");
    }

    #[test]
    fn precedence() {
        let c = parse_cond("syslog and a == 1 or not b == 2 and (c + 1) * 2 > 3").unwrap();
        let CondAst::Or(parts) = c else {
            panic!("{c:?}")
        };
        assert_eq!(parts.len(), 2);
        assert!(matches!(&parts[1], CondAst::And(v) if matches!(v[0], CondAst::Not(..))));
    }

    #[test]
    fn nesting_is_bounded_instead_of_exhausting_the_stack() {
        // A hostile rule file: every way to nest, far too deep, is a syntax error.
        let n = 20_000;
        let deep_conds = [
            format!("{}app == \"a\"{}", "(".repeat(n), ")".repeat(n)),
            format!("{}app == \"a\"", "not ".repeat(n)),
            format!("facility == {}1", "-".repeat(n)),
            format!("facility == {}", vec!["1"; n].join(" + ")),
            format!("facility == {}", vec!["1"; n].join(" * ")),
            format!("facility == {}1{}", "(".repeat(n), ")".repeat(n)),
        ];
        for c in &deep_conds {
            let e = parse_cond(c).unwrap_err();
            assert!(e.message.contains("nested more than"), "{}", e.message);
        }
        let deep_pats = [
            format!("{}a{}", "seq(a, ".repeat(n), ")".repeat(n)),
            format!("{}a{}", "absent(".repeat(n), ")".repeat(n)),
            format!("{}a{}", "(".repeat(n), ")".repeat(n)),
            format!("a{}", " within 1s".repeat(n)),
            format!("a{}", "+".repeat(n)),
        ];
        for p in &deep_pats {
            let e = parse_pattern(p).unwrap_err();
            assert!(e.message.contains("nested more than"), "{}", e.message);
        }
        // Nesting a person would write, and long flat lists, still parse.
        let ok = format!("{}app == \"a\"{}", "(".repeat(30), ")".repeat(30));
        assert!(parse_cond(&ok).is_ok());
        assert!(parse_cond(&vec!["app == \"a\""; n].join(" or ")).is_ok());
        assert!(parse_pattern(&format!("seq({})", vec!["a"; n].join(", "))).is_ok());
        assert!(parse_pattern(&format!("{}a{}", "seq(a, ".repeat(30), ")".repeat(30))).is_ok());
    }

    #[test]
    fn syntax_errors_have_spans() {
        let e = parse_cond("app = \"x\"").unwrap_err();
        assert_eq!(e.span, 4..5);
        assert!(e.help.unwrap().contains("=="));
        let e = parse_cond("app == ").unwrap_err();
        assert!(e.message.contains("expected a value"), "{e:?}");
        let e = parse_cond("src in 10.0.0.0/33").unwrap_err();
        assert_eq!(e.span, 7..18);
        let e = parse_pattern("seq(a, b").unwrap_err();
        assert!(e.message.contains("expected `,` or `)`"), "{e:?}");
    }

    #[test]
    fn condition_words_and_misspelt_operators_in_a_pattern_say_what_to_write() {
        let help = |src: &str| parse_pattern(src).unwrap_err().help.unwrap_or_default();
        assert!(
            help("a and b").contains("`and(a, b)`"),
            "{}",
            help("a and b")
        );
        assert!(help("a or b").contains("`or(a, b)`"));
        assert!(help("not a").contains("`absent(a) for D`"));
        assert!(help("seq(a, b) for 5m").contains("`within D`"));
        let e = parse_pattern("Seq(a, b)").unwrap_err();
        assert_eq!(e.message, "`Seq` is not a pattern operator");
        assert!(e.help.unwrap_or_default().contains("`seq(a, b)`"));
        assert!(help("sequence(a, b)").contains("`seq(a, b)`"));
        assert!(help("not(a)").contains("absent"));
        assert!(help("foo(a)").contains("`seq(..)`"));
    }

    #[test]
    fn patterns() {
        let p = parse_pattern("seq(fail{5,}, ok) within 5m").unwrap();
        assert!(matches!(p, PatAst::Within { .. }));
        let p = parse_pattern("attempt{20,} distinct(dport) within 1m..2m").unwrap();
        let PatAst::Within { inner, min, .. } = p else {
            panic!()
        };
        assert!(min.is_some());
        assert!(matches!(
            *inner,
            PatAst::Repeat {
                min: 20,
                max: None,
                distinct: Some(_),
                ..
            }
        ));
        let p = parse_pattern("seq(talk, absent(hb) for 2m)").unwrap();
        let PatAst::Seq(v, _) = p else { panic!() };
        assert!(matches!(&v[1], PatAst::Absent { for_: Some(_), .. }));
        assert!(matches!(
            parse_pattern("a{2,3}").unwrap(),
            PatAst::Repeat {
                min: 2,
                max: Some(3),
                ..
            }
        ));
        assert!(matches!(
            parse_pattern("a+").unwrap(),
            PatAst::Repeat {
                min: 1,
                max: None,
                ..
            }
        ));
    }
}
