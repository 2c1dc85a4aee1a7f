//! tmux for the tests of the terminal UI: start a pane, type, read the screen.

use std::{
    process::Command,
    thread,
    time::{Duration, Instant},
};

use crate::sh;

/// A tmux session of one pane running a command, killed on drop.
pub struct Tmux {
    pub session: String,
}

impl Tmux {
    /// An 80x24 pane running `command` (through the shell).
    pub fn start(name: &str, command: &str) -> Self {
        Self::start_sized(name, (80, 24), command)
    }

    pub fn start_sized(name: &str, (width, height): (u16, u16), command: &str) -> Self {
        let session = format!("iotop-bpf-{name}-{}", std::process::id());
        let (width, height) = (width.to_string(), height.to_string());
        let args = [
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            &width,
            "-y",
            &height,
            command,
        ];
        // The previous test's server may still be exiting (its last session just ended):
        // a new client then gets "server exited unexpectedly". Wait and try again.
        for _ in 0..10 {
            let out = std::process::Command::new("tmux")
                .args(args)
                .output()
                .unwrap();
            if out.status.success() {
                return Self { session };
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        sh("tmux", &args);
        Self { session }
    }

    pub fn screen(&self) -> String {
        sh("tmux", &["capture-pane", "-p", "-t", &self.session])
    }

    pub fn alternate_screen(&self) -> bool {
        sh(
            "tmux",
            &["display", "-p", "-t", &self.session, "#{alternate_on}"],
        )
        .trim()
            == "1"
    }

    pub fn keys(&self, keys: &str) {
        sh("tmux", &["send-keys", "-t", &self.session, keys]);
    }

    /// Waits until `text` is off the screen.
    pub fn wait_for_gone(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.screen().contains(text) {
            assert!(Instant::now() < deadline, "{text:?} never went away");
            thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn wait_for(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "{text:?} never appeared:\n{screen}"
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// The pid of iotop-bpf: the child of the pane's shell.
    pub fn tool_pid(&self) -> i32 {
        let shell: i32 = sh(
            "tmux",
            &["display", "-p", "-t", &self.session, "#{pane_pid}"],
        )
        .trim()
        .parse()
        .unwrap();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // Fields after the parenthesised comm: state, ppid, ...
            let after = &stat[stat.rfind(')').unwrap() + 2..];
            if after.split(' ').nth(1).and_then(|p| p.parse::<i32>().ok()) == Some(shell) {
                return pid;
            }
        }
        panic!("no child of the pane's shell {shell}");
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.session])
            .status();
    }
}
