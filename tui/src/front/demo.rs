//! `iotop-bpf demo`: the catalogue of pathologies, one at a time, for a projector. It makes
//! its own scratch filesystems (ext4, and XFS when mkfs.xfs is there) on loop devices backed
//! by memory, runs each built-in workload in a child process for `--step-seconds` with a
//! caption saying what to look at, and shows it all in the live view (or, with `--batch`,
//! as text reports with the captions between them). Everything it made is removed at the
//! end, on `q`, on Ctrl-C, and on errors.

use std::{
    os::unix::process::CommandExt as _,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use iotop_bpf_loopfs::LoopFs;
use iotop_bpf_probe::privilege;

use super::{app, batch};
use crate::pipeline::Pipeline;

/// What `iotop-bpf demo` is asked to show.
#[derive(Clone, Debug)]
pub struct Options {
    /// Seconds each step runs.
    pub step_seconds: u64,
    /// Text reports with the captions between them, instead of the live view.
    pub batch: bool,
    /// Only these steps (by name), in catalogue order; all when empty.
    pub only: Vec<String>,
    /// Seconds per interval.
    pub delay: Duration,
}

/// One step of the demo.
#[derive(Debug)]
struct Step {
    name: &'static str,
    /// The filesystem it runs on: XFS shows the direct-I/O tail zeroing best.
    xfs: bool,
    /// `iotop-bpf workload ...` arguments; `{dir}` is the step's directory.
    args: &'static [&'static str],
    caption: &'static str,
}

const CATALOGUE: &[Step] = &[
    Step {
        name: "healthy",
        xfs: false,
        args: &["healthy", "--dir", "{dir}"],
        caption: "aligned O_DIRECT, big sequential writes, a database mix: no finding, steady p99",
    },
    Step {
        name: "small-sync",
        xfs: false,
        args: &["small-sync", "--dir", "{dir}", "--count", "100000000"],
        caption: "128 B fsynced appends: AMP ~130x, CRIT write_amplification; Enter: jbd2's share",
    },
    Step {
        name: "lab001",
        xfs: false,
        args: &["lab001", "--dir", "{dir}"],
        caption: "bpf-perf-workshop lab001, a 2 MiB write every 200th; Enter, H, l: bimodal syncs",
    },
    Step {
        name: "dio-tail",
        xfs: true,
        args: &["dio-tail", "--dir", "{dir}", "--count", "200"],
        caption: "O_DIRECT appends from offset 3584: WARN sub_block_tail_write, 512 B zeroed each",
    },
    Step {
        name: "direct-io",
        xfs: false,
        args: &[
            "direct-io",
            "--file",
            "{dir}/direct.dat",
            "--writes",
            "20000",
            "--reads",
            "20000",
        ],
        caption: "plain 4 KiB O_DIRECT writes then reads: Tab to the disk, queue vs device time",
    },
    Step {
        name: "aio-randwrite",
        xfs: false,
        args: &[
            "aio-randwrite",
            "--dir",
            "{dir}",
            "--size",
            "104857600",
            "--seconds",
            "3600",
        ],
        caption: "fio's libaio randwrite (2 jobs, 16 in flight): aqu-sz above 1; H, l: queue",
    },
    Step {
        name: "dstate",
        xfs: false,
        args: &["dstate", "--seconds", "3600"],
        caption: "a parent blocked in vfork: the D state pane, where it waits, long_d_state at 5 s",
    },
];

/// The steps chosen with `--only` (in catalogue order), or all.
fn chosen(only: &[String]) -> Result<Vec<&'static Step>> {
    for name in only {
        if !CATALOGUE.iter().any(|s| s.name == name) {
            let names: Vec<&str> = CATALOGUE.iter().map(|s| s.name).collect();
            bail!("no demo step {name:?}: the steps are {}", names.join(", "));
        }
    }
    Ok(CATALOGUE
        .iter()
        .filter(|s| only.is_empty() || only.iter().any(|o| o == s.name))
        .collect())
}

