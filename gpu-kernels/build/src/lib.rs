//! Build helpers: turn `gpu-kernels/` (no_std Rust) into PTX for `host/build.rs`.
//!
//! NOTE [kernel build pipeline]: rustc's `nvptx64-nvidia-cuda` target emits LLVM
//! bitcode objects and expects an external "linker" (`llvm-bitcode-linker`, a rustup
//! component that is not downloadable here) to turn them into PTX. We do that step
//! ourselves with the `llvm-tools` component:
//!
//! 1. `host/build.rs` runs a nested `cargo build` of the kernel crate on nightly with
//!    `-Zbuild-std=core`, and names *its own executable* as the nvptx linker, with
//!    [`LINKER_MODE_ENV`] set.
//! 2. rustc then re-runs the build script binary with the linker's arguments
//!    (`--export-symbol SYM`, inputs, `-L DIR`, `--target`, `--target-cpu`, `-o`,
//!    `-O<n>`, `--debug`); [`run_as_linker_if_requested`] notices the variable and links:
//!    unpack the rlibs (`core`, `compiler_builtins`) with `llvm-ar`, keep the bitcode
//!    members, `llvm-link` everything, `opt` with `internalize` of the exported kernels
//!    followed by `globaldce`, then `llc -mcpu=sm_XX -mattr=+ptx80` to PTX.
//! 3. `host/build.rs` post-processes the PTX: [`declare_shared`] adds the dynamic
//!    shared-memory array the bulk-copy kernels use, [`set_max_threads`] the launch
//!    bounds.
//!
//! This keeps the whole pipeline in Rust and in the repository, needs no CUDA toolkit at
//! build time, and fails with an error that names the missing tool or component.

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

pub mod cache;
pub use cache::PtxCache;

/// Set (to `1`) in the environment of the nested cargo so that the build script binary,
/// re-run by rustc as the nvptx linker, links instead of building.
pub const LINKER_MODE_ENV: &str = "LOWCON_NVPTX_LINKER_MODE";
/// Directory holding `llvm-link`, `opt`, `llc` and `llvm-ar`, passed to the linker mode.
pub const LLVM_TOOLS_ENV: &str = "LOWCON_LLVM_TOOLS_DIR";
/// Use prebuilt PTX from this directory instead of building the kernels (machines
/// without nightly). It must contain [`PTX_FILE`].
pub const PTX_DIR_ENV: &str = "LOWCON_PTX_DIR";
/// The GPU architecture to build for (default [`DEFAULT_ARCH`]).
pub const ARCH_ENV: &str = "LOWCON_CUDA_ARCH";
/// The rustup toolchain used for the kernels (default `nightly`).
pub const TOOLCHAIN_ENV: &str = "LOWCON_KERNEL_TOOLCHAIN";
/// The default GPU architecture: Hopper (H100/H200).
pub const DEFAULT_ARCH: &str = "sm_90";
/// The file name of the PTX produced by the kernel crate.
pub const PTX_FILE: &str = "lowcon_kernels.ptx";
/// The rustc target the kernels are built for.
pub const NVPTX_TARGET: &str = "nvptx64-nvidia-cuda";
/// The PTX ISA version `llc` is asked for (`-mattr=+ptxNN`). LLVM's default for sm_90
/// is 7.8, which lacks what the bulk-copy kernels use: `cp.async.bulk`, mbarrier
/// transaction counts (`mbarrier.arrive.expect_tx`, `complete_tx`) and
/// `fence.proxy.async` need PTX ISA 8.0 (CUDA 12.0 and later drivers JIT it).
pub const PTX_ISA: &str = "ptx80";
/// The dynamic shared-memory array of the kernels: rustc's NVPTX backend cannot declare
/// a `.shared` variable, so [`declare_shared`] adds `.extern .shared .align 128 .b8
/// lowcon_smem[];` to the PTX and kernels take its address in inline PTX (`mov.u64 r,
/// lowcon_smem;`). Its size is the launch's dynamic shared memory.
pub const SHARED_SYMBOL: &str = "lowcon_smem";

