//! The checked-in header must be what cbindgen makes of `src/` now. Regenerate it
//! with `LOWCON_BLESS=1 cargo test -p lowcon-capi --test header`.

use std::path::Path;

#[test]
fn checked_in_header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let mut fresh = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut fresh);
    let fresh = String::from_utf8(fresh).expect("UTF-8 header");
    let path = dir.join("include/lowcon.h");
    if std::env::var("LOWCON_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &fresh).expect("write include/lowcon.h");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "include/lowcon.h is stale: regenerate it with `LOWCON_BLESS=1 cargo test -p lowcon-capi --test header` \
         and commit it"
    );
    // The header is what C users compile against: the names they use must be in it.
    for name in ["lowconCommInitFromEnv", "lowconAllGatherEx", "lowconReduceScatter", "lowconGetLastError"] {
        assert!(fresh.contains(name), "{name} missing from the header");
    }
}
