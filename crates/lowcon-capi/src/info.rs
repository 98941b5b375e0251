//! Result codes as text, the last error of this thread, the version.

use super::*;

/// A short, static description of a result code (taken as an `int`, so that any value,
/// a foreign code included, is safe to pass).
#[unsafe(no_mangle)]
pub extern "C" fn lowconGetErrorString(result: c_int) -> *const c_char {
    let s: &'static CStr = match result {
        0 => c"no error",
        1 => c"unhandled CUDA error",
        2 => c"system or store error",
        3 => c"internal error in lowcon",
        4 => c"invalid argument",
        5 => c"invalid usage (ranks disagree, or the world does not fit)",
        6 => c"remote error: a peer died or timed out, or the communicator was aborted",
        _ => c"unknown result code",
    };
    s.as_ptr()
}

/// The message of the last failing lowcon call on this thread, naming the rank, peer or
/// sizes ("" if none). `comm` may be NULL; the message is per thread. Valid until the
/// next lowcon call on this thread.
#[unsafe(no_mangle)]
pub extern "C" fn lowconGetLastError(comm: lowconComm_t) -> *const c_char {
    let _ = comm;
    LAST.with(|l| l.borrow().as_ptr())
}

/// lowcon's version as MAJOR * 10000 + MINOR * 100 + PATCH.
///
/// # Safety
/// `version` points to writable storage.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconGetVersion(version: *mut c_int) -> lowconResult_t {
    guard(|| write_out(version, "version", self::version()))
}

/// This library's version as MAJOR * 10000 + MINOR * 100 + PATCH.
pub(crate) fn version() -> c_int {
    let v = |s: &str| s.parse::<c_int>().unwrap_or(0);
    v(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
        + v(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + v(env!("CARGO_PKG_VERSION_PATCH"))
}
