//! The MPI tool information interface (MPI 4.1 chapter 15, "MPI_T"): control variables
//! (cvars.rs), performance variables (pvars.rs), their categories, and the sessions and
//! handles tools allocate. Usable before MPI_Init and after MPI_Finalize, from any thread:
//! its own table behind a leaf lock (`lock_order::TOOL`), taken after a performance
//! variable's sample (which takes the state lock) and never around another lock. Functions
//! return MPI_T_ERR_* codes (`TResult`); MPI_T never calls error handlers.

pub mod cvars;
pub mod pvars;

use crate::consts::*;
use crate::lock_order;
use pvars::Pvar;
use std::collections::BTreeMap;
use std::os::raw::c_int;
use std::sync::{Mutex, OnceLock};

/// An MPI_T result: the error is the code to return.
pub type TResult<T> = Result<T, c_int>;

/// A category: the variables of one area of the library.
pub struct Category {
    pub name: String,
    pub desc: String,
    pub cvars: Vec<c_int>,
    pub pvars: Vec<c_int>,
    pub categories: Vec<c_int>,
}

/// What each area holds, for the categories' descriptions.
const AREAS: &[(&str, &str)] = &[
    (
        "transport",
        "Which transports carry messages, and their traffic",
    ),
    (
        "p2p",
        "Point-to-point messaging: protocols, queues, message counts",
    ),
    (
        "progress",
        "The progress engine: spinning and sleeping while waiting",
    ),
    (
        "shm",
        "The shared-memory transport (peers on the same host)",
    ),
    ("tcp", "The tcp transport"),
    ("udp", "The udp transport (reliable datagrams)"),
    ("ofi", "The libfabric transport"),
    (
        "conn",
        "The connection manager: policy, budget, connections",
    ),
    (
        "coll",
        "Collective operations: algorithm choices and thresholds",
    ),
    ("rma", "One-sided communication"),
    ("runtime", "Start-up, finalize and whole-process figures"),
];

/// Category 0, "ferrite", holds one subcategory per area; each area holds its variables.
pub fn categories() -> &'static [Category] {
    static ALL: OnceLock<Vec<Category>> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut areas: Vec<String> = AREAS.iter().map(|(a, _)| a.to_string()).collect();
        for c in cvars::all() {
            if !areas.contains(&c.area) {
                areas.push(c.area.clone());
            }
        }
        for p in pvars::ALL {
            if !areas.iter().any(|a| a == p.area) {
                areas.push(p.area.to_string());
            }
        }
        let mut out = vec![Category {
            name: "ferrite".into(),
            desc: "Every variable of Ferrite MPI, by area".into(),
            cvars: Vec::new(),
            pvars: Vec::new(),
            categories: Vec::new(),
        }];
        for a in areas {
            let cv: Vec<c_int> = (0..cvars::all().len())
                .filter(|&i| cvars::all()[i].area == a)
                .map(|i| i as c_int)
                .collect();
            let pv: Vec<c_int> = (0..pvars::ALL.len())
                .filter(|&i| pvars::ALL[i].area == a)
                .map(|i| i as c_int)
                .collect();
            if cv.is_empty() && pv.is_empty() {
                continue;
            }
            let desc = AREAS.iter().find(|(n, _)| *n == a).map_or_else(
                || format!("FERRITE_{}_* knobs", a.to_uppercase()),
                |(_, d)| d.to_string(),
            );
            let index = out.len() as c_int;
            out[0].categories.push(index);
            out.push(Category {
                name: a,
                desc,
                cvars: cv,
                pvars: pv,
                categories: Vec::new(),
            });
        }
        out
    })
}

/// A performance variable handle: its variable, session, and (counters) what it counted.
struct PvarHandle {
    session: u64,
    index: usize,
    started: bool,
    /// Counted while started before the last start (or written, or reset).
    accum: u64,
    /// The variable's value at the last start, write or reset.
    base: u64,
}

#[derive(Default)]
struct Tool {
    /// MPI_T_init_thread calls not yet matched by MPI_T_finalize.
    users: u32,
    /// Handles are these ids (never 0, never reused), passed to C as pointers.
    next_id: u64,
    cvar_handles: BTreeMap<u64, usize>,
    sessions: BTreeMap<u64, ()>,
    pvar_handles: BTreeMap<u64, PvarHandle>,
    /// The last sample of the performance variables: what they read while MPI is not
    /// running (zeros before MPI_Init, the last values seen after MPI_Finalize).
    last: Vec<u64>,
}

