//! The crate's layout rules (docs/design.md, "Layout"), checked on the source text so a
//! change that breaks them fails CI:
//!
//! - no `.rs` file under `src/` is over 1,000 lines (files past 800 are listed by
//!   `scripts/test.sh`: a long file is a question, not a rule; docs/design.md, "Layout");
//! - no cycles between sibling modules: a module may use its ancestors' items, its
//!   descendants, and siblings (of any ancestor) that do not use it back, directly or
//!   through other siblings; in every crate of the repository;
//! - three floors, read from `cargo metadata`: a crate under `crates/` may depend on
//!   `host/` and `gpu-kernels/`, one under `host/` on `gpu-kernels/`, never the other way;
//! - each backend's group type lives in a file whose path says `group`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Past this many lines a file fails the test; `scripts/test.sh` lists those past 800
/// (`scripts/long-files.sh`), to be read and split by concern where one file holds two.
const MAX_LINES: usize = 1000;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("readable src dir") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// `src/sync/gpu/mod.rs` -> ["sync", "gpu"]; `src/sync/gpu/failure.rs` -> ["sync", "gpu", "failure"].
fn module_path(file: &Path, src: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut v: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let last = v.pop().expect("file name");
    if last != "mod.rs" && last != "lib.rs" {
        v.push(last.trim_end_matches(".rs").to_string());
    }
    v
}

/// The module paths that `text` (of module `me`) refers to through `crate::`, `super::`
/// and `self::` paths, outside comments.
fn references(text: &str, me: &[String], modules: &BTreeSet<Vec<String>>) -> BTreeSet<Vec<String>> {
    let parent = me[..me.len().saturating_sub(1)].to_vec();
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        for (anchor, base) in [("crate::", Vec::new()), ("super::", parent.clone()), ("self::", me.to_vec())] {
            let mut rest = code;
            while let Some(i) = rest.find(anchor) {
                // Skip matches inside longer identifiers (e.g. `lowcon_crate::`).
                let before = rest[..i].chars().last();
                rest = &rest[i + anchor.len()..];
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let mut path = base.clone();
                let mut tail = rest;
                loop {
                    let ident: String = tail.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if ident.is_empty() {
                        break;
                    }
                    let mut next = path.clone();
                    next.push(ident.clone());
                    if !modules.contains(&next) {
                        break;
                    }
                    path = next;
                    tail = &tail[ident.len()..];
                    match tail.strip_prefix("::") {
                        Some(t) => tail = t,
                        None => break,
                    }
                }
                out.insert(path);
            }
        }
    }
    out
}

#[test]
fn no_file_is_over_1000_lines() {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    assert!(files.len() > 10, "found only {} files under src/", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).expect("readable").lines().count();
            (n > MAX_LINES).then(|| format!("{} ({n} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines: {long:?}");
}

/// The edges between sibling modules of the crate whose sources are under `src`: for a
/// reference from A to B, the children of their deepest common ancestor that contain A
/// and B (none when one contains the other).
fn sibling_edges(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_path(f, src)).collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for f in &files {
        let me = module_path(f, src);
        let text = std::fs::read_to_string(f).expect("readable");
        for target in references(&text, &me, &modules) {
            let common = me.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == me.len() || common == target.len() {
                continue; // ancestor or descendant
            }
            let from = me[..=common].to_vec();
            let to = target[..=common].to_vec();
            edges.entry(from).or_default().insert(to);
        }
    }
    edges
}