/// Why building the kernels failed; every message says what to do about it.
#[derive(Debug)]
pub struct BuildError(String);

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BuildError {}

fn err(msg: impl Into<String>) -> BuildError {
    BuildError(msg.into())
}

/// What to build and where.
#[derive(Clone, Debug)]
pub struct KernelBuild {
    /// `gpu-kernels/` (the directory holding its `Cargo.toml`).
    pub crate_dir: PathBuf,
    /// A private target directory (inside `OUT_DIR`), so the nested cargo never waits on
    /// the outer build's lock. Runs share their PTX through [`PtxCache`] instead.
    pub target_dir: PathBuf,
    /// `sm_90` etc.
    pub arch: String,
    /// rustup toolchain name (`nightly`).
    pub toolchain: String,
    /// The executable rustc should call as the linker (the build script itself).
    pub linker: PathBuf,
}

impl KernelBuild {
    /// A build of `crate_dir` into `target_dir`, configured from the environment
    /// ([`ARCH_ENV`], [`TOOLCHAIN_ENV`]) and linking with the current executable.
    pub fn from_env(crate_dir: PathBuf, target_dir: PathBuf) -> Result<Self, BuildError> {
        let arch = std::env::var(ARCH_ENV).unwrap_or_else(|_| DEFAULT_ARCH.to_string());
        validate_arch(&arch)?;
        let toolchain = std::env::var(TOOLCHAIN_ENV).unwrap_or_else(|_| "nightly".to_string());
        let linker =
            std::env::current_exe().map_err(|e| err(format!("cannot locate the build script executable: {e}")))?;
        Ok(Self { crate_dir, target_dir, arch, toolchain, linker })
    }

