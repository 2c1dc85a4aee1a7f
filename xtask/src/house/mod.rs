//! `cargo xtask house`: a drawing of who imports whom, so the layering is checked, not hoped.
//!
//! The "house" is the binary crate's top-level modules (rooms) with the model crate and the
//! loader crate (`probe/`) as one room each, a drawing of the model's own rooms and one of the
//! loader's, and the kernel side's: the eBPF crate's files and the wire types' (`common/`). An arrow `a → b` says a file of room
//! `a` names a path into room `b` (a `use`, or a `crate::`/`super::`/`self::` or extern-crate
//! path anywhere in the code, macros included; comments and strings are not code). A room's
//! floor is the longest path down from it (a room that imports no other room is on floor 1).
//! The rooms are put in an order from the top down that runs as few arrows up as it can
//! (`drawing::Drawing::order`); an arrow to a room above its own runs back up, and the floors
//! are counted without those. A circle is a set of rooms that all reach each other (a
//! strongly connected component); each circle has an arrow back up.
//!
//! Test code is drawn too (an arrow named only in `#[cfg(test)]` code is marked "tests"),
//! except that a test-only module (`model::tests`, `model::fixtures`) is no room of its own.
//!
//! No parser crate: a small lexer (comments, strings, chars and lifetimes told apart) and a
//! walk over its tokens that keeps track of inline `mod x { .. }` blocks, `#[cfg(test)]`
//! modules and re-exports (`pub use a::B` is seen through, so `crate::model::Snapshot` is an
//! arrow into `model::snapshot`, not into the model's front door).

mod drawing;
mod lex;
mod scan;
mod sizes;
mod tree;

use std::{collections::HashMap, fs, path::PathBuf};

use anyhow::{Context, Result, bail};

use crate::util::root_dir;
use tree::Tree;

/// The debts the house may still carry; `cargo xtask house` fails beyond them. They were
/// 9 floors, 9 arrows back up and 3 circles when the drawing was first made (issue 21); its
/// target, eight floors and no arrow back up or circle, is reached (7 floors now). They may
/// only go down.
const LIMITS: Limits = Limits {
    floors: 7,
    back_arrows: 0,
    circles: 0,
};

struct Limits {
    floors: usize,
    back_arrows: usize,
    circles: usize,
}

/// One crate's sources and where its modules sit in the one namespace of the drawing.
struct CrateSrc {
    /// The directory of its root file.
    dir: PathBuf,
    /// The root file (`lib.rs`, `main.rs`), relative to `dir`.
    root: &'static str,
    /// Where its `crate` is in the namespace (the model crate is mounted at `model`).
    mount: Vec<String>,
}

/// `cargo xtask house`: print both drawings and fail when they carry more than [`LIMITS`].
pub fn house() -> Result<()> {
    let root = root_dir();
    let tui = root.join("tui/src");
    let model_crate = root.join("model/src");
    let mut crates = vec![
        CrateSrc {
            dir: tui.clone(),
            root: "lib.rs",
            mount: vec![],
        },
        CrateSrc {
            dir: tui,
            root: "main.rs",
            mount: vec!["main".into()],
        },
        // The loader was a module of the binary (tui/src/probe) before it was a crate: it is
        // mounted where it was.
        CrateSrc {
            dir: root.join("probe/src"),
            root: "lib.rs",
            mount: vec!["probe".into()],
        },
    ];
    // The model was a module of the binary (tui/src/model) before it was a crate.
    let model_is_a_crate = model_crate.join("lib.rs").exists();
    if model_is_a_crate {
        crates.push(CrateSrc {
            dir: model_crate,
            root: "lib.rs",
            mount: vec!["model".into()],
        });
    }
    let externs = HashMap::from([
        ("iotop_bpf".to_string(), vec![]),
        ("iotop_bpf_model".to_string(), vec!["model".to_string()]),
        ("iotop_bpf_probe".to_string(), vec!["probe".to_string()]),
    ]);
    let tree = Tree::read(&crates, &externs)?;
    let binary = tree.drawing(&[], &["main"]);
    let model = tree.drawing(&["model"], &[]);
    let probe = tree.drawing(&["probe"], &[]);
    print!(
        "{}",
        binary.describe("the binary (iotop-bpf), the model and the loader as one room each")
    );
    print!("{}", model.describe("the model (its rooms)"));
    print!("{}", probe.describe("the loader (probe/, its rooms)"));
    if model_is_a_crate {
        crates_keep_to_their_dependencies(&root)?;
    }
    let kernel = kernel_side(&root)?;
    // The floors are the binary's and the model's measure (the loader's are drawn, as the
    // kernel side's are); none of the three may have an arrow back up or a circle.
    let floors = binary.floors().max(model.floors());
    let drawings = [&binary, &model, &probe];
    let back: usize = drawings.iter().map(|d| d.back_arrows().len()).sum();
    let circles: usize = drawings.iter().map(|d| d.circles().len()).sum();
    if floors > LIMITS.floors || back > LIMITS.back_arrows || circles > LIMITS.circles {
        bail!(
            "the house has {floors} floors, {back} arrows back up and {circles} circles \
             (allowed: {}, {}, {})",
            LIMITS.floors,
            LIMITS.back_arrows,
            LIMITS.circles
        );
    }
    kernel.check()?;
    sizes::sizes(&root)
}

