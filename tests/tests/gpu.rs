//! The GPU checks under `cargo test`: each skips, saying why, when no GPU is usable,
//! unless `LOWCON_REQUIRE_GPU=1`.

use lowcon::cuda::Device;
use lowcon_tests::{gpu, gpu_required, gpu_unavailable, print_skip};

fn device_or_skip(test: &str) -> Option<Device> {
    if let Some(why) = gpu_unavailable() {
        assert!(!gpu_required(), "LOWCON_REQUIRE_GPU=1 but no GPU is usable: {why}");
        print_skip(test, &why);
        return None;
    }
    Some(Device::open(0).expect("device 0 opens when device_count() > 0"))
}

fn check(r: Result<String, String>) {
    match r {
        Ok(detail) => eprintln!("{detail}"),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn vec_add_matches_cpu() {
    let Some(d) = device_or_skip("vec_add_matches_cpu") else { return };
    for n in [1, 1000, 1_000_003] {
        check(gpu::vec_add(&d, n));
    }
}

#[test]
fn flag_round_trip_system_scope() {
    let Some(d) = device_or_skip("flag_round_trip_system_scope") else { return };
    check(gpu::flag_round_trip(&d, 4096, 1000));
}

#[test]
fn wait_timeout_names_peer() {
    let Some(d) = device_or_skip("wait_timeout_names_peer") else { return };
    check(gpu::wait_timeout_reports_peer(&d));
}
