//! On a machine without the NVIDIA driver every entry point returns `Error::NoDriver`
//! with a message naming libcuda.so.1; nothing panics.

use std::io::Write;

use lowcon::Error;
use lowcon::cuda::{self, Device};

#[test]
fn missing_driver_is_a_clear_error() {
    if cuda::driver_present() {
        // Not eprintln!: libtest captures that, and the reason should show.
        writeln!(std::io::stderr(), "skipped missing_driver_is_a_clear_error: a CUDA driver is present").ok();
        return;
    }
    let err = Device::open(0).unwrap_err();
    assert!(matches!(err, Error::NoDriver), "{err:?}");
    let msg = err.to_string();
    assert!(msg.starts_with("no CUDA driver (libcuda.so.1) found"), "{msg}");
    assert!(matches!(cuda::device_count(), Err(Error::NoDriver)));
    assert!(matches!(cuda::driver_version(), Err(Error::NoDriver)));
    assert!(matches!(cuda::init(), Err(Error::NoDriver)));
}
