//! Reporting a failed wait to the host through the shared `ErrorRecord`.

use lowcon_abi::{ErrorRecord, status};

use crate::atomics::atom_cas_acq_rel_sys_u32;

/// Fills `err` unless another failure claimed it first (see `ErrorRecord`): the CAS on
/// `code` from `OK` makes the first writer the only writer.
///
/// # Safety
/// `err` must point to a valid `ErrorRecord` (device or host-mapped memory).
pub unsafe fn report_error(err: *mut ErrorRecord, rec: ErrorRecord) {
    // SAFETY: `err` is valid; `code` is its first, 4-byte-aligned field.
    let claimed = unsafe { atom_cas_acq_rel_sys_u32(err.cast::<u32>(), status::OK, rec.code) } == status::OK;
    if claimed {
        // SAFETY: this thread owns the record now (the CAS above); the host reads it
        // only after the stream completes. `code` is rewritten with the same value.
        unsafe { *err = rec };
    }
}
