//! Runs every GPU check on device 0 (or `--device N`) and prints a table; `--quick`
//! uses small sizes (for compute-sanitizer runs). Exits 1 if any
//! check fails and 2 if no GPU is usable. Carried to GPU machines by
//! `scripts/gpu-bundle.sh`.

fn main() {
    let mut args = std::env::args().skip(1);
    let mut index = 0usize;
    let mut quick = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--device" => index = args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| usage()),
            _ => usage(),
        }
    }
    if let Some(why) = lowcon_tests::gpu_unavailable() {
        eprintln!("lowcon-gpu-tests: no GPU to test: {why}");
        std::process::exit(2);
    }
    let device = match lowcon::cuda::Device::open(index) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("lowcon-gpu-tests: {e}");
            std::process::exit(2);
        }
    };
    match (device.info(), lowcon::cuda::driver_version()) {
        (Ok(i), Ok((maj, min))) => println!(
            "device {}: {} (sm_{}{}, {} SMs, {:.0} GiB, pci {}), driver CUDA {maj}.{min}",
            i.index,
            i.name,
            i.compute_capability.0,
            i.compute_capability.1,
            i.sm_count,
            i.total_memory as f64 / (1u64 << 30) as f64,
            i.pci_bus_id
        ),
        (Err(e), _) | (_, Err(e)) => println!("device {index}: info unavailable: {e}"),
    }
    let outcomes = lowcon_tests::gpu::all_checks(&device, quick);
    let (table, failed) = lowcon_tests::table(&outcomes);
    print!("{table}");
    std::process::exit(if failed == 0 { 0 } else { 1 });
}

fn usage() -> ! {
    eprintln!("usage: lowcon-gpu-tests [--device N] [--quick]");
    std::process::exit(2);
}
