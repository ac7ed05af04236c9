//! Control variables: every knob of the configuration registry (runtime/config.rs), named
//! as in the environment. Reading gives the value in effect (set through MPI_T, else the
//! environment's, else the default); writing is allowed only where the library honours a
//! change while it runs (the collectives' algorithm choices and thresholds, the eager limit,
//! FERRITE_REPORT until MPI_Finalize). The other knobs are read once, at MPI_Init or first
//! use: their scope is MPI_T_SCOPE_CONSTANT and writing them fails with
//! MPI_T_ERR_CVAR_SET_NEVER. A knob added to the registry appears here by itself, with its
//! type inferred from its default (a number or a string) and constant.

use crate::consts::*;
use crate::runtime::config::{self, KNOBS};
use std::os::raw::c_int;
use std::sync::OnceLock;

use super::TResult;

/// Bytes (terminating null included) a string cvar's buffer holds: its `count`.
pub const STR_COUNT: usize = 256;

/// A cvar's C type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// MPI_INT (a knob that may be negative).
    Int,
    /// MPI_UNSIGNED_LONG_LONG.
    Ull,
    /// MPI_CHAR, `STR_COUNT` bytes.
    Str,
    /// MPI_INT whose values are the items of an enumeration (the choices' positions).
    Choice(&'static [&'static str]),
}

/// When a write is honoured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    Never,
    Always,
    /// Until MPI_Finalize starts (FERRITE_REPORT is read there).
    UntilFinalize,
}

pub struct Cvar {
    pub name: &'static str,
    pub desc: &'static str,
    pub default: &'static str,
    pub kind: Kind,
    pub verbosity: c_int,
    pub scope: c_int,
    pub when: When,
    /// Its category (tool/mod.rs): the knob's area.
    pub area: String,
}

/// The knobs that take one of a few words (their enumerations), as the code that reads them
/// accepts them.
const CHOICES: &[(&str, &[&str])] = &[
    ("FERRITE_PROGRESS_ADAPT", &["yes", "no", "auto"]),
    (
        "FERRITE_CONN",
        &["static", "ondemand", "partial", "adaptive"],
    ),
    ("FERRITE_CONN_SETUP", &["cm", "ud"]),
];

/// Knobs whose default looks like a number but that take text.
const TEXT: &[&str] = &["FERRITE_REPORT"];

/// Knobs a user sets first (the rest are for tuning, or for Ferrite's developers).
const USER: &[&str] = &[
    "FERRITE_TRANSPORTS",
    "FERRITE_CONN",
    "FERRITE_REPORT",
    "FERRITE_EAGER_LIMIT",
];

fn describe(k: &config::Knob) -> Cvar {
    let choices = CHOICES.iter().chain(crate::coll::plans::ALGORITHMS);
    let kind = if let Some((_, c)) = choices.clone().find(|(n, _)| *n == k.name) {
        Kind::Choice(c)
    } else if TEXT.contains(&k.name) {
        Kind::Str
    } else if k.default.parse::<u64>().is_ok() {
        Kind::Ull
    } else if k.default.parse::<i32>().is_ok() {
        Kind::Int
    } else {
        Kind::Str
    };
    // Read at each use, or through a cache that a write clears (coll/plans.rs): the
    // collectives' choices must agree on every process (ALL_EQ); the eager limit is the
    // sender's alone (LOCAL).
    let coll_runtime = k.name.starts_with("FERRITE_COLL_")
        && (k.name.ends_with("_ALGO") || k.name.ends_with("_LARGE"));
    let (when, scope) = if coll_runtime {
        (When::Always, MPI_T_SCOPE_ALL_EQ)
    } else if k.name == "FERRITE_EAGER_LIMIT" {
        (When::Always, MPI_T_SCOPE_LOCAL)
    } else if k.name == "FERRITE_REPORT" {
        (When::UntilFinalize, MPI_T_SCOPE_ALL_EQ)
    } else {
        (When::Never, MPI_T_SCOPE_CONSTANT)
    };
    let verbosity = if USER.contains(&k.name) {
        MPI_T_VERBOSITY_USER_BASIC
    } else if k.name.contains("_DROP_") {
        MPI_T_VERBOSITY_MPIDEV_DETAIL
    } else if when != When::Never {
        MPI_T_VERBOSITY_TUNER_BASIC
    } else {
        MPI_T_VERBOSITY_TUNER_DETAIL
    };
    Cvar {
        name: k.name,
        desc: k.doc,
        default: k.default,
        kind,
        verbosity,
        scope,
        when,
        area: area_of(k.name),
    }
}

/// A knob's category: the word after FERRITE_ (FERRITE_TCP_SENDQ: tcp).
fn area_of(name: &str) -> String {
    let rest = name.strip_prefix("FERRITE_").unwrap_or(name);
    let word = rest.split('_').next().unwrap_or(rest).to_ascii_lowercase();
    match word.as_str() {
        "transports" => "transport".into(),
        "eager" => "p2p".into(),
        "report" => "runtime".into(),
        _ => word,
    }
}

