//! Paths of the workspace and small helpers around `std::process::Command`.

use std::{
    env,
    ffi::{OsStr, OsString},
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context, Result, bail};

/// The workspace root: xtask lives one level below it.
pub fn root_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent directory")
        .to_path_buf()
}

/// The binary every task builds and uses: the static one (musl) for this machine, which is
/// what ships.
pub fn release_binary() -> PathBuf {
    crate::target::Target::HOST.binary()
}

/// Downloads `url` into `dir` once, checked against its pinned SHA-256; returns the file.
pub fn download(url: &str, sha256: &str, dir: &Path) -> Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let name = url
        .rsplit('/')
        .next()
        .unwrap_or(url)
        .replace("%2b", "+")
        .replace("%7e", "~");
    let file = dir.join(name);
    let checked = |file: &Path| -> Result<bool> {
        Ok(file.exists()
            && stdout_of(cmd("sha256sum").arg(file))?
                .split_whitespace()
                .next()
                == Some(sha256))
    };
    if !checked(&file)? {
        println!("downloading {url}");
        run(cmd("curl")
            .args(["-fsSL", "--retry", "3", "-o"])
            .arg(&file)
            .arg(url))
        .with_context(|| {
            format!(
                "download {url}; if the mirror dropped this version, pin a newer one in xtask/src"
            )
        })?;
        if !checked(&file)? {
            bail!("{} does not match its pinned SHA-256", file.display());
        }
    }
    Ok(file)
}

/// `~/.cargo/bin` (or `$CARGO_HOME/bin`): where rustup and `cargo install` put binaries.
fn cargo_bin_dir() -> Option<PathBuf> {
    env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")))
        .map(|home| home.join("bin"))
}

/// PATH for child processes: cargo's bin dir first, so that tools installed by this very run
/// (bpf-linker) are found even when the user's shell never sourced `~/.cargo/env`.
pub fn child_path() -> OsString {
    let mut dirs: Vec<PathBuf> = cargo_bin_dir().into_iter().collect();
    dirs.extend(env::var_os("PATH").iter().flat_map(env::split_paths));
    dirs.dedup();
    env::join_paths(dirs).unwrap_or_else(|_| env::var_os("PATH").unwrap_or_default())
}

/// A command run from the workspace root with [`child_path`] as PATH.
pub fn cmd(program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new(program);
    command.current_dir(root_dir()).env("PATH", child_path());
    command
}

pub fn find_in_path(name: &str) -> Option<PathBuf> {
    env::split_paths(&child_path())
        .map(|dir| dir.join(name))
        .find(|path| {
            fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Effective uid 0, from /proc (no libc needed).
pub fn is_root() -> bool {
    fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|uids| uids.split_whitespace().nth(1))
            == Some("0")
    })
}

/// `program` run as root: directly when we are root, else through `sudo` (with `env` for the
/// variables, since sudo drops the caller's environment).
pub fn as_root(program: &str, vars: &[(&str, &str)]) -> Result<Command> {
    if is_root() {
        let mut command = cmd(program);
        command.envs(vars.iter().copied());
        return Ok(command);
    }
    if find_in_path("sudo").is_none() {
        bail!("`{program}` needs root, and sudo is not installed: rerun as root");
    }
    let mut command = cmd("sudo");
    if !vars.is_empty() {
        command
            .arg("env")
            .args(vars.iter().map(|(k, v)| format!("{k}={v}")));
    }
    command.arg(program);
    Ok(command)
}

/// The command line as a user would type it (PATH shown only when it differs from ours).
pub fn describe(command: &Command) -> String {
    let quote = |s: &OsStr| {
        let s = s.to_string_lossy();
        if s.is_empty() || s.contains(|c: char| c.is_whitespace() || "'\"$\\".contains(c)) {
            format!("'{}'", s.replace('\'', r"'\''"))
        } else {
            s.into_owned()
        }
    };
    let ours = child_path();
    let mut words = Vec::new();
    for (key, value) in command.get_envs() {
        let Some(value) = value else { continue };
        if key == "PATH" {
            if value == ours {
                continue;
            }
            let value = value.to_string_lossy();
            let ours = ours.to_string_lossy();
            match value.strip_suffix(&*ours) {
                Some(prefix) => words.push(format!("PATH={prefix}$PATH")),
                None => words.push(format!("PATH={}", quote(OsStr::new(&*value)))),
            }
            continue;
        }
        words.push(format!("{}={}", key.to_string_lossy(), quote(value)));
    }
    words.push(quote(command.get_program()));
    words.extend(command.get_args().map(quote));
    words.join(" ")
}

/// Runs with inherited stdio; an error unless it exits 0.
pub fn run(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("could not start `{}`", describe(command)))?;
    if !status.success() {
        bail!("`{}` failed ({status})", describe(command));
    }
    Ok(())
}

/// Runs capturing stdout (stderr shown in the error); an error unless it exits 0.
pub fn stdout_of(command: &mut Command) -> Result<String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("could not start `{}`", describe(command)))?;
    if !output.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            describe(command),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_shows_variables_and_quotes() {
        let mut command = cmd("apt-get");
        command
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "a b"]);
        assert_eq!(
            describe(&command),
            "DEBIAN_FRONTEND=noninteractive apt-get install -y 'a b'"
        );

        let mut path = OsString::from("/usr/lib/llvm-22/bin:");
        path.push(child_path());
        command.env("PATH", path);
        assert!(describe(&command).contains(" PATH=/usr/lib/llvm-22/bin:$PATH apt-get "));
    }
}