static TOOL: Mutex<Option<Tool>> = Mutex::new(None);

/// Runs `f` on the table; MPI_T_ERR_NOT_INITIALIZED unless MPI_T is initialized.
fn with<R>(f: impl FnOnce(&mut Tool) -> TResult<R>) -> TResult<R> {
    let mut g = lock_order::lock(&TOOL, lock_order::TOOL);
    match g.as_mut() {
        Some(t) if t.users > 0 => f(t),
        _ => Err(MPI_T_ERR_NOT_INITIALIZED),
    }
}

/// MPI_T_init_thread: counts one more user; returns the thread level provided (every
/// level: the interface is thread-safe).
pub fn init(required: c_int) -> c_int {
    let mut g = lock_order::lock(&TOOL, lock_order::TOOL);
    let t = g.get_or_insert_with(Tool::default);
    t.users += 1;
    required.clamp(MPI_THREAD_SINGLE, MPI_THREAD_MULTIPLE)
}

/// MPI_T_finalize: one user less; the last one frees every session and handle.
pub fn finalize() -> TResult<()> {
    with(|t| {
        t.users -= 1;
        if t.users == 0 {
            let last = std::mem::take(&mut t.last);
            *t = Tool {
                next_id: t.next_id,
                last,
                ..Tool::default()
            };
        }
        Ok(())
    })
}

/// Checks that MPI_T is initialized (for the calls that need nothing else of the table).
pub fn check() -> TResult<()> {
    with(|_| Ok(()))
}

fn new_id(t: &mut Tool) -> u64 {
    t.next_id += 1;
    t.next_id
}

// ----- control variables -----

pub fn cvar_index(i: c_int) -> TResult<usize> {
    usize::try_from(i)
        .ok()
        .filter(|&i| i < cvars::all().len())
        .ok_or(MPI_T_ERR_INVALID_INDEX)
}

/// A handle for cvar `i` (all are bound to no object).
pub fn cvar_handle_alloc(i: c_int) -> TResult<(u64, usize)> {
    let i = cvar_index(i)?;
    with(|t| {
        let id = new_id(t);
        t.cvar_handles.insert(id, i);
        Ok((id, i))
    })
}

pub fn cvar_handle_free(id: u64) -> TResult<()> {
    with(|t| {
        t.cvar_handles
            .remove(&id)
            .map(|_| ())
            .ok_or(MPI_T_ERR_INVALID_HANDLE)
    })
}

/// The cvar index behind handle `id`.
pub fn cvar_of(id: u64) -> TResult<usize> {
    with(|t| {
        t.cvar_handles
            .get(&id)
            .copied()
            .ok_or(MPI_T_ERR_INVALID_HANDLE)
    })
}

// ----- performance variables -----

pub fn pvar_index(i: c_int) -> TResult<usize> {
    usize::try_from(i)
        .ok()
        .filter(|&i| i < pvars::ALL.len())
        .ok_or(MPI_T_ERR_INVALID_INDEX)
}

/// The values now, or the last ones seen when MPI is not running.
fn values(t: &mut Tool, now: Option<Vec<u64>>) -> &[u64] {
    match now {
        Some(v) => t.last = v,
        None if t.last.is_empty() => t.last = vec![0; pvars::ALL.len()],
        None => {}
    }
    &t.last
}

pub fn session_create() -> TResult<u64> {
    with(|t| {
        let id = new_id(t);
        t.sessions.insert(id, ());
        Ok(id)
    })
}

pub fn session_free(s: u64) -> TResult<()> {
    with(|t| {
        t.sessions.remove(&s).ok_or(MPI_T_ERR_INVALID_SESSION)?;
        t.pvar_handles.retain(|_, h| h.session != s);
        Ok(())
    })
}