/// Every cvar, in the registry's order (the cvar index).
pub fn all() -> &'static [Cvar] {
    static ALL: OnceLock<Vec<Cvar>> = OnceLock::new();
    ALL.get_or_init(|| KNOBS.iter().map(describe).collect())
}

pub fn datatype(k: Kind) -> MPI_Datatype {
    match k {
        Kind::Int | Kind::Choice(_) => MPI_INT,
        Kind::Ull => MPI_UNSIGNED_LONG_LONG,
        Kind::Str => MPI_CHAR,
    }
}

/// Elements a handle of a cvar of this kind reads and writes.
pub fn count(k: Kind) -> c_int {
    match k {
        Kind::Str => STR_COUNT as c_int,
        _ => 1,
    }
}

/// A cvar's value, as read or written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Int(c_int),
    Ull(u64),
    Str(String),
}

/// The value in effect of cvar `i` (a valid index).
pub fn read(i: usize) -> Value {
    let c = &all()[i];
    let text = config::text(c.name);
    let text = text.as_deref().map(str::trim);
    match c.kind {
        Kind::Int => Value::Int(
            text.and_then(|t| t.parse().ok())
                .unwrap_or_else(|| c.default.parse().unwrap_or(0)),
        ),
        Kind::Ull => Value::Ull(
            text.and_then(|t| t.parse().ok())
                .unwrap_or_else(|| c.default.parse().unwrap_or(0)),
        ),
        Kind::Str => Value::Str(text.unwrap_or(c.default).to_string()),
        Kind::Choice(items) => {
            let t = text.unwrap_or(c.default);
            let v = match items.iter().position(|x| x.eq_ignore_ascii_case(t)) {
                Some(p) => p as c_int,
                // Not a word of the enumeration: a number written through MPI_T reads back
                // as written; anything else reads -1 (the library rejects it where it is
                // used, as it does an invalid environment value).
                None => t.parse().unwrap_or(-1),
            };
            Value::Int(v)
        }
    }
}

/// Sets cvar `i` to `v` (of its kind), when the library honours it now.
pub fn write(i: usize, v: Value) -> TResult<()> {
    let c = &all()[i];
    match c.when {
        When::Never => return Err(MPI_T_ERR_CVAR_SET_NEVER),
        When::UntilFinalize if crate::state::is_finalized() => {
            return Err(MPI_T_ERR_CVAR_SET_NOT_NOW)
        }
        _ => {}
    }
    let text = match (c.kind, v) {
        (Kind::Int, Value::Int(x)) => x.to_string(),
        (Kind::Ull, Value::Ull(x)) => x.to_string(),
        (Kind::Str, Value::Str(s)) => s,
        // An integer outside the enumeration is kept (MPICH does the same, and its tests
        // write arbitrary values and read them back): the knob then holds that text, which
        // the collectives reject with MPI_ERR_ARG naming the knob, as they do the same
        // text in the environment.
        (Kind::Choice(items), Value::Int(x)) => usize::try_from(x)
            .ok()
            .and_then(|p| items.get(p))
            .map_or_else(|| x.to_string(), |s| s.to_string()),
        _ => return Err(MPI_T_ERR_INVALID),
    };
    config::set(c.name, &text);
    if c.name.starts_with("FERRITE_COLL_") {
        crate::coll::plans::reload_knobs();
    }
    if c.name == "FERRITE_EAGER_LIMIT" {
        let limit = config::get::<usize>("FERRITE_EAGER_LIMIT");
        crate::state::try_with(|st| st.p2p.eager_limit = limit);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_knob_is_a_cvar_with_a_sensible_type() {
        assert_eq!(all().len(), KNOBS.len());
        for c in all() {
            if let Kind::Choice(items) = c.kind {
                assert!(
                    items.contains(&c.default),
                    "{}: default {} is not a choice",
                    c.name,
                    c.default
                );
            }
            assert!(!c.area.is_empty());
        }
        let i = all()
            .iter()
            .position(|c| c.name == "FERRITE_COLL_SHM_YIELD_US")
            .unwrap();
        assert_eq!(all()[i].kind, Kind::Int);
        let r = all()
            .iter()
            .position(|c| c.name == "FERRITE_REPORT")
            .unwrap();
        assert_eq!(all()[r].kind, Kind::Str);
        assert_eq!(all()[r].area, "runtime");
    }

    #[test]
    fn constant_knobs_refuse_writes() {
        let i = all()
            .iter()
            .position(|c| c.name == "FERRITE_TRANSPORTS")
            .unwrap();
        assert_eq!(
            write(i, Value::Str("tcp".into())),
            Err(MPI_T_ERR_CVAR_SET_NEVER)
        );
    }
}
