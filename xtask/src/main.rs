//! `cargo xtask <command>`: set up, build, run, test, install and benchmark iotop-bpf.

mod bench;
mod dist;
mod house;
mod kernels;
mod setup;
mod target;
mod util;

use std::{env, ffi::OsString, os::unix::process::CommandExt, path::PathBuf, process::ExitCode};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use crate::{
    target::Target,
    util::{as_root, cmd, describe, find_in_path, is_root, release_binary, run},
};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Project tasks for iotop-bpf"
)]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what is missing: nightly + rust-src, Debian packages, bpf-linker, and the
    /// tests' tools (idempotent).
    Setup {
        /// Also install the benchmark's peer tools (bpftrace).
        #[arg(long)]
        bench: bool,
    },
    /// Set up, then build the release binary.
    Build,
    /// Build, then run the release binary with ARGS (through sudo when not root).
    Run {
        /// Arguments for iotop-bpf, after `--`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Set up, build, run the workspace tests, then the privileged integration tests as root,
    /// the package check and the kernel matrix.
    Test,
    /// Boot Debian's 5.10, 6.1 and 6.12 kernels under QEMU and run the static binary's check
    /// and the smoke set in each, as root and with the documented capabilities (needs root).
    Kernels(kernels::Args),
    /// Build, then install the binary as /usr/local/bin/iotop-bpf.
    Install,
    /// Compare fio IOPS without a tracer, with iotop-bpf, and with bpftrace (needs root).
    Bench(bench::Args),
    /// Run the real-program corpus (tests/corpus) and print expected vs raised findings,
    /// with precision and recall (needs root). `cargo xtask test` runs it too.
    Eval {
        /// Only the workloads whose name contains this.
        #[arg(long)]
        only: Option<String>,
    },
    /// Build the static binaries for x86-64 and aarch64, then a Debian package and a tarball
    /// of each in target/dist/ (binary, man pages, completions, unit).
    Dist(dist::Args),
    /// Draw who imports whom (the binary's rooms and floors, then the model's), and fail on a
    /// circle or an arrow running back up. `cargo xtask test` runs it too.
    House,
}

fn main() -> ExitCode {
    match task(Cli::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // `{:#}`: the whole context chain on one line, without anyhow's backtrace.
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn task(task: Task) -> Result<()> {
    match task {
        Task::Setup { bench } => setup::setup(if bench {
            setup::Scope::Bench
        } else {
            setup::Scope::Test
        }),
        Task::Build => build().map(drop),
        Task::Run { args } => run_binary(args),
        Task::Test => test(),
        Task::Install => install(),
        Task::Bench(args) => bench::bench(&args),
        Task::Eval { only } => eval(only.as_deref()),
        Task::House => house::house(),
        Task::Kernels(args) => {
            setup::setup(setup::Scope::Test)?;
            kernels::kernels(&args, &build_release()?)
        }
        Task::Dist(args) => {
            setup::setup(setup::Scope::Build)?;
            let targets = args.target.map_or(Target::ALL.to_vec(), |t| vec![t]);
            for target in targets {
                let binary = dist::build_static(target)?;
                let deb = dist::build_deb(target, &binary)?;
                dist::build_tarball(target, &binary)?;
                if args.check {
                    check_package(target, &deb, &binary)?;
                }
            }
            Ok(())
        }
    }
}

fn build() -> Result<PathBuf> {
    setup::setup(setup::Scope::Build)?;
    build_release()
}

/// One binary everywhere, the static one that ships, in one cargo profile (`--release`):
/// each extra build is minutes on 2 cores.
fn build_release() -> Result<PathBuf> {
    dist::build_static(Target::HOST)
}

/// This machine's package installed and checked; another architecture's checked under
/// qemu-user.
fn check_package(target: Target, deb: &std::path::Path, binary: &std::path::Path) -> Result<()> {
    if target == Target::HOST {
        dist::check_deb(deb)
    } else {
        dist::check_foreign(target, deb, binary)
    }
}

fn run_binary(args: Vec<OsString>) -> Result<()> {
    let binary = build()?;
    let mut command = as_root(&binary.to_string_lossy(), &[])?;
    command.args(args);
    // exec, so that the terminal, signals and the exit code are the binary's own.
    let err = command.exec();
    Err(err).with_context(|| format!("could not run `{}`", describe(&command)))
}

fn install() -> Result<()> {
    let binary = build()?;
    let dest = "/usr/local/bin/iotop-bpf";
    let mut command = as_root("install", &[])?;
    command.args(["-m", "0755"]).arg(&binary).arg(dest);
    run(&mut command)?;
    println!("installed {dest}: `sudo iotop-bpf` now works (it needs root for eBPF)");
    Ok(())
}

enum Outcome {
    Passed,
    Failed(String),
    Skipped(String),
}

fn test() -> Result<()> {
    let mut steps: Vec<(&str, Outcome)> = Vec::new();
    let mut record = |name, result: Result<Outcome>| {
        let outcome = result.unwrap_or_else(|err| {
            eprintln!("error: {err:#}");
            Outcome::Failed(format!("{err:#}"))
        });
        let passed = !matches!(outcome, Outcome::Failed(_));
        steps.push((name, outcome));
        passed
    };
    // Later steps need the toolchain and the binary; the two test runs are independent.
    if record(
        "setup",
        setup::setup(setup::Scope::Test).map(|()| Outcome::Passed),
    ) && record(
        "build static binary",
        build_release().map(|_| Outcome::Passed),
    ) {
        record("workspace tests", workspace_tests());
        record("view without BPF tools", view_tests_without_bpf_toolchain());
        record("aarch64 plan tests", aarch64_plan_tests());
        record("house", house::house().map(|()| Outcome::Passed));
        record("privileged tests", privileged_tests());
        record("debian package", debian_package(&release_binary()));
        record("kernel matrix", kernel_matrix());
    } else {
        // The drawing needs neither the toolchain nor the binary.
        record("house", house::house().map(|()| Outcome::Passed));
        for name in [
            "workspace tests",
            "view without BPF tools",
            "aarch64 plan tests",
            "privileged tests",
            "debian package",
            "kernel matrix",
        ] {
            record(
                name,
                Ok(Outcome::Skipped("not run: an earlier step failed".into())),
            );
        }
    }

    println!("\nsummary:");
    for (name, outcome) in &steps {
        match outcome {
            Outcome::Passed => println!("  {name:<22} passed"),
            Outcome::Failed(why) => {
                println!("  {name:<22} FAILED: {}", why.lines().next().unwrap_or(""))
            }
            Outcome::Skipped(why) => println!("  {name:<22} SKIPPED: {why}"),
        }
    }
    let failed = steps
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Failed(_)))
        .count();
    if failed > 0 {
        bail!("{failed} step(s) failed");
    }
    Ok(())
}

