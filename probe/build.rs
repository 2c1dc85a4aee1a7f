//! Builds the eBPF object (nightly + bpf-linker, via aya-build) and leaves it in OUT_DIR for
//! `include_bytes_aligned!`. With AYA_BUILD_SKIP=1 (clippy, docs, machines without the eBPF
//! toolchain) an empty placeholder is written instead and loading fails with a clear message.

use std::{env, fs, path::PathBuf};

fn main() -> anyhow::Result<()> {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let object = out_dir.join("iotop-bpf");
    let skip = env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if skip {
        println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
        fs::write(&object, [])?;
        return Ok(());
    }
    let root = env::var("CARGO_MANIFEST_DIR")?;
    let ebpf_dir = PathBuf::from(root).join("../ebpf");
    let ebpf_dir = ebpf_dir
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("non-UTF-8 path"))?;
    println!("cargo:rerun-if-changed={ebpf_dir}/../common/src");
    // aya-build shows everything the inner cargo prints on stderr as a build-script warning:
    // "Compiling core ...", fifty lines of them, which read as breakage. A quiet inner cargo
    // prints only what is wrong (its compiler messages come through its JSON output, which
    // aya-build still shows).
    // SAFETY: set before any thread of this build script starts.
    unsafe { env::set_var("CARGO_TERM_QUIET", "true") };
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "iotop-bpf-ebpf",
            root_dir: ebpf_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}
