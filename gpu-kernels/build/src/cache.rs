//! A cache of built PTX, shared by every run of `host/build.rs` in one target directory.
//!
//! NOTE [kernel cache]: cargo runs the host crate's build script once per distinct build of
//! `lowcon`: clippy, rustdoc, the tests, the C library and the Python wheel each resolve
//! different features of its dependencies, so each gets a build-script run of its own, and
//! each run used to build the kernels again in its own `OUT_DIR` (about 18 s each on a
//! 2-core machine, four times in `scripts/test.sh`). The nested cargo cannot simply share
//! one target directory: rustc's nvptx "linker" is the build script's own executable,
//! whose path differs between runs.
//!
//! So the PTX is cached by content instead: the key hashes every file the kernels are
//! built from (the same paths the build script watches), the architecture, the kernel
//! toolchain's `rustc -vV`, and this crate's own sources (the link pipeline). A hit copies
//! the cached file; a miss builds as before, then stores the result under a temporary name
//! and renames it into place, so a concurrent build never reads half a file. The cache
//! lives beside the outer build's profile directories (`target/lowcon-kernels/`); delete
//! that folder to force a rebuild.

use std::fs;
use std::hash::{DefaultHasher, Hasher};
use std::path::{Path, PathBuf};

use crate::{BuildError, PTX_FILE, err};

/// This crate's sources: a change to the link pipeline changes every key.
const PIPELINE: [&str; 2] = [include_str!("lib.rs"), include_str!("cache.rs")];

/// A folder of PTX files named by [`key`].
#[derive(Clone, Debug)]
pub struct PtxCache {
    dir: PathBuf,
}

impl PtxCache {
    /// The cache of the target directory that holds `out_dir`, a build script's `OUT_DIR`
    /// (`<target>/<profile>/build/<package>-<hash>/out`, or with a target triple between
    /// `<target>` and `<profile>`): `<that parent of the profile>/lowcon-kernels`. `None`
    /// when `out_dir` is not laid out so (the caller then builds without a cache).
    pub fn beside(out_dir: &Path) -> Option<Self> {
        let package = out_dir.parent()?;
        let build = package.parent()?;
        if build.file_name()? != "build" || out_dir.file_name()? != "out" {
            return None;
        }
        let profile_parent = build.parent()?.parent()?;
        Some(Self { dir: profile_parent.join("lowcon-kernels") })
    }

    /// A cache in `dir` (tests).
    pub fn at(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// The cached PTX for `key`, if present.
    pub fn get(&self, key: &str) -> Option<PathBuf> {
        let path = self.path(key);
        path.is_file().then_some(path)
    }

    /// Stores a copy of `ptx` under `key`; returns the cached path.
    pub fn put(&self, key: &str, ptx: &Path) -> Result<PathBuf, BuildError> {
        fs::create_dir_all(&self.dir).map_err(|e| err(format!("cannot create {}: {e}", self.dir.display())))?;
        let dest = self.path(key);
        let tmp = self.dir.join(format!("{key}.{}.tmp", std::process::id()));
        fs::copy(ptx, &tmp).map_err(|e| err(format!("cannot copy {} to {}: {e}", ptx.display(), tmp.display())))?;
        fs::rename(&tmp, &dest)
            .map_err(|e| err(format!("cannot rename {} to {}: {e}", tmp.display(), dest.display())))?;
        Ok(dest)
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}-{PTX_FILE}"))
    }
}

/// The key of a build from `inputs` (files, or folders walked in name order) and `facts`
/// (architecture, toolchain): 16 hex digits of a hash of the inputs' relative paths and
/// contents, the facts, and this crate's sources.
pub fn key(inputs: &[PathBuf], facts: &[&str]) -> Result<String, BuildError> {
    let mut h = DefaultHasher::new();
    for s in PIPELINE.iter().chain(facts) {
        h.write(s.as_bytes());
        h.write_u8(0xff);
    }
    for input in inputs {
        let mut files = Vec::new();
        walk(input, &mut files)?;
        files.sort();
        for f in files {
            let rel = f.strip_prefix(input).unwrap_or(&f);
            h.write(rel.to_string_lossy().as_bytes());
            h.write_u8(0xfe);
            let bytes = fs::read(&f).map_err(|e| err(format!("cannot read {}: {e}", f.display())))?;
            h.write_usize(bytes.len());
            h.write(&bytes);
        }
        h.write_u8(0xfd);
    }
    Ok(format!("{:016x}", h.finish()))
}