/// A scratch filesystem named for this demo (`iotop-bpf-demo-PID-FS`, which its test looks
/// for), on a loop device over a file in /dev/shm (so the loop's own backing I/O stays off the
/// disks on screen). Removed on drop.
fn scratch(fs: &str, size_mib: u64) -> Result<LoopFs> {
    let tag = format!("iotop-bpf-demo-{}-{fs}", std::process::id());
    // 4 KiB blocks on ext4 even on a small filesystem (mke2fs picks 1 KiB below 512 MiB).
    let block = (fs == "ext4").then_some(4096);
    LoopFs::create(&tag, fs, size_mib, block).map_err(|e| anyhow::anyhow!(e))
}

/// Kills a step's workload and everything it started (its own process group).
fn stop(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: kill with a process group we created and a valid signal.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = child.wait();
        // The leader is reaped but its workers (aio-randwrite forks jobs) may still be
        // exiting and holding files open on the loop filesystem; unmounting now would fail.
        // Wait, bounded, until the process group is empty.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        // SAFETY: signal 0 only checks whether the group still has members.
        while unsafe { libc::kill(-pid, 0) } == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        return;
    }
    let _ = child.wait();
}

/// The last caption.
const OVER: &str = "demo over: every step shown, the scratch filesystems go when you quit (q)";

