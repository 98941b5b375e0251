//! `LOWCON_POOL_TRACE=PATH`: every decision of this process's pools appended to
//! `PATH.<pid>`, one tab-separated line each, so that a framework's allocation sequence
//! (FSDP2's, say) can be replayed against the pool's rules offline (`docs/python.md`,
//! "Memory model"). Off unless set; a file that cannot be opened is reported once on
//! stderr and tracing stays off.
//!
//! Lines: `alloc POOL ID BYTES STREAM SEGMENT OFFSET how` (how: `free` when a free block
//! was taken, `grew` when the pool grew for it, with the pool's bytes after), `free POOL
//! ID`, `trim POOL BYTES`. POOL tells a process's pools apart; STREAM is the raw stream.

use std::fs::File;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

/// The variable.
pub(crate) const POOL_TRACE_ENV: &str = "LOWCON_POOL_TRACE";

fn file() -> Option<&'static Mutex<File>> {
    static TRACE: OnceLock<Option<Mutex<File>>> = OnceLock::new();
    TRACE
        .get_or_init(|| {
            let path = std::env::var(POOL_TRACE_ENV).ok().filter(|p| !p.trim().is_empty())?;
            let path = format!("{path}.{}", std::process::id());
            match File::options().create(true).append(true).open(&path) {
                Ok(f) => Some(Mutex::new(f)),
                Err(e) => {
                    eprintln!("lowcon: {POOL_TRACE_ENV}: cannot open {path}: {e}; no pool trace");
                    None
                }
            }
        })
        .as_ref()
}

/// Appends the line `f()` makes, when tracing is on (`f` is not called otherwise).
pub(crate) fn line(f: impl FnOnce() -> String) {
    if let Some(m) = file() {
        let mut w = m.lock().unwrap_or_else(|p| p.into_inner());
        // A trace is a diagnosis aid: a failed write must not fail the allocation.
        let _ = writeln!(w, "{}", f());
    }
}