fn walk(path: &Path, files: &mut Vec<PathBuf>) -> Result<(), BuildError> {
    if path.is_dir() {
        let entries = fs::read_dir(path).map_err(|e| err(format!("cannot list {}: {e}", path.display())))?;
        for entry in entries {
            let entry = entry.map_err(|e| err(format!("cannot list {}: {e}", path.display())))?;
            walk(&entry.path(), files)?;
        }
    } else if path.is_file() {
        files.push(path.to_path_buf());
    } else {
        return Err(err(format!("{} does not exist: the kernels cannot be built from it", path.display())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lowcon-build-cache-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(d.join("src")).unwrap();
        d
    }

    #[test]
    fn the_cache_sits_beside_the_profiles_of_the_target_directory() {
        let c = PtxCache::beside(Path::new("/w/target/debug/build/lowcon-0123/out")).unwrap();
        assert_eq!(c.dir, Path::new("/w/target/lowcon-kernels"));
        let c = PtxCache::beside(Path::new("/w/target/x86_64-unknown-linux-gnu/release/build/lowcon-9/out")).unwrap();
        assert_eq!(c.dir, Path::new("/w/target/x86_64-unknown-linux-gnu/lowcon-kernels"));
        assert!(PtxCache::beside(Path::new("/tmp/somewhere/out")).is_none());
        assert!(PtxCache::beside(Path::new("/w/target/debug/build/lowcon-0123/other")).is_none());
    }

    #[test]
    fn the_key_follows_every_byte_and_name_of_the_inputs_and_the_facts() {
        let d = scratch("key");
        fs::write(d.join("src/lib.rs"), "fn a() {}").unwrap();
        fs::write(d.join("Cargo.toml"), "[package]").unwrap();
        let inputs = [d.join("src"), d.join("Cargo.toml")];
        let k = key(&inputs, &["sm_90", "nightly"]).unwrap();
        assert_eq!(k.len(), 16);
        assert_eq!(key(&inputs, &["sm_90", "nightly"]).unwrap(), k, "the same inputs give the same key");
        assert_ne!(key(&inputs, &["sm_100", "nightly"]).unwrap(), k, "the architecture is part of the key");
        fs::write(d.join("src/lib.rs"), "fn b() {}").unwrap();
        let k2 = key(&inputs, &["sm_90", "nightly"]).unwrap();
        assert_ne!(k2, k, "a changed source changes the key");
        fs::write(d.join("src/more.rs"), "").unwrap();
        assert_ne!(key(&inputs, &["sm_90", "nightly"]).unwrap(), k2, "an added (even empty) file changes the key");
        fs::remove_file(d.join("src/more.rs")).unwrap();
        fs::rename(d.join("src/lib.rs"), d.join("src/mod.rs")).unwrap();
        assert_ne!(key(&inputs, &["sm_90", "nightly"]).unwrap(), k2, "a renamed file changes the key");
        let e = key(&[d.join("missing")], &[]).unwrap_err().to_string();
        assert!(e.contains("missing") && e.contains("does not exist"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_stored_ptx_is_found_by_its_key_only() {
        let d = scratch("store");
        let ptx = d.join("built.ptx");
        fs::write(&ptx, ".version 8.0\n").unwrap();
        let c = PtxCache::at(d.join("cache"));
        assert!(c.get("00000000000000aa").is_none());
        let stored = c.put("00000000000000aa", &ptx).unwrap();
        assert_eq!(c.get("00000000000000aa").as_deref(), Some(stored.as_path()));
        assert_eq!(fs::read_to_string(&stored).unwrap(), ".version 8.0\n");
        assert!(c.get("00000000000000bb").is_none());
        let leftovers: Vec<_> = fs::read_dir(d.join("cache")).unwrap().filter_map(|e| e.ok()).collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
        fs::remove_dir_all(&d).unwrap();
    }
}