/// Runs the steps one after the other in this thread; captions go to `say`.
fn drive(
    steps: &[&Step],
    dirs: &(PathBuf, Option<PathBuf>),
    step_time: Duration,
    stopping: &AtomicBool,
    say: &dyn Fn(String),
) {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
    for (i, step) in steps.iter().enumerate() {
        if stopping.load(Ordering::Relaxed) {
            return;
        }
        let root = match (&dirs.1, step.xfs) {
            (Some(xfs), true) => xfs,
            _ => &dirs.0,
        };
        let dir = root.join(step.name);
        let _ = std::fs::create_dir_all(&dir);
        let args: Vec<String> = step
            .args
            .iter()
            .map(|a| a.replace("{dir}", &dir.to_string_lossy()))
            .collect();
        say(format!(
            "demo {}/{} {}: {}",
            i + 1,
            steps.len(),
            step.name,
            step.caption
        ));
        let started = Instant::now();
        let mut child: Option<Child> = None;
        while started.elapsed() < step_time && !stopping.load(Ordering::Relaxed) {
            // A workload that finished early runs again: the step lasts its time.
            let finished = match child.as_mut().map(Child::try_wait) {
                None | Some(Ok(Some(_)) | Err(_)) => true,
                Some(Ok(None)) => false,
            };
            if finished {
                child = Command::new(&exe)
                    .arg("workload")
                    .args(&args)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .process_group(0)
                    .spawn()
                    .ok();
            }
            thread::sleep(Duration::from_millis(100));
        }
        if let Some(mut child) = child {
            stop(&mut child);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    say(OVER.into());
}

pub fn run(args: &Options) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "the demo needs root: it makes scratch filesystems on loop devices (losetup, mkfs, mount) and loads the probes; run `sudo iotop-bpf demo`"
        );
    }
    let steps = chosen(&args.only)?;
    let env = privilege::check()?;
    let ext4 = scratch("ext4", 1024).context("make the scratch ext4 filesystem")?;
    // XFS when its tools are there; the direct-I/O step runs on ext4 otherwise.
    let xfs = if steps.iter().any(|s| s.xfs) {
        scratch("xfs", 512).ok()
    } else {
        None
    };
    let dirs = (
        ext4.mountpoint.clone(),
        xfs.as_ref().map(|x| x.mountpoint.clone()),
    );
    let step_time = Duration::from_secs(args.step_seconds);
    // The demo's own options for the front ends: every process, no limit, no recording. It
    // publishes nothing for viewers: it is shown, not shared (no endpoint is bound for it).
    let print = batch::PrintOptions {
        json: false,
        pids: Vec::new(),
        max_procs: crate::report::DEFAULT_MAX_PROCS,
        iterations: None,
    };
    let view = app::ViewOptions::default();
    let stopping = Arc::new(AtomicBool::new(false));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    let result = thread::scope(|scope| {
        let (tx, rx) = mpsc::channel::<String>();
        let batch = args.batch;
        let driver = {
            let stopping = Arc::clone(&stopping);
            let steps = steps.clone();
            let dirs = &dirs;
            scope.spawn(move || {
                let say = |caption: String| {
                    if batch {
                        println!("\n=== {caption}\n");
                    } else {
                        let _ = tx.send(caption);
                    }
                };
                drive(&steps, dirs, step_time, &stopping, &say);
                if batch {
                    // The reports stop when the steps are over.
                    // SAFETY: signals our own process; the headless loop prints its last
                    // interval and returns, as on Ctrl-C.
                    unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
                }
            })
        };
        let result = runtime.block_on(async {
            let pipeline = Pipeline::live(&env, args.delay, None, None)?;
            if args.batch {
                batch::run(&print, pipeline, &mut std::io::stdout()).await
            } else {
                app::run_captioned(&view, pipeline, None, Some(rx), None).await
            }
        });
        stopping.store(true, Ordering::Relaxed);
        let _ = driver.join();
        result
    });
    drop(xfs);
    drop(ext4);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_chosen_by_name_in_catalogue_order() {
        let all = chosen(&[]).unwrap();
        assert_eq!(all.len(), CATALOGUE.len());
        let two = chosen(&["dstate".into(), "lab001".into()]).unwrap();
        let names: Vec<&str> = two.iter().map(|s| s.name).collect();
        assert_eq!(names, ["lab001", "dstate"]);
        let err = chosen(&["nope".into()]).unwrap_err().to_string();
        assert!(
            err.contains("no demo step \"nope\"") && err.contains("aio-randwrite"),
            "{err}"
        );
    }

    /// A caption as the live view shows it on the key line.
    fn caption(i: usize, step: &Step) -> String {
        format!(
            "demo {}/{} {}: {}",
            i + 1,
            CATALOGUE.len(),
            step.name,
            step.caption
        )
    }

    #[test]
    fn every_caption_fits_a_100x30_screen_whole() {
        use ratatui::{Terminal, backend::TestBackend};
        let captions = CATALOGUE
            .iter()
            .enumerate()
            .map(|(i, step)| (step.name, caption(i, step)))
            .chain(std::iter::once(("over", OVER.to_string())));
        for (name, caption) in captions {
            let mut app = crate::front::app::App::new(crate::view::UiState {
                caption: Some(caption.clone()),
                ..crate::view::UiState::default()
            });
            app.update(crate::model::fixtures::demo_snapshot());
            let mut terminal = Terminal::new(TestBackend::new(100, 30)).unwrap();
            app.draw(&mut terminal).unwrap();
            let screen = crate::front::capture::screen_text(terminal.backend().buffer());
            let last = screen.lines().last().unwrap_or_default();
            assert_eq!(last.trim_end(), caption, "{name}: cut at 100 columns");
        }
    }

    // The one use of the command line in the commands: the steps' `iotop-bpf workload ...`.
    #[test]
    fn every_step_names_a_workload_that_parses() {
        use clap::Parser as _;
        for step in CATALOGUE {
            let args: Vec<String> = std::iter::once("iotop-bpf".to_string())
                .chain(std::iter::once("workload".to_string()))
                .chain(step.args.iter().map(|a| a.replace("{dir}", "/tmp/x")))
                .collect();
            crate::cli::Cli::try_parse_from(&args).unwrap_or_else(|e| panic!("{}: {e}", step.name));
        }
    }
}