/// The kernel side's debt: its circles. There were 6 when it was first drawn, 3 once the
/// D-state table had a file of its own; a kiocb's layout below `dio` and `throttle` and the
/// `rwbs` length beside the record that holds it took 2 more. The last, the request's path
/// (`block` with `aggregate`, `inflight` and `sync`), went when the ring's records got a
/// module of their own (`emit`) and a completion's description moved beside the in-flight
/// table it completes. None may come back.
const KERNEL_CIRCLES: usize = 0;

/// The eBPF crate's and the wire types' drawings.
struct KernelSide {
    ebpf: drawing::Drawing,
    common: drawing::Drawing,
}

fn kernel_side(root: &std::path::Path) -> Result<KernelSide> {
    let crates = [
        CrateSrc {
            dir: root.join("ebpf/src"),
            root: "main.rs",
            mount: vec!["ebpf".into()],
        },
        CrateSrc {
            dir: root.join("common/src"),
            root: "lib.rs",
            mount: vec!["common".into()],
        },
    ];
    let externs = HashMap::from([("iotop_bpf_common".to_string(), vec!["common".to_string()])]);
    let tree = Tree::read(&crates, &externs)?;
    let side = KernelSide {
        ebpf: tree.drawing(&["ebpf"], &[]),
        common: tree.drawing(&["common"], &[]),
    };
    print!("{}", side.ebpf.describe("the kernel programs (ebpf/)"));
    print!("{}", side.common.describe("the wire types (common/)"));
    Ok(side)
}

impl KernelSide {
    fn check(&self) -> Result<()> {
        let circles = self.ebpf.circles().len() + self.common.circles().len();
        if circles > KERNEL_CIRCLES {
            bail!("the kernel side has {circles} circles (allowed: {KERNEL_CIRCLES})");
        }
        Ok(())
    }
}

/// What the model crate may depend on: the wire types (without their `user` feature, which
/// brings aya) and pure libraries. No aya, tokio, ratatui, crossterm, libc or file system.
const PURE: &[&str] = &["iotop-bpf-common", "serde", "foldhash"];

/// Every crate of the workspace (its folder) and what it may depend on at run time (its
/// `[dependencies]`, not its dev- or build-dependencies), as ARCHITECTURE.md's table of
/// crates says: a new crate, or a new dependency of one, is a decision made in both places.
/// aya stays in the loader (and `common`'s optional `user` feature, which only the loader and
/// the binary turn on).
const CRATES: &[(&str, &[&str])] = &[
    ("common", &["aya", "bytemuck"]),
    ("ebpf", &["iotop-bpf-common", "aya-ebpf"]),
    ("model", PURE),
    (
        "probe",
        &[
            "iotop-bpf-common",
            "aya",
            "anyhow",
            "thiserror",
            "bytemuck",
            "libc",
            "serde",
            "serde_json",
        ],
    ),
    (
        "tui",
        &[
            "iotop-bpf-common",
            "iotop-bpf-model",
            "iotop-bpf-probe",
            "iotop-bpf-loopfs",
            "anyhow",
            "thiserror",
            "bytemuck",
            "clap",
            "crossterm",
            "futures",
            "libc",
            "ratatui",
            "serde",
            "serde_json",
            "tokio",
            "zstd",
            "postcard",
            "prometheus-client",
            "hyper",
            "hyper-util",
            "http-body-util",
            "bytes",
            "foldhash",
            "clap_mangen",
            "clap_complete",
            "unicode-width",
        ],
    ),
    ("loopfs", &[]),
    ("tests", &["iotop-bpf-loopfs", "serde_json", "libc"]),
    ("xtask", &["anyhow", "clap", "iotop-bpf-loopfs", "libc"]),
];

