//! The rules of two-step migrations (docs/migrations.md), checked on the
//! SQL text alone: no database, no dependency.
//!
//! `migrations/*.sql` is the expand step, run while the previous release
//! still runs: it may only add, and may not take a lock that running
//! transactions would queue behind. `migrations/contract/*.sql` runs once
//! every binary runs the new release: it may drop, under the same lock
//! rules. Files up to [`BASELINE`] were released before these rules and are
//! not checked statement by statement.
//!
//! The tokenizer knows just enough SQL for that: comments, string literals,
//! quoted identifiers, dollar-quoted bodies (`$$…$$`, `$tag$…$tag$`) and
//! `BEGIN ATOMIC … END` bodies are never split on their semicolons and
//! never match a keyword.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

/// The last version released before the two-step rules.
pub const BASELINE: i64 = 20261215000001;

/// The files of the baseline, which are frozen: a new file may not slip in
/// under the baseline's version and escape the check.
pub const BASELINE_FILES: &[&str] = &[
    "20261130000001_init.sql",
    "20261201000001_ledger.sql",
    "20261202000001_order_facts.sql",
    "20261203000001_console.sql",
    "20261204000001_events_browse.sql",
    "20261206000001_signed_body_once.sql",
    "20261207000001_shop_api.sql",
    "20261208000001_awaiting_order.sql",
    "20261209000001_cancellations.sql",
    "20261210000001_parked_replays.sql",
    "20261211000001_reconciliation.sql",
    "20261212000001_trace_context.sql",
    "20261213000001_order_events.sql",
    "20261214000001_delivery_trace.sql",
    "20261215000001_notify_retention.sql",
];

/// Which step a file belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `migrations/*.sql`: runs beside the previous release.
    Expand,
    /// `migrations/contract/*.sql`: runs once the previous release is gone.
    Contract,
}

/// One broken rule. The fixtures assert on these, the messages are for people.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    // What an expand migration may not do to what the previous release uses.
    Drop,
    Rename,
    ColumnType,
    SetNotNull,
    ColumnDefault,
    Disable,
    Truncate,
    DeleteAll,
    Revoke,
    // Locks (both steps).
    IndexNotConcurrent,
    ConcurrentlyAlone,
    DropIndexNotConcurrent,
    ConstraintValidated,
    IndexUnderLock,
    NotNullWithoutDefault,
    VolatileDefault,
    NowDefault,
    TableRewrite,
    InlineConstraint,
    HeavyLock,
    LockTimeout,
    ForeignKeyLock,
    Opaque,
    // Files.
    FileName,
    DuplicateVersion,
    UnderBaseline,
    Unreadable,
}

