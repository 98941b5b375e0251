//! Builds `gpu-kernels/kernels/` to PTX and places it in `OUT_DIR` for `include_str!`.
//!
//! The same executable doubles as the nvptx "linker" that rustc calls during that
//! nested build: see `lowcon_build`'s crate docs (NOTE [kernel build pipeline]).

use std::path::PathBuf;

use lowcon_build::{ARCH_ENV, KernelBuild, PTX_DIR_ENV, PTX_FILE, PtxCache, TOOLCHAIN_ENV};

fn main() {
    lowcon_build::run_as_linker_if_requested();
    if let Err(e) = build() {
        eprintln!("error: lowcon's GPU kernels could not be built: {e}");
        std::process::exit(1);
    }
}

fn build() -> Result<(), Box<dyn std::error::Error>> {
    for var in [PTX_DIR_ENV, ARCH_ENV, TOOLCHAIN_ENV] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let dest = out_dir.join(PTX_FILE);

    let ptx = if let Some(dir) = std::env::var_os(PTX_DIR_ENV) {
        let src = PathBuf::from(dir).join(PTX_FILE);
        println!("cargo:rerun-if-changed={}", src.display());
        if !src.is_file() {
            return Err(format!("{PTX_DIR_ENV} is set but {} does not exist", src.display()).into());
        }
        src
    } else {
        let kernels = manifest.join("../gpu-kernels/kernels");
        let abi = manifest.join("../gpu-kernels/abi");
        let inputs = [
            kernels.join("src"),
            kernels.join("Cargo.toml"),
            kernels.join("Cargo.lock"),
            abi.join("src"),
            abi.join("Cargo.toml"),
        ];
        for p in &inputs {
            println!("cargo:rerun-if-changed={}", p.display());
        }
        // The abi crate inherits its edition from the workspace's manifest: part of the key,
        // not a reason to rerun.
        let mut key_inputs = inputs.to_vec();
        key_inputs.push(manifest.join("../Cargo.toml"));
        // One build per target directory, not per build-script run (NOTE [kernel cache]).
        let cache = PtxCache::beside(&out_dir);
        KernelBuild::from_env(kernels, out_dir.join("kernels-target"))?.build_cached(&key_inputs, cache.as_ref())?
    };
    let text = std::fs::read_to_string(&ptx).map_err(|e| format!("cannot read {}: {e}", ptx.display()))?;
    use lowcon_abi::kernel_names::{COLL, COLL_THREADS, PUSH_THREADS, TMA_PUSH_REDUCE, TMA_REDUCE, TMA_THREADS};
    let text = lowcon_build::declare_shared(&text)?;
    let text = lowcon_build::set_max_threads(&text, &COLL, COLL_THREADS)?;
    let text = lowcon_build::set_max_threads(&text, &TMA_REDUCE, TMA_THREADS)?;
    let text = lowcon_build::set_max_threads(&text, &TMA_PUSH_REDUCE, PUSH_THREADS)?;
    std::fs::write(&dest, text).map_err(|e| format!("cannot write {}: {e}", dest.display()))?;
    Ok(())
}