/// A cycle among the siblings of `edges`, as module paths, if there is one.
fn find_cycle(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<String> {
    // Depth-first search.
    fn visit(
        n: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        match state.get(n) {
            Some(1) => {
                let i = stack.iter().position(|s| s == n).expect("on stack");
                let mut c = stack[i..].to_vec();
                c.push(n.clone());
                return Some(c);
            }
            Some(2) => return None,
            _ => {}
        }
        state.insert(n.clone(), 1);
        stack.push(n.clone());
        for m in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, edges, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(n.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        let mut stack = Vec::new();
        if let Some(c) = visit(n, edges, &mut state, &mut stack) {
            return Some(c.iter().map(|p| p.join("::")).collect::<Vec<_>>().join(" -> "));
        }
    }
    None
}

#[test]
fn sibling_modules_form_no_cycle() {
    let edges = sibling_edges(&src_dir());
    if let Some(c) = find_cycle(&edges) {
        panic!("sibling modules form a cycle: {c}");
    }
    // The stages are really used in order (the check above would pass on no edges).
    let top = |a: &str, b: &str| edges.get(&vec![a.to_string()]).is_some_and(|s| s.contains(&vec![b.to_string()]));
    assert!(top("coll", "sync") && top("sync", "memory") && top("memory", "rendezvous"), "{edges:?}");
}

/// The workspace's packages as `cargo metadata` lists them: (name, directory relative to
/// the repository, path dependencies by name), plus the device crate (its own workspace).
fn packages() -> Vec<(String, PathBuf, Vec<String>)> {
    let root = repo_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut out = Vec::new();
    for manifest in [root.join("Cargo.toml"), root.join("gpu-kernels/kernels/Cargo.toml")] {
        let o = std::process::Command::new(&cargo)
            .args(["metadata", "--format-version", "1", "--no-deps", "--offline", "--manifest-path"])
            .arg(&manifest)
            .output()
            .expect("cargo metadata runs");
        assert!(o.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("cargo metadata's JSON");
        for p in v["packages"].as_array().expect("packages") {
            let dir = Path::new(p["manifest_path"].as_str().expect("manifest_path")).parent().expect("a dir");
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["path"].is_string())
                .map(|d| d["name"].as_str().expect("name").to_string())
                .collect();
            let rel = dir.strip_prefix(&root).expect("inside the repository").to_path_buf();
            out.push((p["name"].as_str().expect("name").to_string(), rel, deps));
        }
    }
    out
}

/// The floor of a package directory: 3 for `crates/` (what users run), 2 for `host/`
/// (the library and its store), 1 for `gpu-kernels/` (the device side); `None` outside
/// them (`tests/`).
fn floor(dir: &Path) -> Option<u8> {
    let top = dir.components().next()?.as_os_str().to_str()?;
    match top {
        "crates" => Some(3),
        "host" => Some(2),
        "gpu-kernels" => Some(1),
        _ => None,
    }
}

#[test]
fn no_dependency_points_up_a_floor() {
    let pkgs = packages();
    let dir_of: BTreeMap<&str, &Path> = pkgs.iter().map(|(n, d, _)| (n.as_str(), d.as_path())).collect();
    assert!(pkgs.len() >= 9, "cargo metadata listed only {pkgs:?}");
    let mut up = Vec::new();
    for (name, dir, deps) in &pkgs {
        let Some(mine) = floor(dir) else { continue };
        for d in deps {
            let theirs = dir_of.get(d.as_str()).and_then(|p| floor(p));
            if theirs.is_none_or(|t| t > mine) {
                up.push(format!(
                    "{name} ({}) -> {d} ({})",
                    dir.display(),
                    dir_of.get(d.as_str()).map_or("?".into(), |p| p.display().to_string())
                ));
            }
        }
    }
    assert!(
        up.is_empty(),
        "dependencies pointing up a floor or out of the floors (crates/ > host/ > gpu-kernels/): {up:?}"
    );
    // The check sees the floors it is about.
    for (name, f) in [("lowcon-cli", 3), ("lowcon", 2), ("lowcon-store", 2), ("lowcon-abi", 1), ("lowcon-kernels", 1)] {
        assert_eq!(dir_of.get(name).and_then(|p| floor(p)), Some(f), "{name}: {dir_of:?}");
    }
}

#[test]
fn no_crate_has_a_module_cycle() {
    let root = repo_root();
    let mut cycles = Vec::new();
    let mut seen = 0;
    for (name, dir, _) in packages() {
        let src = root.join(&dir).join("src");
        if !src.is_dir() {
            continue;
        }
        seen += 1;
        if let Some(c) = find_cycle(&sibling_edges(&src)) {
            cycles.push(format!("{name}: {c}"));
        }
    }
    assert!(seen >= 9, "only {seen} crates with sources");
    assert!(cycles.is_empty(), "module cycles: {cycles:?}");
}

#[test]
fn the_cycle_check_sees_a_cycle() {
    // The reference scanner on a made-up pair of modules that use each other.
    let modules: BTreeSet<Vec<String>> = [vec![], vec!["a".to_string()], vec!["b".to_string()]].into_iter().collect();
    let a = references("use crate::b::Thing;\n// use crate::a::no", &["a".into()], &modules);
    let b = references("use super::a::Other;", &["b".into()], &modules);
    assert!(a.contains(&vec!["b".to_string()]) && !a.contains(&vec!["a".to_string()]), "{a:?}");
    assert!(b.contains(&vec!["a".to_string()]), "{b:?}");
}

#[test]
fn group_types_live_in_group_files() {
    for (ty, file) in [("pub struct GpuGroup", "group/gpu.rs"), ("pub struct HostGroup", "group/host.rs")] {
        let text = std::fs::read_to_string(src_dir().join(file)).unwrap_or_default();
        assert!(text.contains(ty), "{ty} is not in src/{file}");
    }
}

/// The repository's root (this crate is `host/`).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

/// Every file under `dir` whose name ends with one of `exts`, skipping build output,
/// tools, caches and, unless `runs`, the recorded runs (`docs/runs/`: logs and data, not
/// sources).
fn repo_files(dir: &Path, exts: &[&str], runs: bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries {
        let p = e.expect("dir entry").path();
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if p.is_dir() {
            let skip = name.starts_with('.')
                || ["target", "bundle", "__pycache__", "node_modules"].contains(&name.as_str())
                || (!runs && p.ends_with("docs/runs"));
            if !skip {
                repo_files(&p, exts, runs, out);
            }
        } else if exts.iter().any(|x| name.ends_with(&format!(".{x}"))) {
            out.push(p);
        }
    }
}

#[test]
fn no_source_or_doc_file_in_the_repository_is_over_1000_lines() {
    // Every crate, the kernels, the tests, the Python package, the scripts and the docs.
    let mut files = Vec::new();
    repo_files(&repo_root(), &["rs", "py", "sh", "c", "h", "md", "toml"], false, &mut files);
    assert!(files.len() > 100, "found only {} files in the repository", files.len());
    for must in ["crates/lowcon-py/python/lowcon/__init__.py", "scripts/test.sh", "gpu-kernels/kernels/src/lib.rs"] {
        assert!(files.contains(&repo_root().join(must)), "{must} not among the checked files");
    }
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).map(|t| t.lines().count()).unwrap_or(0);
            (n > MAX_LINES).then(|| format!("{} ({n} lines)", f.strip_prefix(repo_root()).unwrap_or(f).display()))
        })
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines (split them by concern): {long:?}");
}