impl Rule {
    pub fn message(self) -> &'static str {
        match self {
            Rule::Drop => {
                "an expand migration may not drop anything (move it to migrations/contract/)"
            }
            Rule::Rename => {
                "an expand migration may not rename or move anything: the previous release still uses the old name (add the new one now, drop the old one in migrations/contract/)"
            }
            Rule::ColumnType => {
                "an expand migration may not change a column's type (the previous release reads and writes the old one, and the table may be rewritten under an ACCESS EXCLUSIVE lock): add a new column"
            }
            Rule::SetNotNull => {
                "an expand migration may not make a column NOT NULL: the previous release may still write NULL (do it in migrations/contract/)"
            }
            Rule::ColumnDefault => {
                "an expand migration may not change an existing column's default: the previous release's INSERTs rely on it (do it in migrations/contract/)"
            }
            Rule::Disable => {
                "an expand migration may not disable a trigger or rule the previous release relies on"
            }
            Rule::Truncate => {
                "an expand migration may not empty a table the previous release uses (move it to migrations/contract/)"
            }
            Rule::DeleteAll => {
                "an expand migration may not delete every row of a table the previous release uses: add a WHERE, or move it to migrations/contract/"
            }
            Rule::Revoke => {
                "an expand migration may not take away a privilege the previous release may use (move it to migrations/contract/)"
            }
            Rule::IndexNotConcurrent => {
                "CREATE INDEX on an existing table blocks its writes until the index is built: use CREATE INDEX CONCURRENTLY, alone in a file that starts with `-- no-transaction`"
            }
            Rule::ConcurrentlyAlone => {
                "CONCURRENTLY cannot run inside a transaction: the statement must be the only one of a file that starts with `-- no-transaction`"
            }
            Rule::DropIndexNotConcurrent => {
                "DROP INDEX locks its table: use DROP INDEX CONCURRENTLY, alone in a file that starts with `-- no-transaction`"
            }
            Rule::ConstraintValidated => {
                "ADD CONSTRAINT CHECK / FOREIGN KEY reads the whole table under the ALTER's lock: add it NOT VALID, and VALIDATE CONSTRAINT in a later migration"
            }
            Rule::IndexUnderLock => {
                "a UNIQUE / PRIMARY KEY / EXCLUDE constraint builds its index under an ACCESS EXCLUSIVE lock: CREATE UNIQUE INDEX CONCURRENTLY first, then ADD CONSTRAINT … USING INDEX"
            }
            Rule::NotNullWithoutDefault => {
                "ADD COLUMN … NOT NULL without a DEFAULT fails on a table with rows and breaks the previous release's INSERTs: give it a constant DEFAULT, or add it nullable"
            }
            Rule::VolatileDefault => {
                "ADD COLUMN with a volatile default (random(), gen_random_uuid(), clock_timestamp(), nextval(), …) rewrites the whole table under an ACCESS EXCLUSIVE lock: add it nullable and fill it in batches"
            }
            Rule::NowDefault => {
                "ADD COLUMN with DEFAULT now() (or CURRENT_TIMESTAMP…) stamps every existing row with the migration's time, which is not a real value: add it nullable and let the new release fill it"
            }
            Rule::TableRewrite => {
                "this rewrites the whole table under an ACCESS EXCLUSIVE lock (serial, identity or stored generated column, SET LOGGED/UNLOGGED/TABLESPACE/ACCESS METHOD)"
            }
            Rule::InlineConstraint => {
                "a constraint added with the column is checked (or indexed) over every row under the ALTER's ACCESS EXCLUSIVE lock: add the column, then the constraint NOT VALID (or a unique index CONCURRENTLY)"
            }
            Rule::HeavyLock => {
                "VACUUM FULL, CLUSTER, REINDEX without CONCURRENTLY and LOCK TABLE hold a lock the running system queues behind"
            }
            Rule::LockTimeout => {
                "this waits for a lock on an existing table behind every running transaction that uses it, and everything after it waits too: set a lock timeout earlier in the file (`SET LOCAL lock_timeout = '5s'`; `SET lock_timeout = '5s'` in a `-- no-transaction` file)"
            }
            Rule::ForeignKeyLock => {
                "a foreign key to an existing table locks that table SHARE ROW EXCLUSIVE (its writes wait) after waiting behind every running transaction that writes it: set a lock timeout earlier in the file (`SET LOCAL lock_timeout = '5s'`)"
            }
            Rule::Opaque => {
                "a DO block hides its statements from this check: write them as plain statements"
            }
            Rule::FileName => {
                "a migration's file name is `<14 digits>_<snake_case_name>.sql` (sqlx ignores or misreads anything else)"
            }
            Rule::DuplicateVersion => {
                "two migrations share a version (across migrations/ and migrations/contract/)"
            }
            Rule::UnderBaseline => {
                "a new migration needs a version after the baseline (20261215000001); the baseline files are frozen"
            }
            Rule::Unreadable => "the file cannot be read as SQL",
        }
    }
}

/// A broken rule in a file, at a statement.
#[derive(Clone, Debug)]
pub struct Violation {
    pub file: String,
    pub line: usize,
    pub statement: String,
    pub rule: Rule,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.statement.is_empty() {
            write!(f, "{}: {}", self.file, self.rule.message())
        } else if self.rule == Rule::Unreadable {
            let (file, line, what) = (&self.file, self.line, &self.statement);
            write!(f, "{file}:{line}: {what}: {}", self.rule.message())
        } else {
            write!(
                f,
                "{}:{}: `{}`: {}",
                self.file,
                self.line,
                self.statement,
                self.rule.message()
            )
        }
    }
}

// ---------------------------------------------------------------------------
// Tokens and statements

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// An unquoted word (keyword or identifier), as written.
    Word(String),
    /// A "quoted identifier", without its quotes.
    Quoted(String),
    /// A string literal's value.
    Str(String),
    /// A dollar-quoted body (never looked into).
    Body,
    Num(String),
    Punct(char),
}

impl Tok {
    fn is(&self, keyword: &str) -> bool {
        matches!(self, Tok::Word(w) if w.eq_ignore_ascii_case(keyword))
    }