/// A handle in session `s` for pvar `i`; a continuous variable's handle is started.
pub fn pvar_handle_alloc(s: u64, i: c_int) -> TResult<u64> {
    let now = pvars::sample();
    with(|t| {
        if !t.sessions.contains_key(&s) {
            return Err(MPI_T_ERR_INVALID_SESSION);
        }
        let index = pvar_index(i)?;
        let base = values(t, now)[index];
        let id = new_id(t);
        t.pvar_handles.insert(
            id,
            PvarHandle {
                session: s,
                index,
                started: pvars::ALL[index].continuous(),
                accum: 0,
                base,
            },
        );
        Ok(id)
    })
}

pub fn pvar_handle_free(s: u64, h: u64) -> TResult<()> {
    with(|t| {
        if !t.sessions.contains_key(&s) {
            return Err(MPI_T_ERR_INVALID_SESSION);
        }
        match t.pvar_handles.get(&h) {
            Some(x) if x.session == s => {
                t.pvar_handles.remove(&h);
                Ok(())
            }
            _ => Err(MPI_T_ERR_INVALID_HANDLE),
        }
    })
}

/// Which handles a start/stop/reset acts on.
#[derive(Clone, Copy)]
pub enum Target {
    One(u64),
    /// MPI_T_PVAR_ALL_HANDLES.
    All,
}

/// The handles of session `s` that `target` names (checked), in id order.
fn targets(t: &Tool, s: u64, target: Target) -> TResult<Vec<u64>> {
    if !t.sessions.contains_key(&s) {
        return Err(MPI_T_ERR_INVALID_SESSION);
    }
    match target {
        Target::One(h) => match t.pvar_handles.get(&h) {
            Some(x) if x.session == s => Ok(vec![h]),
            _ => Err(MPI_T_ERR_INVALID_HANDLE),
        },
        Target::All => Ok(t
            .pvar_handles
            .iter()
            .filter(|(_, x)| x.session == s)
            .map(|(&id, _)| id)
            .collect()),
    }
}

/// What a handle reads given the variable's value `now`.
fn handle_value(h: &PvarHandle, now: u64) -> u64 {
    if pvars::ALL[h.index].continuous() {
        return now;
    }
    let running = if h.started {
        now.wrapping_sub(h.base)
    } else {
        0
    };
    h.accum.wrapping_add(running)
}

/// MPI_T_pvar_start (`start`) or MPI_T_pvar_stop. With ALL_HANDLES, continuous variables
/// are left alone; one continuous variable fails with MPI_T_ERR_PVAR_NO_STARTSTOP.
pub fn pvar_start_stop(s: u64, target: Target, start: bool) -> TResult<()> {
    for_handles(
        s,
        target,
        Pvar::continuous,
        MPI_T_ERR_PVAR_NO_STARTSTOP,
        |h, now| {
            if start && !h.started {
                h.base = now;
                h.started = true;
            } else if !start && h.started {
                h.accum = handle_value(h, now);
                h.started = false;
            }
        },
    )
}

/// Applies `f` to each handle `target` names, with its variable's current value. A variable
/// `excluded` says the operation does not apply to fails the call with `refused` when named
/// alone and is skipped under MPI_T_PVAR_ALL_HANDLES, as the standard says for start, stop,
/// reset and write.
fn for_handles(
    s: u64,
    target: Target,
    excluded: fn(&Pvar) -> bool,
    refused: c_int,
    mut f: impl FnMut(&mut PvarHandle, u64),
) -> TResult<()> {
    let now = pvars::sample();
    with(|t| {
        let ids = targets(t, s, target)?;
        let v = values(t, now).to_vec();
        for id in ids {
            let h = t.pvar_handles.get_mut(&id).expect("listed by targets");
            if excluded(&pvars::ALL[h.index]) {
                if matches!(target, Target::One(_)) {
                    return Err(refused);
                }
                continue;
            }
            f(h, v[h.index]);
        }
        Ok(())
    })
}

/// MPI_T_pvar_read, or with `reset` MPI_T_pvar_readreset (atomic: under the lock).
pub fn pvar_read(s: u64, h: u64, reset: bool) -> TResult<u64> {
    let now = pvars::sample();
    with(|t| {
        targets(t, s, Target::One(h))?;
        let v = values(t, now).to_vec();
        let x = t.pvar_handles.get_mut(&h).expect("checked by targets");
        let p = &pvars::ALL[x.index];
        let value = handle_value(x, v[x.index]);
        if reset {
            if p.readonly() {
                return Err(MPI_T_ERR_PVAR_NO_WRITE);
            }
            if !p.atomic() {
                return Err(MPI_T_ERR_PVAR_NO_ATOMIC);
            }
            x.accum = 0;
            x.base = v[x.index];
        }
        Ok(value)
    })
}

