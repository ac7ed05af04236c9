//! The process's PMI client, global so that abort paths can reach the launcher without the
//! state lock. TEMPORARY: singleton only until the ferrite-pmi client lands.

use crate::error::MpiResult;
use std::collections::HashMap;
use std::sync::Mutex;

struct Pmi {
    rank: u32,
    size: u32,
    kvsname: String,
    kvs: HashMap<String, String>,
}

static PMI: Mutex<Option<Pmi>> = Mutex::new(None);

/// Connects to the launcher (or becomes a singleton); returns (rank, size, kvsname).
pub fn init() -> MpiResult<(u32, u32, String)> {
    let p = Pmi {
        rank: 0,
        size: 1,
        kvsname: format!("singleton_{}", std::process::id()),
        kvs: HashMap::new(),
    };
    let out = (p.rank, p.size, p.kvsname.clone());
    *PMI.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
    Ok(out)
}

pub fn put(key: &str, value: &str) -> MpiResult<()> {
    if let Some(p) = PMI.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        p.kvs.insert(key.into(), value.into());
    }
    Ok(())
}

pub fn get(key: &str) -> MpiResult<Option<String>> {
    Ok(PMI
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|p| p.kvs.get(key).cloned()))
}

pub fn barrier() -> MpiResult<()> {
    Ok(())
}

pub fn finalize() -> MpiResult<()> {
    Ok(())
}

pub fn abort(_code: i32, _msg: &str) {}