    /// An identifier as Postgres folds it.
    fn ident(&self) -> Option<String> {
        match self {
            Tok::Word(w) => Some(w.to_ascii_lowercase()),
            Tok::Quoted(q) => Some(q.clone()),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Statement {
    /// The line of its first token (1-based).
    pub line: usize,
    /// Its text without comments, whitespace collapsed, bodies shortened.
    pub text: String,
    pub toks: Vec<Tok>,
}

impl Statement {
    /// The text for a message: at most 80 characters.
    pub fn short(&self) -> String {
        const MAX: usize = 80;
        if self.text.chars().count() <= MAX {
            self.text.clone()
        } else {
            let cut: String = self.text.chars().take(MAX - 1).collect();
            format!("{}…", cut.trim_end())
        }
    }
}

fn is_word_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

/// Splits a file into statements on the semicolons outside comments,
/// strings, quoted identifiers, dollar-quoted and `BEGIN ATOMIC` bodies.
/// An error is the line where the unclosed thing opens, and what it is.
pub fn split(sql: &str) -> Result<Vec<Statement>, (usize, String)> {
    let s: Vec<char> = sql.chars().collect();
    let n = s.len();
    let mut out = Vec::new();
    let mut toks: Vec<Tok> = Vec::new();
    let mut text = String::new();
    let mut line = 1;
    let mut first_line = 0;
    // End (char index) of the last token, to see `E'…'` as one literal.
    let mut last_end = usize::MAX;
    // Inside `BEGIN ATOMIC … END`: open CASEs (each closed by an END).
    let mut atomic: Option<usize> = None;
    let mut i = 0;
    while i < n {
        let c = s[i];
        let start = i;
        let tok = if c == '\n' {
            line += 1;
            text.push(' ');
            i += 1;
            None
        } else if c.is_whitespace() {
            text.push(' ');
            i += 1;
            None
        } else if c == '-' && s.get(i + 1) == Some(&'-') {
            while i < n && s[i] != '\n' {
                i += 1;
            }
            text.push(' ');
            None
        } else if c == '/' && s.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            let open_line = line;
            loop {
                if i >= n {
                    return Err((open_line, "a /* comment is never closed".into()));
                }
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if s[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
            text.push(' ');
            None
        } else if c == '\'' {
            // E'…' takes backslash escapes; the E is part of the literal.
            let escapes = last_end == i
                && matches!(toks.last(), Some(Tok::Word(w)) if w.eq_ignore_ascii_case("e"));
            if escapes {
                toks.pop();
            }
            let open_line = line;
            let mut value = String::new();
            i += 1;
            loop {
                if i >= n {
                    return Err((open_line, "a string literal is never closed".into()));
                }
                match s[i] {
                    '\\' if escapes && i + 1 < n => {
                        value.push(s[i + 1]);
                        i += 2;
                    }
                    '\'' if s.get(i + 1) == Some(&'\'') => {
                        value.push('\'');
                        i += 2;
                    }
                    '\'' => {
                        i += 1;
                        break;
                    }
                    ch => {
                        if ch == '\n' {
                            line += 1;
                        }
                        value.push(ch);
                        i += 1;
                    }
                }
            }
            text.extend(&s[start..i]);
            Some(Tok::Str(value))
        } else if c == '"' {
            let open_line = line;
            let mut value = String::new();
            i += 1;
            loop {
                if i >= n {
                    return Err((open_line, "a quoted identifier is never closed".into()));
                }
                if s[i] == '"' {
                    if s.get(i + 1) == Some(&'"') {
                        value.push('"');
                        i += 2;
                        continue;
                    }
                    i += 1;
                    break;
                }
                if s[i] == '\n' {
                    line += 1;
                }
                value.push(s[i]);
                i += 1;
            }
            text.extend(&s[start..i]);
            Some(Tok::Quoted(value))
        } else if let Some(tag) = (c == '$').then(|| dollar_tag(&s, i)).flatten() {
            let open_line = line;
            i += tag.len();
            loop {
                if i >= n {
                    let tag: String = tag.iter().collect();
                    return Err((open_line, format!("a {tag} body is never closed")));
                }
                if s[i..].starts_with(&tag) {
                    i += tag.len();
                    break;
                }
                if s[i] == '\n' {
                    line += 1;
                }
                i += 1;
            }
            let tag: String = tag.iter().collect();
            text.push_str(&format!("{tag}…{tag}"));
            Some(Tok::Body)
        } else if is_word_start(c) {
            while i < n && is_word_char(s[i]) {
                i += 1;
            }
            text.extend(&s[start..i]);
            Some(Tok::Word(s[start..i].iter().collect()))
        } else if c.is_ascii_digit() {
            while i < n && (s[i].is_ascii_alphanumeric() || s[i] == '.' || s[i] == '_') {
                i += 1;
            }
            text.extend(&s[start..i]);
            Some(Tok::Num(s[start..i].iter().collect()))
        } else if c == ';' && atomic.is_none() {
            i += 1;
            if !toks.is_empty() {
                out.push(Statement {
                    line: first_line,
                    text: collapse(&text),
                    toks: std::mem::take(&mut toks),
                });
            }
            text.clear();
            None
        } else {
            i += 1;
            text.push(c);
            Some(Tok::Punct(c))
        };
        if let Some(tok) = tok {
            match atomic {
                Some(cases) if tok.is("CASE") => atomic = Some(cases + 1),
                Some(0) if tok.is("END") => atomic = None,
                Some(cases) if tok.is("END") => atomic = Some(cases - 1),
                None if tok.is("ATOMIC")
                    && toks.last().is_some_and(|t| t.is("BEGIN"))
                    && toks.iter().any(|t| t.is("FUNCTION") || t.is("PROCEDURE")) =>
                {
                    atomic = Some(0)
                }
                _ => {}
            }
            if toks.is_empty() {
                first_line = line_of(&s, start);
            }
            toks.push(tok);
            last_end = i;
        }
    }
    if atomic.is_some() {
        return Err((first_line, "a BEGIN ATOMIC body is never closed".into()));
    }
    if !toks.is_empty() {
        out.push(Statement {
            line: first_line,
            text: collapse(&text),
            toks,
        });
    }
    Ok(out)
}

/// `$tag$` (or `$$`) at `i`, with both dollars; `$1` is a parameter.
fn dollar_tag(s: &[char], i: usize) -> Option<Vec<char>> {
    let mut j = i + 1;
    if j < s.len() && is_word_start(s[j]) {
        while j < s.len() && (s[j].is_alphanumeric() || s[j] == '_') {
            j += 1;
        }
    }
    (j < s.len() && s[j] == '$').then(|| s[i..=j].to_vec())
}

fn line_of(s: &[char], at: usize) -> usize {
    1 + s[..at].iter().filter(|&&c| c == '\n').count()
}

fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

// ---------------------------------------------------------------------------
// Token helpers

/// The tokens at parenthesis depth 0, with their positions.
fn top_level(toks: &[Tok]) -> Vec<(usize, &Tok)> {
    let mut depth = 0i32;
    let mut out = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        match t {
            Tok::Punct('(') | Tok::Punct('[') => depth += 1,
            Tok::Punct(')') | Tok::Punct(']') => depth -= 1,
            _ if depth == 0 => out.push((i, t)),
            _ => {}
        }
    }
    out
}

fn has_top(toks: &[Tok], keyword: &str) -> bool {
    top_level(toks).iter().any(|(_, t)| t.is(keyword))
}

fn has_top_pair(toks: &[Tok], a: &str, b: &str) -> bool {
    let top = top_level(toks);
    top.windows(2).any(|w| w[0].1.is(a) && w[1].1.is(b))
}

/// Splits at the commas of depth 0.
fn split_commas(toks: &[Tok]) -> Vec<&[Tok]> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut from = 0;
    for (i, t) in toks.iter().enumerate() {
        match t {
            Tok::Punct('(') | Tok::Punct('[') => depth += 1,
            Tok::Punct(')') | Tok::Punct(']') => depth -= 1,
            Tok::Punct(',') if depth == 0 => {
                parts.push(&toks[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&toks[from..]);
    parts
}

/// Skips the keywords `words` at `i` if they are all there.
fn skip(toks: &[Tok], i: usize, words: &[&str]) -> usize {
    let all = words
        .iter()
        .enumerate()
        .all(|(k, w)| toks.get(i + k).is_some_and(|t| t.is(w)));
    if all { i + words.len() } else { i }
}

/// A possibly schema-qualified name at `i`: its last part, and the index
/// after it.
fn name_at(toks: &[Tok], mut i: usize) -> (Option<String>, usize) {
    let mut name = None;
    while let Some(id) = toks.get(i).and_then(Tok::ident) {
        name = Some(id);
        i += 1;
        if toks.get(i) == Some(&Tok::Punct('.')) {
            i += 1;
        } else {
            break;
        }
    }
    (name, i)
}

const VOLATILE: &[&str] = &[
    "random",
    "gen_random_uuid",
    "uuid_generate_v1",
    "uuid_generate_v1mc",
    "uuid_generate_v4",
    "uuidv4",
    "uuidv7",
    "clock_timestamp",
    "timeofday",
    "nextval",
    "txid_current",
    "pg_current_xact_id",
];

const NOW: &[&str] = &[
    "now",
    "current_timestamp",
    "current_date",
    "current_time",
    "localtimestamp",
    "localtime",
    "transaction_timestamp",
    "statement_timestamp",
];

const SERIAL: &[&str] = &[
    "serial",
    "bigserial",
    "smallserial",
    "serial2",
    "serial4",
    "serial8",
];

// ---------------------------------------------------------------------------
// The check

/// What one file does to the database as far as the rules care.
struct File<'a> {
    step: Step,
    no_transaction: bool,
    statements: &'a [Statement],
    /// Relations (tables, views, sequences, indexes) this file created so far.
    created: HashSet<String>,
    lock_timeout: bool,
    found: Vec<(usize, Rule)>,
}

/// Checks one file's SQL (not baseline) as `step`. `file` names it in the
/// messages.
pub fn check_sql(file: &str, step: Step, sql: &str) -> Vec<Violation> {
    let statements = match split(sql) {
        Ok(s) => s,
        Err((line, what)) => {
            return vec![Violation {
                file: file.into(),
                line,
                statement: what,
                rule: Rule::Unreadable,
            }];
        }
    };
    let mut f = File {
        step,
        no_transaction: sql.starts_with("-- no-transaction"),
        statements: &statements,
        created: HashSet::new(),
        lock_timeout: false,
        found: Vec::new(),
    };
    for (k, st) in statements.iter().enumerate() {
        f.statement(k, &st.toks);
    }
    let mut seen = HashSet::new();
    f.found
        .into_iter()
        .filter(|found| seen.insert(*found))
        .map(|(k, rule)| Violation {
            file: file.into(),
            line: statements[k].line,
            statement: statements[k].short(),
            rule,
        })
        .collect()
}

impl File<'_> {
    fn expand(&self) -> bool {
        self.step == Step::Expand
    }

    fn existing(&self, name: &Option<String>) -> bool {
        name.as_ref().is_none_or(|n| !self.created.contains(n))
    }

    /// A statement that locks an existing relation: fine after a lock timeout.
    fn locks(&mut self, k: usize) {
        if !self.lock_timeout {
            self.found.push((k, Rule::LockTimeout));
        }
    }

    /// A CONCURRENTLY statement: alone in a `-- no-transaction` file.
    fn alone(&mut self, k: usize) {
        if !self.no_transaction || self.statements.len() != 1 {
            self.found.push((k, Rule::ConcurrentlyAlone));
        }
    }

    fn statement(&mut self, k: usize, t: &[Tok]) {
        let Some(first) = t.first() else { return };
        let word = match first {
            Tok::Word(w) => w.to_ascii_uppercase(),
            _ => String::new(),
        };
        match word.as_str() {
            "SET" => self.set(t),
            "RESET"
                if t.get(1)
                    .is_some_and(|x| x.is("lock_timeout") || x.is("ALL")) =>
            {
                self.lock_timeout = false;
            }
            "CREATE" => self.create(k, t),
            "ALTER" => self.alter(k, t),
            "DROP" => self.drop(k, t),
            "TRUNCATE" => {
                if self.expand() {
                    self.found.push((k, Rule::Truncate));
                } else {
                    self.locks(k);
                }
            }
            "VACUUM" if t.iter().any(|x| x.is("FULL")) => self.found.push((k, Rule::HeavyLock)),
            "CLUSTER" | "LOCK" => self.found.push((k, Rule::HeavyLock)),
            "REINDEX" => {
                if t.iter().any(|x| x.is("CONCURRENTLY")) {
                    self.alone(k);
                } else {
                    self.found.push((k, Rule::HeavyLock));
                }
            }
            "DO" => self.found.push((k, Rule::Opaque)),
            "REVOKE" if self.expand() => self.found.push((k, Rule::Revoke)),
            _ => {}
        }
        if self.expand() && word != "CREATE" && deletes_all(t) {
            self.found.push((k, Rule::DeleteAll));
        }
    }

    /// `SET [LOCAL|SESSION] lock_timeout {=|TO} value`; 0 and DEFAULT turn
    /// it off, and SET LOCAL does nothing outside a transaction.
    fn set(&mut self, t: &[Tok]) {
        let local = t.get(1).is_some_and(|x| x.is("LOCAL"));
        let i = if local || t.get(1).is_some_and(|x| x.is("SESSION")) {
            2
        } else {
            1
        };
        if !t.get(i).is_some_and(|x| x.is("lock_timeout")) {
            return;
        }
        let value = match t.get(i + 2) {
            Some(Tok::Str(v)) | Some(Tok::Num(v)) | Some(Tok::Word(v)) => v.clone(),
            _ => String::new(),
        };
        let digits: String = value.chars().take_while(char::is_ascii_digit).collect();
        let zero = digits.is_empty() || digits.chars().all(|c| c == '0');
        let ignored = local && self.no_transaction;
        self.lock_timeout = !(zero || ignored);
    }

    fn create(&mut self, k: usize, t: &[Tok]) {
        let mut i = skip(t, 1, &["OR", "REPLACE"]);
        for w in ["GLOBAL", "LOCAL", "TEMP", "TEMPORARY", "UNLOGGED"] {
            i = skip(t, i, &[w]);
        }
        let unique = t.get(i).is_some_and(|x| x.is("UNIQUE"));
        let i = if unique { i + 1 } else { i };
        let Some(kind) = t.get(i) else { return };
        if kind.is("TABLE") {
            let (name, _) = name_at(t, skip(t, i + 1, &["IF", "NOT", "EXISTS"]));
            // A foreign key to an existing table takes a SHARE ROW
            // EXCLUSIVE lock on it (its triggers are created).
            let refs_existing = t.iter().enumerate().any(|(j, x)| {
                x.is("REFERENCES") && {
                    let (to, _) = name_at(t, j + 1);
                    to != name && self.existing(&to)
                }
            });
            if refs_existing && !self.lock_timeout {
                self.found.push((k, Rule::ForeignKeyLock));
            }
            if let Some(name) = name {
                self.created.insert(name);
            }
        } else if kind.is("INDEX") {
            let concurrently = t.get(i + 1).is_some_and(|x| x.is("CONCURRENTLY"));
            let Some(on) = t.iter().position(|x| x.is("ON")) else {
                return;
            };
            let (table, _) = name_at(t, skip(t, on + 1, &["ONLY"]));
            let j = skip(t, i + 1, &["CONCURRENTLY"]);
            let (index, _) = name_at(t, skip(t, j, &["IF", "NOT", "EXISTS"]));
            if concurrently {
                self.alone(k);
            } else if self.existing(&table) {
                self.found.push((k, Rule::IndexNotConcurrent));
            }
            if let Some(index) = index.filter(|_| on > j) {
                self.created.insert(index);
            }
        } else if kind.is("TRIGGER")
            || (kind.is("CONSTRAINT") && t.get(i + 1).is_some_and(|x| x.is("TRIGGER")))
        {
            let Some(on) = t.iter().position(|x| x.is("ON")) else {
                return;
            };
            let (table, _) = name_at(t, on + 1);
            if self.existing(&table) {
                self.locks(k);
            }
        } else if kind.is("VIEW") || kind.is("SEQUENCE") || kind.is("MATERIALIZED") {
            let j = if kind.is("MATERIALIZED") {
                i + 2
            } else {
                i + 1
            };
            if let (Some(name), _) = name_at(t, skip(t, j, &["IF", "NOT", "EXISTS"])) {
                self.created.insert(name);
            }
        }
    }

    fn alter(&mut self, k: usize, t: &[Tok]) {
        let table = t.get(1).is_some_and(|x| x.is("TABLE"));
        // The relation: ALTER {TABLE|INDEX|VIEW|SEQUENCE|MATERIALIZED VIEW|
        // FOREIGN TABLE} [IF EXISTS] [ONLY] name, or ALTER TRIGGER x ON name.
        let relation_kind = [
            "TABLE",
            "INDEX",
            "VIEW",
            "SEQUENCE",
            "MATERIALIZED",
            "FOREIGN",
        ]
        .iter()
        .any(|w| t.get(1).is_some_and(|x| x.is(w)));
        let (name, after) = if t.get(1).is_some_and(|x| x.is("TRIGGER")) {
            match t.iter().position(|x| x.is("ON")) {
                Some(on) => name_at(t, on + 1),
                None => (None, t.len()),
            }
        } else if relation_kind {
            let j = if t
                .get(1)
                .is_some_and(|x| x.is("MATERIALIZED") || x.is("FOREIGN"))
            {
                3
            } else {
                2
            };
            let j = skip(t, j, &["IF", "EXISTS"]);
            let j = skip(t, j, &["ONLY"]);
            let (name, mut after) = name_at(t, j);
            if t.get(after) == Some(&Tok::Punct('*')) {
                after += 1;
            }
            (name, after)
        } else {
            // Functions, types, domains, schemas…: no table lock, only the
            // expand rules.
            (None, t.len())
        };
        let is_relation = relation_kind || t.get(1).is_some_and(|x| x.is("TRIGGER"));
        if is_relation && !self.existing(&name) {
            return; // created in this file: nobody else uses it yet
        }
        let actions = if table {
            split_commas(&t[after.min(t.len())..])
        } else {
            vec![&t[1..]]
        };
        for action in actions {
            self.alter_action(k, table, action);
        }
        if is_relation {
            self.locks(k);
        }
    }

    fn alter_action(&mut self, k: usize, table: bool, a: &[Tok]) {
        let expand = self.expand();
        let first = |w: &str| a.first().is_some_and(|x| x.is(w));
        if expand {
            if has_top(a, "RENAME") || has_top_pair(a, "SET", "SCHEMA") {
                self.found.push((k, Rule::Rename));
            }
            if first("DISABLE") {
                self.found.push((k, Rule::Disable));
            }
            if first("DETACH") || has_top_pair(a, "NO", "INHERIT") {
                self.found.push((k, Rule::Drop));
            }
        }
        if !table {
            if expand && has_top(a, "DROP") {
                self.found.push((k, Rule::Drop));
            }
            return;
        }
        if first("ALTER") {
            // ALTER [COLUMN] col …
            let i = skip(a, 1, &["COLUMN"]) + 1;
            let rest = &a[i.min(a.len())..];
            let at = |j: usize, w: &str| rest.get(j).is_some_and(|x| x.is(w));
            if expand {
                if at(0, "TYPE") || (at(0, "SET") && at(1, "DATA") && at(2, "TYPE")) {
                    self.found.push((k, Rule::ColumnType));
                } else if at(0, "SET") && at(1, "NOT") && at(2, "NULL") {
                    self.found.push((k, Rule::SetNotNull));
                } else if (at(0, "SET") || at(0, "DROP")) && at(1, "DEFAULT") {
                    self.found.push((k, Rule::ColumnDefault));
                } else if at(0, "DROP") {
                    self.found.push((k, Rule::Drop));
                }
            }
        } else if first("DROP") {
            if expand {
                self.found.push((k, Rule::Drop));
            }
        } else if first("ADD") {
            self.add(k, &a[1..]);
        } else if first("SET") {
            let at = |j: usize, w: &str| a.get(j).is_some_and(|x| x.is(w));
            if at(1, "LOGGED")
                || at(1, "UNLOGGED")
                || at(1, "TABLESPACE")
                || (at(1, "ACCESS") && at(2, "METHOD"))
            {
                self.found.push((k, Rule::TableRewrite));
            }
        }
    }

    /// ALTER TABLE … ADD: a column or a constraint.
    fn add(&mut self, k: usize, a: &[Tok]) {
        let head = |w: &str| a.first().is_some_and(|x| x.is(w));
        if [
            "CONSTRAINT",
            "CHECK",
            "FOREIGN",
            "UNIQUE",
            "PRIMARY",
            "EXCLUDE",
        ]
        .iter()
        .any(|w| head(w))
        {
            let i = if head("CONSTRAINT") { 2 } else { 0 };
            let kind = a.get(i);
            if kind.is_some_and(|x| x.is("CHECK") || x.is("FOREIGN")) {
                if !has_top_pair(a, "NOT", "VALID") {
                    self.found.push((k, Rule::ConstraintValidated));
                }
            } else if !has_top_pair(a, "USING", "INDEX") {
                self.found.push((k, Rule::IndexUnderLock));
            }
            return;
        }
        // ADD [COLUMN] [IF NOT EXISTS] name type [constraints…]
        let i = skip(a, 0, &["COLUMN"]);
        let i = skip(a, i, &["IF", "NOT", "EXISTS"]);
        let col = &a[(i + 1).min(a.len())..];
        let top = top_level(col);
        let default = top.iter().position(|(_, x)| x.is("DEFAULT"));
        if let Some(d) = default {
            // The default's expression: up to the next column constraint.
            let from = top[d].0 + 1;
            let to = top[d + 1..]
                .iter()
                .find(|(_, x)| {
                    [
                        "NOT",
                        "NULL",
                        "CHECK",
                        "REFERENCES",
                        "UNIQUE",
                        "PRIMARY",
                        "CONSTRAINT",
                        "GENERATED",
                        "COLLATE",
                    ]
                    .iter()
                    .any(|w| x.is(w))
                })
                .map_or(col.len(), |(j, _)| *j);
            let expr = &col[from..to];
            if expr.iter().any(|x| VOLATILE.iter().any(|w| x.is(w))) {
                self.found.push((k, Rule::VolatileDefault));
            } else if expr.iter().any(|x| NOW.iter().any(|w| x.is(w))) {
                self.found.push((k, Rule::NowDefault));
            }
        } else if has_top_pair(col, "NOT", "NULL") {
            self.found.push((k, Rule::NotNullWithoutDefault));
        }
        if col.first().is_some_and(|x| SERIAL.iter().any(|w| x.is(w))) || has_top(col, "GENERATED")
        {
            self.found.push((k, Rule::TableRewrite));
        }
        if ["CHECK", "REFERENCES", "UNIQUE", "PRIMARY"]
            .iter()
            .any(|w| has_top(col, w))
        {
            self.found.push((k, Rule::InlineConstraint));
        }
    }

    fn drop(&mut self, k: usize, t: &[Tok]) {
        let kind = t.get(1);
        let is_index = kind.is_some_and(|x| x.is("INDEX"));
        let concurrently = is_index && t.get(2).is_some_and(|x| x.is("CONCURRENTLY"));
        // What it drops: relations by name (all created in this file is
        // fine), a trigger by its table.
        let relation = ["TABLE", "VIEW", "INDEX", "SEQUENCE", "MATERIALIZED"]
            .iter()
            .any(|w| kind.is_some_and(|x| x.is(w)));
        let own = if relation {
            let j = if kind.is_some_and(|x| x.is("MATERIALIZED")) {
                3
            } else {
                2
            };
            let j = skip(t, j, &["CONCURRENTLY"]);
            let j = skip(t, j, &["IF", "EXISTS"]);
            let names: Vec<Option<String>> = split_commas(&t[j.min(t.len())..])
                .iter()
                .map(|part| name_at(part, 0).0)
                .collect();
            names.iter().all(|n| !self.existing(n))
        } else if kind.is_some_and(|x| x.is("TRIGGER")) {
            let on = t.iter().position(|x| x.is("ON")).unwrap_or(t.len());
            !self.existing(&name_at(t, on + 1).0)
        } else {
            false
        };
        if own {
            return;
        }
        if self.expand() {
            self.found.push((k, Rule::Drop));
        } else if concurrently {
            self.alone(k);
        } else if is_index {
            self.found.push((k, Rule::DropIndexNotConcurrent));
        } else {
            self.locks(k);
        }
    }
}

/// A `DELETE FROM` (at any depth, so in a CTE too) with no WHERE at its own
/// depth.
fn deletes_all(t: &[Tok]) -> bool {
    let mut i = 0;
    while i + 1 < t.len() {
        if t[i].is("DELETE") && t[i + 1].is("FROM") {
            let mut depth = 0i32;
            let mut has_where = false;
            for x in &t[i + 2..] {
                match x {
                    Tok::Punct('(') => depth += 1,
                    Tok::Punct(')') if depth == 0 => break,
                    Tok::Punct(')') => depth -= 1,
                    _ if depth == 0 && x.is("WHERE") => {
                        has_where = true;
                        break;
                    }
                    _ => {}
                }
            }
            if !has_where {
                return true;
            }
        }
        i += 1;
    }
    false
}

// ---------------------------------------------------------------------------
// Folders

/// One migration file: its name, folder and text.
pub struct MigrationFile {
    /// As the messages show it, e.g. `migrations/contract/2026…_x.sql`.
    pub path: String,
    pub name: String,
    pub step: Step,
    pub sql: String,
}

fn version_of(name: &str) -> Option<i64> {
    let (digits, rest) = name.split_once('_')?;
    let snake = rest.strip_suffix(".sql")?;
    let snake_ok = !snake.is_empty()
        && snake.split('_').all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        });
    (digits.len() == 14 && digits.chars().all(|c| c.is_ascii_digit()) && snake_ok)
        .then(|| digits.parse().ok())
        .flatten()
}

/// Every rule over a set of files: names, versions, and each checked
/// file's statements.
pub fn check_files(files: &[MigrationFile]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut versions: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
    let file_level = |path: &str, rule| Violation {
        file: path.into(),
        line: 0,
        statement: String::new(),
        rule,
    };
    for f in files {
        let Some(version) = version_of(&f.name) else {
            out.push(file_level(&f.path, Rule::FileName));
            continue;
        };
        versions.entry(version).or_default().push(&f.path);
        let baseline = f.step == Step::Expand && BASELINE_FILES.contains(&f.name.as_str());
        if baseline {
            continue;
        }
        if version <= BASELINE {
            out.push(file_level(&f.path, Rule::UnderBaseline));
        }
        out.extend(check_sql(&f.path, f.step, &f.sql));
    }
    for paths in versions.values().filter(|p| p.len() > 1) {
        out.push(file_level(&paths.join(" and "), Rule::DuplicateVersion));
    }
    out
}