/// The relative link targets of a Markdown text: `[text](target)` and `[text]: target`,
/// without their `#fragment`; web, mail and in-page links are not relative.
fn relative_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut targets = Vec::new();
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            if let Some(end) = rest.find(')') {
                targets.push(rest[..end].to_string());
            }
        }
        let t = line.trim_start();
        if t.starts_with('[')
            && let Some(i) = t.find("]: ")
        {
            targets.push(t[i + 3..].trim().to_string());
        }
        for target in targets {
            let target = target.split_whitespace().next().unwrap_or("").trim_matches(['<', '>']).to_string();
            let path = target.split('#').next().unwrap_or("").to_string();
            let external = target.contains("://") || target.starts_with("mailto:");
            if !external && !path.is_empty() {
                out.push(path);
            }
        }
    }
    out
}

#[test]
fn every_relative_markdown_link_resolves() {
    let mut files = Vec::new();
    repo_files(&repo_root(), &["md"], true, &mut files); // the recorded runs' READMEs too
    assert!(files.len() > 10, "found only {} Markdown files", files.len());
    let mut broken = Vec::new();
    let mut seen = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).expect("readable");
        for link in relative_links(&text) {
            seen += 1;
            let target = f.parent().expect("in a folder").join(&link);
            if !target.exists() {
                broken.push(format!("{}: {link}", f.strip_prefix(repo_root()).unwrap_or(f).display()));
            }
        }
    }
    assert!(seen > 10, "found only {seen} relative links");
    assert!(broken.is_empty(), "relative links that do not resolve: {broken:#?}");
}

#[test]
fn the_link_scanner_sees_relative_links_only() {
    let text = "See [the design](docs/design.md#sync) and [web](https://x.org/a.md), [top](#top).\n\
                [ref]: ../README.md\n```\n[not a link](in/code.md)\n```\n[two](a.md) [three](<b c.md>)";
    assert_eq!(relative_links(text), vec!["docs/design.md", "../README.md", "a.md", "b"]);
}

/// `docs/runs/` stays small enough to hold in one's head and to travel with the tree
/// (`docs/runs/README.md`: READMEs, commands, summary tables and JSON results; raw logs
/// and traces live in git history).
#[test]
fn the_recorded_runs_stay_under_600_files_and_8_mb() {
    fn walk(dir: &Path, files: &mut usize, bytes: &mut u64) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, files, bytes);
            } else {
                *files += 1;
                *bytes += std::fs::metadata(&p).unwrap().len();
            }
        }
    }
    let (mut files, mut bytes) = (0, 0);
    walk(&repo_root().join("docs/runs"), &mut files, &mut bytes);
    assert!(files > 0, "docs/runs is empty: the walk found nothing");
    assert!(
        files <= 600 && bytes <= 8_000_000,
        "docs/runs holds {files} files and {bytes} bytes, past 600 files or 8 MB: keep each run's README, \
         commands, summary tables and JSON results, and leave raw logs and traces to git history (naming the \
         commit that holds them in the run's README)"
    );
}

