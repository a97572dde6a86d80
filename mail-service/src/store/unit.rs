//! Units of work: what the service asks the database to write, as data.
//!
//! A `Unit` is a list of `Step`s (one SQL statement each, with its
//! parameters) that commit together or not at all. Its steps may depend on
//! each other only through the rule a step carries for touching no row:
//! go on, stop (keep what the earlier steps wrote), or roll the unit back.
//! Being data, a unit runs the same on both backends: on SQLite the writer
//! thread executes many units in one transaction (group commit), each in a
//! savepoint of its own; on PostgreSQL a unit of one step is one statement
//! without BEGIN/COMMIT, a longer unit one transaction. Adding a row to an
//! existing write (an event next to a state change) is one more step.

use crate::error::Error;

/// A bound value. Arrays exist for PostgreSQL's `unnest` (one statement for
/// many rows); SQLite units use one step per row instead.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Param {
    Int(i64),
    OptInt(Option<i64>),
    Text(String),
    OptText(Option<String>),
    Ints(Vec<i64>),
    OptInts(Vec<Option<i64>>),
    Texts(Vec<String>),
    OptTexts(Vec<Option<String>>),
}

impl From<i64> for Param {
    fn from(v: i64) -> Self {
        Param::Int(v)
    }
}

impl From<Option<i64>> for Param {
    fn from(v: Option<i64>) -> Self {
        Param::OptInt(v)
    }
}

impl From<&str> for Param {
    fn from(v: &str) -> Self {
        Param::Text(v.to_string())
    }
}

impl From<&String> for Param {
    fn from(v: &String) -> Self {
        Param::Text(v.clone())
    }
}

impl From<String> for Param {
    fn from(v: String) -> Self {
        Param::Text(v)
    }
}

impl From<&Option<String>> for Param {
    fn from(v: &Option<String>) -> Self {
        Param::OptText(v.clone())
    }
}

impl From<Vec<i64>> for Param {
    fn from(v: Vec<i64>) -> Self {
        Param::Ints(v)
    }
}

impl From<Vec<Option<i64>>> for Param {
    fn from(v: Vec<Option<i64>>) -> Self {
        Param::OptInts(v)
    }
}

impl From<Vec<String>> for Param {
    fn from(v: Vec<String>) -> Self {
        Param::Texts(v)
    }
}

impl From<Vec<Option<String>>> for Param {
    fn from(v: Vec<Option<String>>) -> Self {
        Param::OptTexts(v)
    }
}

/// `params![a, b]`: the values of a step, in `$1, $2` order.
macro_rules! params {
    ($($value:expr),* $(,)?) => {
        vec![$($crate::store::unit::Param::from($value)),*]
    };
}
pub(crate) use params;

/// What a step yields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Yields {
    /// The number of rows it changed.
    Rows,
    /// The first column of its first row (`RETURNING`, `SELECT count(*)`),
    /// an integer; 0 when it returns no row.
    Value,
}

/// What a step that yields 0 does to the rest of its unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IfZero {
    Continue,
    /// Skip the remaining steps; what ran before is committed.
    Stop,
    /// Undo the unit. A one-step unit with this rule must write nothing
    /// when it yields 0 (PostgreSQL runs it without a transaction).
    Abort,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Step {
    pub sql: &'static str,
    pub params: Vec<Param>,
    pub yields: Yields,
    pub if_zero: IfZero,
}

impl Step {
    /// A statement that yields the number of rows it changed.
    pub fn rows(sql: &'static str, params: Vec<Param>) -> Step {
        Step {
            sql,
            params,
            yields: Yields::Rows,
            if_zero: IfZero::Continue,
        }
    }

    /// A statement that yields one integer.
    pub fn value(sql: &'static str, params: Vec<Param>) -> Step {
        Step {
            yields: Yields::Value,
            ..Step::rows(sql, params)
        }
    }

    pub fn stop_if_zero(self) -> Step {
        Step {
            if_zero: IfZero::Stop,
            ..self
        }
    }

    pub fn abort_if_zero(self) -> Step {
        Step {
            if_zero: IfZero::Abort,
            ..self
        }
    }
}

/// Steps that commit together or not at all.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Unit {
    pub steps: Vec<Step>,
    /// What a unique violation in this unit means, for the error message.
    pub conflict: Option<String>,
    /// False for bookkeeping (request logs, rate counts): on PostgreSQL it
    /// commits without waiting for the disk flush (`synchronous_commit =
    /// off`). The log is written in order, so it is flushed no later than
    /// the next durable commit (a send's reservation). SQLite commits every
    /// unit alike (WAL, `synchronous = NORMAL`).
    pub durable: bool,
}

impl Unit {
    pub fn new(steps: Vec<Step>) -> Unit {
        Unit {
            steps,
            conflict: None,
            durable: true,
        }
    }

    /// Marks the unit as bookkeeping (see `durable`).
    pub fn bookkeeping(self) -> Unit {
        Unit {
            durable: false,
            ..self
        }
    }

    pub fn one(step: Step) -> Unit {
        Unit::new(vec![step])
    }

    /// The error for a unique violation in this unit; `detail` is the
    /// database's message, used when the unit does not say what it means.
    pub fn conflict(&self, detail: &str) -> Error {
        Error::Conflict {
            what: self
                .conflict
                .clone()
                .unwrap_or_else(|| format!("already exists ({detail})")),
        }
    }

    /// Names what a unique violation in this unit means.
    pub fn conflict_means(self, what: String) -> Unit {
        Unit {
            conflict: Some(what),
            ..self
        }
    }
}

/// How a unit ended; the yields of the steps that ran, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ran {
    /// Every step ran and the unit committed.
    Committed(Vec<i64>),
    /// A step with `IfZero::Stop` yielded 0; the steps up to it committed.
    Stopped(Vec<i64>),
    /// A step with `IfZero::Abort` yielded 0; nothing was written.
    RolledBack,
}

impl Ran {
    /// What the last step that ran yielded.
    pub fn last(&self) -> i64 {
        match self {
            Ran::Committed(yields) | Ran::Stopped(yields) => yields.last().copied().unwrap_or(0),
            Ran::RolledBack => 0,
        }
    }
}

/// Records what a step yielded and applies its rule: `Some` when the unit
/// ends at this step (the backend rolls back first on `RolledBack`).
pub(crate) fn record(step: &Step, yielded: i64, yields: &mut Vec<i64>) -> Option<Ran> {
    yields.push(yielded);
    match (yielded, step.if_zero) {
        (0, IfZero::Stop) => Some(Ran::Stopped(std::mem::take(yields))),
        (0, IfZero::Abort) => Some(Ran::RolledBack),
        _ => None,
    }
}