/// The workspace's members are [`CRATES`], and each depends only on what its row allows (the
/// model not on the wire types' `user` feature either).
fn crates_keep_to_their_dependencies(root: &std::path::Path) -> Result<()> {
    let workspace = fs::read_to_string(root.join("Cargo.toml")).context("read Cargo.toml")?;
    let mut members = workspace_members(&workspace);
    members.sort_unstable();
    let mut listed: Vec<&str> = CRATES.iter().map(|(dir, _)| *dir).collect();
    listed.sort_unstable();
    if members != listed {
        bail!(
            "the workspace's members are {members:?}, the house's table of crates lists \
             {listed:?}: add the crate to `CRATES` (xtask/src/house/mod.rs) and to \
             ARCHITECTURE.md's table, with what it may depend on"
        );
    }
    for (dir, allowed) in CRATES {
        let manifest = root.join(dir).join("Cargo.toml");
        let text = fs::read_to_string(&manifest)
            .with_context(|| format!("read {}", manifest.display()))?;
        let mut outside = dependencies_outside(&text, allowed);
        if *dir == "model" && model_turns_on_user(&text) {
            outside.push("iotop-bpf-common with its `user` feature (aya)".into());
        }
        if !outside.is_empty() {
            bail!(
                "{dir} depends on {} ({}): it may depend only on {}",
                outside.join(", "),
                manifest.display(),
                if allowed.is_empty() {
                    "std".to_string()
                } else {
                    allowed.join(", ")
                }
            );
        }
    }
    println!(
        "the crates' dependencies: as listed ({} crates; the model's pure: {})",
        CRATES.len(),
        PURE.join(", ")
    );
    Ok(())
}

/// The `members = [...]` of the workspace manifest.
fn workspace_members(manifest: &str) -> Vec<String> {
    manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("members"))
        .and_then(|rest| rest.split_once('[').map(|(_, list)| list))
        .and_then(|list| list.split_once(']').map(|(list, _)| list))
        .map(|list| {
            list.split(',')
                .map(|m| m.trim().trim_matches('"').to_string())
                .filter(|m| !m.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The run-time dependencies of a manifest (`[dependencies]` and target-specific ones) that
/// are not in `allowed`.
fn dependencies_outside(manifest: &str, allowed: &[&str]) -> Vec<String> {
    runtime_dependencies(manifest)
        .filter(|(name, _)| !allowed.contains(name))
        .map(|(name, _)| name.to_string())
        .collect()
}

/// Whether a manifest turns on the wire types' `user` feature (which brings aya).
fn model_turns_on_user(manifest: &str) -> bool {
    runtime_dependencies(manifest).any(|(_, spec)| spec.contains("\"user\""))
}

/// (name, spec) of each run-time dependency line.
fn runtime_dependencies(manifest: &str) -> impl Iterator<Item = (&str, &str)> {
    let mut section = "";
    manifest.lines().map(str::trim).filter_map(move |line| {
        if line.starts_with('[') {
            section = line;
            return None;
        }
        let runtime = section == "[dependencies]"
            || (section.starts_with("[target.") && section.ends_with(".dependencies]"));
        let (name, spec) = line.split_once('=')?;
        let name = name.trim();
        (runtime && !name.starts_with('#')).then_some((name, spec))
    })
}

/// The model's dependencies that are not [`PURE`], or that turn on the wire types' `user`
/// feature.
#[cfg(test)]
fn impure_dependencies(manifest: &str) -> Vec<String> {
    runtime_dependencies(manifest)
        .filter(|(name, spec)| !PURE.contains(name) || spec.contains("\"user\""))
        .map(|(name, _)| name.to_string())
        .collect()
}

#[cfg(test)]
mod tests;