/// Unit and render tests; the privileged tests are `#[ignore]` and show as ignored here.
fn workspace_tests() -> Result<Outcome> {
    // The eBPF crate only builds for bpfel-unknown-none (the probe build script builds it).
    run(cmd("cargo").args([
        "test",
        "--release",
        "--workspace",
        "--exclude",
        "iotop-bpf-ebpf",
    ]))?;
    Ok(Outcome::Passed)
}

/// The view's tests as on a machine without the eBPF toolchain: stable Rust, neither nightly
/// nor bpf-linker on PATH, and the eBPF object left empty (`AYA_BUILD_SKIP=1`, see
/// probe/build.rs). Its own target directory, so that the release build is not rebuilt.
fn view_tests_without_bpf_toolchain() -> Result<Outcome> {
    let which = |tool: &str| -> Result<String> {
        let out = cmd("rustup")
            .args(["which", "--toolchain", "stable", tool])
            .output()
            .with_context(|| format!("rustup which {tool}"))?;
        if !out.status.success() {
            bail!(
                "no stable toolchain's {tool}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let (cargo, rustc) = (which("cargo")?, which("rustc")?);
    run(cmd(&cargo)
        .args(["test", "--package", "iotop-bpf", "--lib", "view::"])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", env::var("HOME").unwrap_or_default())
        .env("RUSTC", rustc)
        .env("AYA_BUILD_SKIP", "1")
        .env("CARGO_TARGET_DIR", "target/no-bpf-toolchain"))?;
    Ok(Outcome::Passed)
}

/// The loader's tests (the probe plan's among them) and the stack symboliser's again, built
/// for aarch64 and run under qemu-user: the plan is the kernel's (every captured kernel, both
/// architectures), whatever machine it is made on.
fn aarch64_plan_tests() -> Result<Outcome> {
    let target = Target::Aarch64;
    let mut env = target.build_env()?;
    env.push((
        "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_RUNNER".to_string(),
        format!("qemu-{}-static", target.arch()),
    ));
    for (package, only) in [
        ("iotop-bpf-probe", None),
        ("iotop-bpf", Some("feed::kallsyms")),
    ] {
        let mut command = cmd("cargo");
        command.envs(env.iter().cloned()).args([
            "test",
            "--release",
            "--target",
            target.triple(),
            "--package",
            package,
            "--lib",
        ]);
        if let Some(only) = only {
            command.args(["--", only]);
        }
        run(&mut command)?;
    }
    Ok(Outcome::Passed)
}

/// The kernel matrix, on the static binary (root: skipped visibly without it, failed in CI).
fn kernel_matrix() -> Result<Outcome> {
    if !is_root() {
        let ci = env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
        if ci {
            bail!("the kernel matrix needs root: run as root in CI");
        }
        eprintln!("\nSKIPPED the kernel matrix: not root (`sudo cargo xtask kernels`)\n");
        return Ok(Outcome::Skipped("not root".into()));
    }
    kernels::kernels(&kernels::Args::default(), &release_binary())?;
    Ok(Outcome::Passed)
}

/// The packages of the static binaries: this machine's installs, works and removes cleanly
/// (dpkg needs root: through sudo when not root, skipped like the privileged tests without
/// it); the other architecture's replays under qemu-user as this machine's does.
fn debian_package(binary: &std::path::Path) -> Result<Outcome> {
    for target in Target::ALL {
        if target == Target::HOST {
            continue;
        }
        let binary = dist::build_static(target)?;
        let deb = dist::build_deb(target, &binary)?;
        dist::build_tarball(target, &binary)?;
        dist::check_foreign(target, &deb, &binary)?;
    }
    let deb = dist::build_deb(Target::HOST, binary)?;
    dist::build_tarball(Target::HOST, binary)?;
    if !is_root() && find_in_path("sudo").is_none() {
        let ci = env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
        if ci {
            bail!("installing the package needs root and sudo is not installed: run as root in CI");
        }
        eprintln!("\nSKIPPED the package install check: not root (and no sudo)\n");
        return Ok(Outcome::Skipped("not root".into()));
    }
    dist::check_deb(&deb)?;
    Ok(Outcome::Passed)
}

fn eval(only: Option<&str>) -> Result<()> {
    build()?;
    let mut command = privileged_cargo_test(&["--test", "eval"])?;
    command.arg("--nocapture");
    if let Some(only) = only {
        command.env("IOTOP_BPF_EVAL_FILTER", only);
    }
    let result = run(&mut command);
    let table = util::root_dir().join("target/eval/corpus.md");
    if let Ok(text) = std::fs::read_to_string(&table) {
        println!("\n{text}\n(written to {})", table.display());
    }
    result
}

/// `cargo test` of the integration crate, run as root (through `sudo -E` when not root),
/// with the ignored (privileged) tests selected; append test-binary arguments after it.
fn privileged_cargo_test(selection: &[&str]) -> Result<std::process::Command> {
    let binary = release_binary();
    let binary = binary
        .canonicalize()
        .with_context(|| format!("{} is missing", binary.display()))?;
    let mut command = cmd("cargo");
    command
        // Every test file runs even after one fails: a CI run names every failure at once.
        .args([
            "test",
            "--release",
            "--no-fail-fast",
            "--package",
            "iotop-bpf-integration",
        ])
        .args(selection)
        .env("IOTOP_BPF_BIN", &binary);
    if !is_root() {
        if find_in_path("sudo").is_none() {
            bail!("the privileged tests need root and sudo is not installed: run as root");
        }
        command.args(["--config", r#"target."cfg(all())".runner = ["sudo", "-E"]"#]);
    }
    // `judge_a_guests_run` is not a test of this host: it judges a kernel-matrix guest's
    // files, and `cargo xtask kernels` runs it by name for each guest.
    command.args([
        "--",
        "--ignored",
        "--test-threads=1",
        "--skip",
        "judge_a_guests_run",
    ]);
    Ok(command)
}

fn privileged_tests() -> Result<Outcome> {
    if !is_root() && find_in_path("sudo").is_none() {
        let ci = env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
        if ci {
            bail!("the privileged tests need root and sudo is not installed: run as root in CI");
        }
        eprintln!("\nSKIPPED privileged tests: not root (and no sudo)\n");
        return Ok(Outcome::Skipped("not root".into()));
    }
    // Cargo builds as the user (no root-owned files in target/) and runs each test binary
    // through `sudo -E`, which keeps IOTOP_BPF_BIN and CI.
    run(&mut privileged_cargo_test(&[])?)?;
    let table = util::root_dir().join("target/eval/corpus.md");
    if let Ok(text) = std::fs::read_to_string(&table) {
        println!("\nreal-program corpus:\n{text}");
    }
    Ok(Outcome::Passed)
}