    /// Builds the kernels and returns the path of the PTX file.
    pub fn build(&self) -> Result<PathBuf, BuildError> {
        let sysroot = self.toolchain_output("rustc", &["--print", "sysroot"])?;
        let host = self.toolchain_output("rustc", &["--print", "host-tuple"]).or_else(|_| host_from_version(self))?;
        let tools = Path::new(sysroot.trim()).join("lib/rustlib").join(host.trim()).join("bin");
        for tool in ["llvm-link", "opt", "llc", "llvm-ar"] {
            if !tools.join(tool).is_file() {
                return Err(err(format!(
                    "{} not found: install the llvm-tools component with \
                     `rustup component add rust-src llvm-tools --toolchain {}` (or set {PTX_DIR_ENV} to prebuilt PTX)",
                    tools.join(tool).display(),
                    self.toolchain
                )));
            }
        }
        let src = Path::new(sysroot.trim()).join("lib/rustlib/src/rust/library/core");
        if !src.is_dir() {
            return Err(err(format!(
                "rust-src is missing from the {} toolchain (needed by -Zbuild-std=core): \
                 `rustup component add rust-src llvm-tools --toolchain {}` (or set {PTX_DIR_ENV} to prebuilt PTX)",
                self.toolchain, self.toolchain
            )));
        }

        let mut cmd = Command::new("rustup");
        cmd.args(["run", &self.toolchain, "cargo", "build", "--release", "--locked", "-Zbuild-std=core"])
            .arg("--target")
            .arg(NVPTX_TARGET)
            .arg("--manifest-path")
            .arg(self.crate_dir.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&self.target_dir);
        scrub_cargo_env(&mut cmd);
        // The target's default linker flavor is `llbc`, so `-C linker` alone selects our linker.
        let flags = [format!("-Ctarget-cpu={}", self.arch)];
        cmd.env("CARGO_ENCODED_RUSTFLAGS", flags.join("\u{1f}"))
            .env("CARGO_TARGET_NVPTX64_NVIDIA_CUDA_LINKER", &self.linker)
            .env(LINKER_MODE_ENV, "1")
            .env(LLVM_TOOLS_ENV, &tools);
        let out = cmd.output().map_err(|e| {
            err(format!(
                "cannot run `rustup run {} cargo`: {e}; install rustup and a nightly toolchain, or set {PTX_DIR_ENV}",
                self.toolchain
            ))
        })?;
        if !out.status.success() {
            return Err(err(format!(
                "building the GPU kernels failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let ptx = self.target_dir.join(NVPTX_TARGET).join("release").join(PTX_FILE);
        if !ptx.is_file() {
            return Err(err(format!("the kernel build succeeded but {} was not produced", ptx.display())));
        }
        Ok(ptx)
    }

    /// [`build`](Self::build) through `cache` (NOTE [kernel cache] in `cache.rs`): the
    /// cached PTX when one was built from the same `inputs` (the files and folders the
    /// kernels are built from), architecture and toolchain; else a build, stored there.
    /// Without a cache, a plain build.
    pub fn build_cached(&self, inputs: &[PathBuf], cache: Option<&PtxCache>) -> Result<PathBuf, BuildError> {
        let Some(cache) = cache else { return self.build() };
        let version = self.toolchain_output("rustc", &["-vV"])?;
        let key = cache::key(inputs, &[&self.arch, &self.toolchain, &version])?;
        if let Some(hit) = cache.get(&key) {
            return Ok(hit);
        }
        let ptx = self.build()?;
        cache.put(&key, &ptx)
    }

    fn toolchain_output(&self, tool: &str, args: &[&str]) -> Result<String, BuildError> {
        let mut cmd = Command::new("rustup");
        cmd.args(["run", &self.toolchain, tool]).args(args);
        scrub_cargo_env(&mut cmd);
        let out = cmd.output().map_err(|e| {
            err(format!(
                "cannot run rustup ({e}); a nightly toolchain is needed to build the GPU kernels, or set {PTX_DIR_ENV}"
            ))
        })?;
        if !out.status.success() {
            return Err(err(format!(
                "`rustup run {} {tool} {}` failed: {}(install it with `rustup toolchain install {}`, or set {PTX_DIR_ENV})",
                self.toolchain,
                args.join(" "),
                String::from_utf8_lossy(&out.stderr),
                self.toolchain
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// Checks that `arch` names a GPU architecture (`sm_90`, `sm_90a`, `sm_100`).
pub fn validate_arch(arch: &str) -> Result<(), BuildError> {
    let digits = arch.strip_prefix("sm_").unwrap_or("");
    let num = digits.trim_end_matches('a');
    if num.len() < 2 || !num.chars().all(|c| c.is_ascii_digit()) {
        return Err(err(format!("{ARCH_ENV}={arch:?} is not a GPU architecture such as sm_90")));
    }
    Ok(())
}

/// Older rustc without `--print host-tuple`: read `host:` from `rustc -vV`.
fn host_from_version(b: &KernelBuild) -> Result<String, BuildError> {
    let v = b.toolchain_output("rustc", &["-vV"])?;
    v.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_string)
        .ok_or_else(|| err("cannot determine the host triple from `rustc -vV`"))
}

/// Removes the variables the outer cargo sets for build scripts, so the nested cargo
/// uses the nightly toolchain, its own flags and no shared jobserver.
fn scrub_cargo_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let Some(k) = key.to_str() else { continue };
        let drop = (k.starts_with("CARGO_") && k != "CARGO_HOME")
            || k.starts_with("RUSTC")
            || k.starts_with("RUSTDOC")
            || matches!(
                k,
                "RUSTFLAGS"
                    | "RUSTUP_TOOLCHAIN"
                    | "MAKEFLAGS"
                    | "MFLAGS"
                    | "TARGET"
                    | "HOST"
                    | "OUT_DIR"
                    | "PROFILE"
                    | "OPT_LEVEL"
                    | "DEBUG"
                    | "NUM_JOBS"
            );
        if drop {
            cmd.env_remove(&key);
        }
    }
}

/// If this process was started by rustc as the nvptx linker (see the crate docs), link
/// and exit; otherwise return so the caller continues as a build script.
pub fn run_as_linker_if_requested() {
    if std::env::var_os(LINKER_MODE_ENV).is_none() {
        return;
    }
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match LinkArgs::parse(&args).and_then(|a| link(&a)) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("lowcon nvptx linker: {e}");
            std::process::exit(1);
        }
    }
}

/// The arguments rustc passes to an `llbc`-flavoured linker.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LinkArgs {
    pub exports: Vec<String>,
    pub inputs: Vec<PathBuf>,
    pub target_cpu: Option<String>,
    pub output: Option<PathBuf>,
    pub opt_level: String,
}

impl LinkArgs {
    /// Parses rustc's linker command line; unknown flags are an error so that a change in
    /// rustc's calling convention is noticed, not silently mislinked.
    pub fn parse(args: &[OsString]) -> Result<Self, BuildError> {
        let mut a = LinkArgs { opt_level: "3".into(), ..Default::default() };
        let mut it = args.iter().map(|s| s.to_string_lossy().into_owned());
        while let Some(arg) = it.next() {
            let mut value = |flag: &str| it.next().ok_or_else(|| err(format!("{flag} needs a value")));
            match arg.as_str() {
                "--export-symbol" => a.exports.push(value("--export-symbol")?),
                "--target" => {
                    let t = value("--target")?;
                    if t != NVPTX_TARGET {
                        return Err(err(format!("unexpected target {t}")));
                    }
                }
                "--target-cpu" => a.target_cpu = Some(value("--target-cpu")?),
                "-o" => a.output = Some(PathBuf::from(value("-o")?)),
                "--debug" => {}
                // Library search paths: every input arrives as a full path, so unused.
                "-L" => {
                    value("-L")?;
                }
                s if s.starts_with("-O") => a.opt_level = s[2..].to_string(),
                s if s.starts_with('-') => return Err(err(format!("unknown linker flag {s:?}"))),
                s => a.inputs.push(PathBuf::from(s)),
            }
        }
        if a.output.is_none() {
            return Err(err("no -o output given"));
        }
        if a.exports.is_empty() {
            return Err(err("no --export-symbol given: the kernel crate exports no kernels"));
        }
        Ok(a)
    }
}

const BITCODE_MAGIC: [u8; 4] = *b"BC\xC0\xDE";
const BITCODE_WRAPPER_MAGIC: [u8; 4] = [0xDE, 0xC0, 0x17, 0x0B];

fn is_bitcode(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    use std::io::Read;
    fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok()
        && (magic == BITCODE_MAGIC || magic == BITCODE_WRAPPER_MAGIC)
}

fn is_archive(path: &Path) -> bool {
    let mut magic = [0u8; 8];
    use std::io::Read;
    fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == b"!<arch>\n"
}

fn run(cmd: &mut Command) -> Result<(), BuildError> {
    let out = cmd.output().map_err(|e| err(format!("cannot run {:?}: {e}", cmd.get_program())))?;
    if !out.status.success() {
        return Err(err(format!("{:?} failed ({}): {}", cmd, out.status, String::from_utf8_lossy(&out.stderr))));
    }
    Ok(())
}

fn link(a: &LinkArgs) -> Result<(), BuildError> {
    let tools =
        PathBuf::from(std::env::var_os(LLVM_TOOLS_ENV).ok_or_else(|| err(format!("{LLVM_TOOLS_ENV} is not set")))?);
    let output = a.output.as_ref().expect("checked in parse");
    let cpu = a.target_cpu.clone().unwrap_or_else(|| DEFAULT_ARCH.into());
    let work = output.with_extension("link.d");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).map_err(|e| err(format!("cannot create {}: {e}", work.display())))?;

    // Collect the bitcode: the crate's own objects, plus the bitcode members of rlibs.
    let mut modules: Vec<PathBuf> = Vec::new();
    for (i, input) in a.inputs.iter().enumerate() {
        if is_archive(input) {
            let dir = work.join(format!("ar{i}"));
            fs::create_dir_all(&dir).map_err(|e| err(format!("cannot create {}: {e}", dir.display())))?;
            run(Command::new(tools.join("llvm-ar"))
                .arg("x")
                .arg(fs::canonicalize(input).unwrap_or(input.clone()))
                .current_dir(&dir))?;
            let mut members: Vec<PathBuf> = fs::read_dir(&dir)
                .map_err(|e| err(format!("cannot list {}: {e}", dir.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| is_bitcode(p))
                .collect();
            members.sort();
            modules.extend(members);
        } else if is_bitcode(input) {
            modules.push(input.clone());
        } else if input.extension().is_some_and(|e| e == "rmeta") {
            continue;
        } else {
            return Err(err(format!("linker input {} is neither bitcode nor an archive", input.display())));
        }
    }
    if modules.is_empty() {
        return Err(err("no bitcode inputs"));
    }

    let linked = work.join("linked.bc");
    run(Command::new(tools.join("llvm-link")).arg("-o").arg(&linked).args(&modules))?;

    let optimized = work.join("opt.bc");
    let level = match a.opt_level.as_str() {
        "0" | "1" | "2" | "3" => a.opt_level.clone(),
        _ => "2".to_string(),
    };
    run(Command::new(tools.join("opt"))
        .arg(format!("--internalize-public-api-list={}", a.exports.join(",")))
        .arg(format!("--passes=internalize,globaldce,default<O{level}>,globaldce"))
        .arg("-o")
        .arg(&optimized)
        .arg(&linked))?;

    run(Command::new(tools.join("llc"))
        .arg("-mtriple=nvptx64-nvidia-cuda")
        .arg(format!("-mcpu={cpu}"))
        .arg(format!("-mattr=+{PTX_ISA}"))
        .arg(format!("-O{level}"))
        .arg("-o")
        .arg(output)
        .arg(&optimized))?;

    let _ = fs::remove_dir_all(&work);
    let ptx = fs::read_to_string(output).map_err(|e| err(format!("cannot read {}: {e}", output.display())))?;
    for sym in &a.exports {
        if !ptx.contains(&format!(".entry {sym}")) {
            return Err(err(format!("exported kernel {sym} is missing from the PTX")));
        }
    }
    Ok(())
}

/// Declares the dynamic shared-memory array [`SHARED_SYMBOL`] (`.extern .shared .align
/// 128 .b8 lowcon_smem[];`) right after the PTX header (`.address_size`), so inline PTX
/// in any kernel can name it. PTX that already has it (`lowcon ptx` exports processed
/// PTX, which `LOWCON_PTX_DIR` feeds back) is returned as it is. Errors if the header
/// is missing.
pub fn declare_shared(ptx: &str) -> Result<String, String> {
    let decl = format!(".extern .shared .align 128 .b8 {SHARED_SYMBOL}[];");
    if ptx.lines().any(|l| l.trim() == decl) {
        return Ok(ptx.to_string());
    }
    let mut out = String::with_capacity(ptx.len() + decl.len() + 2);
    let mut done = false;
    for line in ptx.lines() {
        out.push_str(line);
        out.push('\n');
        if !done && line.trim_start().starts_with(".address_size") {
            out.push('\n');
            out.push_str(&decl);
            out.push('\n');
            done = true;
        }
    }
    if !done {
        return Err("the PTX has no .address_size line to declare the shared array after".into());
    }
    Ok(out)
}

/// Declares `.maxntid threads, 1, 1` on each named kernel of `ptx` (rustc's NVPTX
/// backend has no launch-bounds attribute). Without it `ptxas` may give a kernel more
/// registers than a CTA of `threads` threads can have, and its launch fails with
/// `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`. Errors if a kernel is missing; a kernel that
/// already has the directive (processed PTX fed back) keeps it.
pub fn set_max_threads(ptx: &str, kernels: &[&str], threads: u32) -> Result<String, String> {
    let mut out = String::with_capacity(ptx.len() + kernels.len() * 32);
    let mut done = Vec::new();
    let mut pending: Option<&str> = None;
    let mut lines = ptx.lines().peekable();
    while let Some(line) = lines.next() {
        out.push_str(line);
        out.push('\n');
        if let Some(name) = pending {
            if line.starts_with(')') {
                // Already processed (PTX from `LOWCON_PTX_DIR`): keep the directive.
                if !lines.peek().is_some_and(|l| l.starts_with(".maxntid")) {
                    out.push_str(&format!(".maxntid {threads}, 1, 1\n"));
                }
                done.push(name);
                pending = None;
            }
            continue;
        }
        let decl = line.strip_prefix(".visible ").unwrap_or(line);
        if let Some(rest) = decl.strip_prefix(".entry ") {
            let name = rest.split('(').next().unwrap_or("").trim();
            pending = kernels.iter().copied().find(|k| *k == name);
        }
    }
    if let Some(missing) = kernels.iter().find(|k| !done.contains(k)) {
        return Err(format!("kernel {missing} is not an entry of the PTX (cannot declare .maxntid)"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn declares_max_threads_on_named_entries_only() {
        let ptx = ".visible .entry a(\n\t.param .u32 a_param_0\n)\n{\n\tret;\n}\n.visible .entry b(\n)\n{\n}\n";
        let out = set_max_threads(ptx, &["b"], 512).unwrap();
        assert_eq!(out.matches(".maxntid").count(), 1);
        assert!(out.contains(".visible .entry b(\n)\n.maxntid 512, 1, 1\n{"), "{out}");
        assert_eq!(set_max_threads(&out, &["b"], 512).unwrap(), out, "processing twice changes nothing");
        let e = set_max_threads(ptx, &["c"], 512).unwrap_err();
        assert!(e.contains("kernel c"), "{e}");
    }

    #[test]
    fn declares_the_shared_array_once_after_the_header() {
        let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry a()\n{\n}\n";
        let out = declare_shared(ptx).unwrap();
        let decl = ".extern .shared .align 128 .b8 lowcon_smem[];";
        assert_eq!(out.matches(decl).count(), 1);
        assert!(out.find(decl).unwrap() > out.find(".address_size").unwrap());
        assert!(out.find(decl).unwrap() < out.find(".entry").unwrap());
        assert_eq!(declare_shared(&out).unwrap(), out, "processing twice changes nothing");
        assert!(declare_shared(".version 8.0\n").unwrap_err().contains(".address_size"));
    }

    #[test]
    fn parses_rustc_llbc_invocation() {
        let a = LinkArgs::parse(&os(&[
            "--export-symbol",
            "k1",
            "--export-symbol",
            "k2",
            "a.o",
            "libcore.rlib",
            "-L",
            "/some/dir",
            "--target",
            "nvptx64-nvidia-cuda",
            "--target-cpu",
            "sm_90",
            "-o",
            "out.ptx",
            "-O3",
            "--debug",
        ]))
        .unwrap();
        assert_eq!(a.exports, vec!["k1", "k2"]);
        assert_eq!(a.inputs, vec![PathBuf::from("a.o"), PathBuf::from("libcore.rlib")]);
        assert_eq!(a.target_cpu.as_deref(), Some("sm_90"));
        assert_eq!(a.output, Some(PathBuf::from("out.ptx")));
        assert_eq!(a.opt_level, "3");
    }

    #[test]
    fn rejects_unknown_flags_and_missing_output() {
        let e = LinkArgs::parse(&os(&["--export-symbol", "k", "--frobnicate", "-o", "x"])).unwrap_err();
        assert!(e.to_string().contains("--frobnicate"), "{e}");
        let e = LinkArgs::parse(&os(&["--export-symbol", "k", "a.o"])).unwrap_err();
        assert!(e.to_string().contains("-o"), "{e}");
        let e = LinkArgs::parse(&os(&["a.o", "-o", "x"])).unwrap_err();
        assert!(e.to_string().contains("export"), "{e}");
        let e = LinkArgs::parse(&os(&["--target", "x86_64-unknown-linux-gnu", "-o", "x"])).unwrap_err();
        assert!(e.to_string().contains("unexpected target"), "{e}");
    }

    #[test]
    fn validates_arch_names() {
        for ok in ["sm_90", "sm_90a", "sm_100", "sm_80"] {
            validate_arch(ok).unwrap();
        }
        for bad in ["90", "sm_", "sm_9", "compute_90", "sm_90;rm", "sm_a"] {
            assert!(validate_arch(bad).is_err(), "{bad} accepted");
        }
    }
}