/// MPI_T_pvar_write (`Some(value)`) or MPI_T_pvar_reset (`None`, back to 0). A reset of
/// ALL_HANDLES skips the read-only variables; one read-only variable fails with
/// MPI_T_ERR_PVAR_NO_WRITE.
pub fn pvar_set(s: u64, target: Target, value: Option<u64>) -> TResult<()> {
    for_handles(
        s,
        target,
        Pvar::readonly,
        MPI_T_ERR_PVAR_NO_WRITE,
        |h, now| {
            h.accum = value.unwrap_or(0);
            h.base = now;
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests share the process-wide table: one test walks it all.
    #[test]
    fn sessions_handles_and_counters() {
        assert_eq!(check(), Err(MPI_T_ERR_NOT_INITIALIZED));
        assert_eq!(init(MPI_THREAD_MULTIPLE), MPI_THREAD_MULTIPLE);
        assert_eq!(init(MPI_THREAD_SINGLE), MPI_THREAD_SINGLE);
        let s = session_create().unwrap();
        let counter = pvars::ALL
            .iter()
            .position(|p| p.name == "p2p_messages_sent")
            .unwrap() as c_int;
        let level = pvars::ALL
            .iter()
            .position(|p| p.name == "p2p_unexpected_messages")
            .unwrap() as c_int;
        let h = pvar_handle_alloc(s, counter).unwrap();
        let l = pvar_handle_alloc(s, level).unwrap();
        assert_eq!(
            pvar_handle_alloc(s, pvars::ALL.len() as c_int),
            Err(MPI_T_ERR_INVALID_INDEX)
        );
        assert_eq!(
            pvar_handle_alloc(s + 1000, counter),
            Err(MPI_T_ERR_INVALID_SESSION)
        );
        // MPI is not running here: values stay 0, but the handle logic still applies.
        pvar_start_stop(s, Target::All, true).unwrap();
        assert_eq!(
            pvar_start_stop(s, Target::One(l), true),
            Err(MPI_T_ERR_PVAR_NO_STARTSTOP)
        );
        pvar_set(s, Target::One(h), Some(41)).unwrap();
        assert_eq!(pvar_read(s, h, true), Ok(41));
        assert_eq!(pvar_read(s, h, false), Ok(0));
        assert_eq!(
            pvar_set(s, Target::One(l), None),
            Err(MPI_T_ERR_PVAR_NO_WRITE)
        );
        assert_eq!(pvar_read(s, l, true), Err(MPI_T_ERR_PVAR_NO_WRITE));
        pvar_set(s, Target::All, Some(5)).unwrap();
        pvar_start_stop(s, Target::All, false).unwrap();
        assert_eq!(pvar_read(s, h, false), Ok(5));
        session_free(s).unwrap();
        assert_eq!(pvar_read(s, h, false), Err(MPI_T_ERR_INVALID_SESSION));
        let (c, _) = cvar_handle_alloc(0).unwrap();
        assert_eq!(cvar_of(c), Ok(0));
        cvar_handle_free(c).unwrap();
        assert_eq!(cvar_of(c), Err(MPI_T_ERR_INVALID_HANDLE));
        finalize().unwrap();
        finalize().unwrap();
        assert_eq!(finalize(), Err(MPI_T_ERR_NOT_INITIALIZED));
        assert_eq!(session_create(), Err(MPI_T_ERR_NOT_INITIALIZED));
    }

    #[test]
    fn categories_list_every_variable_once() {
        let cats = categories();
        assert_eq!(cats[0].categories.len(), cats.len() - 1);
        let nc: usize = cats.iter().map(|c| c.cvars.len()).sum();
        let np: usize = cats.iter().map(|c| c.pvars.len()).sum();
        assert_eq!(nc, cvars::all().len());
        assert_eq!(np, pvars::ALL.len());
    }
}