/// The table rows under `heading` in `text`: from the heading to the next `## `.
fn table_rows(text: &str, heading: &str) -> Vec<String> {
    let at = text.find(heading).unwrap_or_else(|| panic!("no {heading:?}"));
    let rest = &text[at + heading.len()..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    rest[..end].lines().filter(|l| l.starts_with('|')).map(str::to_string).collect()
}

/// One "today": README's "Where it stands" is rows of `docs/benchmarks.md`'s "Today's
/// numbers", word for word (its links one folder up), so the two cannot disagree.
#[test]
fn readmes_numbers_are_todays_numbers_word_for_word() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let bench = std::fs::read_to_string(root.join("docs/benchmarks.md")).unwrap();
    let today = table_rows(&bench, "## Today's numbers");
    let ours: Vec<String> =
        table_rows(&readme, "## Where it stands").iter().map(|r| r.replace("](docs/", "](")).collect();
    assert!(today.len() > 10 && ours.len() > 5, "today {} rows, README {} rows", today.len(), ours.len());
    assert_eq!(ours[..2], today[..2], "README's table has another header than today's");
    for row in &ours[2..] {
        assert!(today.contains(row), "README's row is not in docs/benchmarks.md's today's numbers: {row}");
    }
}

/// Inside `host/src`, an item is named by the module that defines it, not through
/// `lib.rs`'s re-exports (`crate::Result`, `crate::GpuGroup`): a re-export is for users,
/// and naming it inside makes modules depend on the crate root.
#[test]
fn no_module_names_an_item_through_the_crate_roots_reexports() {
    let src = src_dir();
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let mut names = Vec::new();
    for stmt in lib.split(';').map(str::trim).filter(|s| s.starts_with("pub use ")) {
        let items = match (stmt.find('{'), stmt.rfind('}')) {
            (Some(a), Some(b)) => stmt[a + 1..b].to_string(),
            _ => stmt.rsplit("::").next().unwrap().to_string(),
        };
        names.extend(items.split(',').map(|n| n.trim().rsplit(" as ").next().unwrap().trim().to_string()));
    }
    names.retain(|n| !n.is_empty());
    assert!(names.iter().any(|n| n == "Result") && names.iter().any(|n| n == "GpuGroup"), "{names:?}");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for f in files.iter().filter(|f| !f.ends_with("lib.rs")) {
        let text = std::fs::read_to_string(f).unwrap();
        // `use crate::{A, b::C}`: the names directly inside the braces.
        for (i, _) in text.match_indices("crate::{") {
            let inner = &text[i + 8..i + 8 + text[i + 8..].find('}').unwrap_or(0)];
            for item in inner.split(',').map(|x| x.trim().split(" as ").next().unwrap().trim()) {
                if names.iter().any(|n| n == item) {
                    found.push(format!("{}: crate::{{{item}}}", f.strip_prefix(&src).unwrap().display()));
                }
            }
        }
        for n in &names {
            let pat = format!("crate::{n}");
            for (i, _) in text.match_indices(&pat) {
                let next = text[i + pat.len()..].chars().next();
                if next.is_none_or(|c| !(c.is_alphanumeric() || c == '_')) {
                    found.push(format!("{}: {pat}", f.strip_prefix(&src).unwrap().display()));
                }
            }
        }
    }
    assert!(found.is_empty(), "named through lib.rs's re-exports (name the defining module): {found:?}");
}

/// A resolved plan is a closed type (`AgAlgo`, `RsAlgo`, `ArrivalForm`, `LaunchForm`):
/// the code that executes plans (`host/src/coll`) never sees, so never matches, an `Auto`
/// outside its tests. The caller's options still say `auto`; the planner resolves them.
#[test]
fn the_collectives_match_on_no_auto() {
    let mut files = Vec::new();
    rust_files(&src_dir().join("coll"), &mut files);
    assert!(files.len() > 10, "{} files under coll/", files.len());
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        for (n, line) in code.lines().enumerate() {
            let line = line.split("//").next().unwrap();
            if line.contains("::Auto") {
                found.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "the collectives see an Auto the planner should have resolved: {found:#?}");
}
